// Collectives between the ranks of tensor parallelism (--tensor-parallel N): every rank runs the
// same layer loop on its shard of the weights and meets the others at an all-reduce after the
// attention output and feed-forward down projections (and after the vocabulary-split embedding),
// and at an all-gather of the vocabulary-split logits.
//
// A rank is a thread of this process driving its own backend (model/rank_group.h); the ranks of one
// communicator call each collective in the same order, each with its own buffers of one shape.
// make_host_communicator is the implementation for ranks whose buffers are host memory (CPU
// backends): shared memory and a barrier. A device implementation (NCCL) keeps the interface.
//
// Failure: a rank that cannot go on (an exception in its forward pass) calls abort(); every rank
// waiting in a collective, and every later call, then throws CommAborted instead of waiting for a
// rank that will never come. The communicator is unusable afterwards.
//
// Thread-safety: each rank calls from its own thread; abort() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "core/error.h"

namespace strata {

// Thrown by a collective after abort(): another rank failed.
class CommAborted : public Error {
 public:
  CommAborted() : Error("tensor parallelism: another rank failed") {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t size() const = 0;
  // Every rank passes its own x (same rows and cols on every rank); afterwards every rank's x holds
  // the element-wise sum over the ranks, added in rank order (x_0 + x_1 + ... + x_{N-1}), so every
  // rank holds the same bits and the result does not depend on timing.
  virtual void all_reduce_sum(int32_t rank, ActView x) = 0;
  // local: [rows][cols] on every rank; out: [rows][cols * size()]; afterwards every rank's
  // out[r][k * cols + j] = local_k[r][j] (rank k's block of columns: the vocabulary-split logits).
  // out must not overlap any rank's local.
  virtual void all_gather(int32_t rank, ActView local, ActView out) = 0;
  // Returns once every rank has called it.
  virtual void barrier(int32_t rank) = 0;
  // Wakes every rank waiting in a collective with CommAborted; later calls throw it too.
  virtual void abort() = 0;
  virtual bool aborted() const = 0;

  // The all-reduces and all-gathers rank `rank` made since start and the wall seconds spent in them, waiting
  // for the other ranks included (so a rank that arrives first also counts the others' lateness).
  // Written by the rank's thread; read it when the ranks are idle (between forward passes).
  struct Stats {
    int64_t calls = 0;
    double seconds = 0;
  };
  virtual Stats stats(int32_t rank) const = 0;
};

// Adds the wall time of its scope to a Stats (the implementations' collectives).
class CollectiveTimer {
 public:
  explicit CollectiveTimer(Communicator::Stats& s) : s_(s), t0_(std::chrono::steady_clock::now()) {}
  ~CollectiveTimer() {
    s_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ++s_.calls;
  }
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  Communicator::Stats& s_;
  std::chrono::steady_clock::time_point t0_;
};

// Ranks whose ActViews are host memory (CPU backends), n >= 1. Each collective is two barriers: rank
// r sums (or copies) its own share of the elements, reading every rank's buffer, between them.
std::unique_ptr<Communicator> make_host_communicator(int32_t n);

// Ranks that are GPU backends (CUDA, one GPU each: Backend::device_ordinal()), through NCCL
// (backend/cuda/nccl_communicator.h). Throws strata::Error in a build without CUDA, or when NCCL
// cannot be loaded or initialised.
std::unique_ptr<Communicator> make_device_communicator(std::span<Backend* const> ranks);

}  // namespace strata
