// A circuit breaker for a remote service (the remote KV tier): after `threshold` consecutive
// failures it opens for a back-off period (doubling after each failed probe, up to a maximum),
// during which callers do not try at all; when the period has passed, one caller is let through
// as a probe: its success closes the breaker, its failure opens it again for longer.
// Time is passed in, so tests drive it with a fake clock.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace strata {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    int32_t threshold = 3;
    std::chrono::milliseconds backoff{1000};
    std::chrono::milliseconds max_backoff{30000};
  };
  CircuitBreaker() : CircuitBreaker(Options{}) {}
  explicit CircuitBreaker(Options o) : o_(o), backoff_(o.backoff) {}

  // May the caller try now? False while open; when the back-off has passed, true for exactly one
  // caller (the probe) until that caller reports.
  bool allow(Clock::time_point now);
  // Whether allow(now) could say yes (closed, or open with the back-off passed), changing nothing:
  // for work that is queued now and tried later.
  bool ready(Clock::time_point now) const;
  void success();
  void failure(Clock::time_point now);

  bool open() const;            // open or probing (not closed)
  int64_t trips() const;        // times it opened from closed
  std::chrono::milliseconds current_backoff() const;

 private:
  enum class State : uint8_t { kClosed, kOpen, kProbing };
  const Options o_;
  mutable std::mutex mutex_;
  State state_ = State::kClosed;
  int32_t failures_ = 0;
  std::chrono::milliseconds backoff_;
  Clock::time_point open_until_{};
  int64_t trips_ = 0;
};

}  // namespace strata
