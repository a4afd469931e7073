#include "model/rank_group.h"

#include "core/check.h"

namespace strata {

RankGroup::RankGroup(int32_t n) : n_(n) {
  STRATA_CHECK(n >= 1);
  for (int32_t r = 1; r < n; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankGroup::~RankGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankGroup::run(const std::function<void(int32_t)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    pending_ = n_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void RankGroup::worker(int32_t rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int32_t)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(rank);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --pending_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace strata
