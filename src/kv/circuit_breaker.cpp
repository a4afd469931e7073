#include "kv/circuit_breaker.h"

#include <algorithm>

namespace strata {

bool CircuitBreaker::allow(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (state_) {
    case State::kClosed: return true;
    case State::kProbing: return false;  // one probe at a time
    case State::kOpen:
      if (now < open_until_) return false;
      state_ = State::kProbing;
      return true;
  }
  return false;
}

bool CircuitBreaker::ready(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_ == State::kClosed || (state_ == State::kOpen && now >= open_until_);
}

void CircuitBreaker::success() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = State::kClosed;
  failures_ = 0;
  backoff_ = o_.backoff;
}

void CircuitBreaker::failure(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::kProbing) {  // the probe failed: open again, for longer
    backoff_ = std::min(backoff_ * 2, o_.max_backoff);
    state_ = State::kOpen;
    open_until_ = now + backoff_;
    return;
  }
  if (state_ == State::kOpen) return;  // a late report of a call made before it opened
  if (++failures_ >= o_.threshold) {
    state_ = State::kOpen;
    open_until_ = now + backoff_;
    ++trips_;
  }
}

bool CircuitBreaker::open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_ != State::kClosed;
}

int64_t CircuitBreaker::trips() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return trips_;
}

std::chrono::milliseconds CircuitBreaker::current_backoff() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return backoff_;
}

}  // namespace strata
