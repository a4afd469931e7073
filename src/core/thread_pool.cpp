#include "core/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() \
  do {                     \
  } while (0)
#endif

namespace strata {
namespace {
constexpr int kSpinIterations = 1 << 14;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      STRATA_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*task_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  task_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    // The lock orders the generation bump with a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  fn(0);
  while (pending_.load(std::memory_order_acquire) != 0) STRATA_CPU_RELAX();
  task_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, max_chunks));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t) {
    if (t >= chunks) return;
    const int64_t begin = n * t / chunks;
    const int64_t end = n * (t + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

int ThreadPool::physical_cores() {
  std::set<std::pair<std::string, std::string>> cores;
  const long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
  for (long cpu = 0; cpu < n_cpu; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
    std::string p, c;
    if (pkg >> p && core >> c) cores.emplace(p, c);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max<int>(1, static_cast<int>(n_cpu));
}

}  // namespace strata
