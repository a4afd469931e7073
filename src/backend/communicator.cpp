#include "backend/communicator.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"

namespace strata {
namespace {

// A reusable barrier of n threads that abort() opens for good (waiters throw CommAborted). Spins
// briefly (a collective of a decode step is microseconds apart on every rank), then sleeps.
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int32_t n) : n_(n) {}

  void wait() {
    if (aborted_.load(std::memory_order_acquire)) throw CommAborted();
    const uint64_t g = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);  // before the release below: nobody passes earlier
      {
        std::lock_guard<std::mutex> lock(mutex_);
        gen_.fetch_add(1, std::memory_order_release);
      }
      cv_.notify_all();
      return;
    }
    for (int i = 0; i < kSpins; ++i) {
      if (gen_.load(std::memory_order_acquire) != g) return;
      if (aborted_.load(std::memory_order_acquire)) throw CommAborted();
      if (i >= kSpins / 2) std::this_thread::yield();  // the ranks may share cores with others
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return gen_.load(std::memory_order_acquire) != g || aborted_.load(std::memory_order_acquire); });
    if (gen_.load(std::memory_order_acquire) == g) throw CommAborted();
  }

  void abort() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  static constexpr int kSpins = 4000;
  const int32_t n_;
  std::atomic<int32_t> arrived_{0};
  std::atomic<uint64_t> gen_{0};
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

class HostCommunicator final : public Communicator {
 public:
  explicit HostCommunicator(int32_t n) : n_(n), views_(static_cast<size_t>(n)), stats_(static_cast<size_t>(n)), barrier_(n) {
    STRATA_CHECK(n >= 1);
  }

  int32_t size() const override { return n_; }

  void all_reduce_sum(int32_t rank, ActView x) override {
    CollectiveTimer timer(stats_.at(static_cast<size_t>(rank)));
    publish(rank, x);
    const int64_t n = x.size();
    // Rank r adds up elements [r*n/N, (r+1)*n/N) of every rank's buffer, in rank order, and writes
    // the sum into every buffer: each element is summed once, by one rank, so all get its bits.
    const int64_t b = n * rank / n_, e = n * (rank + 1) / n_;
    for (int32_t k = 0; k < n_; ++k) {
      STRATA_CHECK(views_[static_cast<size_t>(k)].rows == x.rows && views_[static_cast<size_t>(k)].cols == x.cols,
                   "all_reduce_sum: rank {} passed [{}][{}], rank {} [{}][{}]", k, views_[static_cast<size_t>(k)].rows,
                   views_[static_cast<size_t>(k)].cols, rank, x.rows, x.cols);
    }
    for (int64_t i = b; i < e; ++i) {
      float s = views_[0].data[i];
      for (int32_t k = 1; k < n_; ++k) s += views_[static_cast<size_t>(k)].data[i];
      for (int32_t k = 0; k < n_; ++k) views_[static_cast<size_t>(k)].data[i] = s;
    }
    barrier_.wait();  // nobody reuses its buffer (or the views_ entry) before every share is written
  }

  void all_gather(int32_t rank, ActView local, ActView out) override {
    STRATA_CHECK(out.rows == local.rows && out.cols == local.cols * n_);
    CollectiveTimer timer(stats_.at(static_cast<size_t>(rank)));
    publish(rank, local);
    for (int32_t k = 0; k < n_; ++k) {
      const ActView& src = views_[static_cast<size_t>(k)];
      STRATA_CHECK(src.rows == local.rows && src.cols == local.cols, "all_gather: ranks disagree on the shape");
      for (int64_t r = 0; r < local.rows; ++r) {
        std::memcpy(out.data + r * out.cols + k * local.cols, src.data + r * local.cols,
                    static_cast<size_t>(local.cols) * sizeof(float));
      }
    }
    barrier_.wait();
  }

  void barrier(int32_t rank) override {
    STRATA_CHECK(rank >= 0 && rank < n_);
    barrier_.wait();
  }

  void abort() override { barrier_.abort(); }
  bool aborted() const override { return barrier_.aborted(); }
  Stats stats(int32_t rank) const override { return stats_.at(static_cast<size_t>(rank)); }

 private:
  // Makes x visible to the other ranks and waits until every rank has done so.
  void publish(int32_t rank, ActView x) {
    STRATA_CHECK(rank >= 0 && rank < n_);
    views_[static_cast<size_t>(rank)] = x;
    barrier_.wait();
  }

  const int32_t n_;
  std::vector<ActView> views_;  // entry r: written by rank r before the first barrier of a collective
  std::vector<Stats> stats_;    // entry r: rank r's
  AbortableBarrier barrier_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(int32_t n) { return std::make_unique<HostCommunicator>(n); }

}  // namespace strata
