// The threads of tensor parallelism's ranks: rank 0 is the calling thread (the engine thread),
// ranks 1..N-1 are threads of their own that live as long as the group, so that each rank's
// backend (and its thread pool) is always driven by the same thread.
//
// Thread-safety: run() is called by one thread at a time (the engine thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class RankGroup {
 public:
  explicit RankGroup(int32_t n);
  ~RankGroup();  // joins the threads
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int32_t size() const { return n_; }
  // Calls fn(r) for every rank r, fn(0) on the calling thread, and returns when all have returned.
  // Precondition: fn does not throw (a rank catches its own errors and says so through its result).
  void run(const std::function<void(int32_t)>& fn);

 private:
  void worker(int32_t rank);

  const int32_t n_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int32_t)>* job_ = nullptr;
  uint64_t generation_ = 0;  // bumped by run(): a new job
  int32_t pending_ = 0;      // ranks 1..N-1 still running the current job
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata
