// A persistent pool of worker threads for data-parallel kernels. The calling thread takes part as
// worker 0, so a pool of N threads starts N-1 OS threads. Dispatch is a generation counter that
// workers spin on briefly before sleeping, so back-to-back kernels (one per layer and op) cost
// microseconds, not a futex round trip each.
// Thread-safety: run()/parallel_for() may be called by one thread at a time (the engine thread);
// they are not re-entrant (a task must not call back into the same pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // n_threads >= 1 (the caller counts as one).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of the size() threads and waits for all.
  void run(const std::function<void(int)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(begin, end) for
  // each, one chunk per thread; waits for all. Runs inline when one chunk suffices.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Physical cores of this machine (sysfs topology), at least 1.
  static int physical_cores();

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace strata
