#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/error.h"

namespace strata::cuda {
namespace {

struct NcclApi {
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

template <typename F>
void load_symbol(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) fail("tensor parallelism: libnccl.so.2 has no symbol {}", name);
}

const NcclApi& nccl_api() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen((std::string(STRATA_CUDA_LIB_DIR) + "/libnccl.so.2").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      error = fmt::format("tensor parallelism: cannot load libnccl.so.2 ({}); put the CUDA toolkit's lib64 on LD_LIBRARY_PATH",
                          dlerror());
      return;
    }
    load_symbol(lib, "ncclCommInitAll", api.init_all);
    load_symbol(lib, "ncclCommDestroy", api.destroy);
    load_symbol(lib, "ncclCommAbort", api.abort);
    load_symbol(lib, "ncclAllReduce", api.all_reduce);
    load_symbol(lib, "ncclAllGather", api.all_gather);
    load_symbol(lib, "ncclGetErrorString", api.error_string);
  });
  if (!error.empty()) throw Error(error);
  return api;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("tensor parallelism: {}: {}", what, cudaGetErrorString(e));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::span<Backend* const> ranks) : api_(nccl_api()), ranks_(ranks.begin(), ranks.end()) {
    const auto n = static_cast<int32_t>(ranks_.size());
    STRATA_CHECK(n >= 1);
    for (Backend* b : ranks_) {
      STRATA_CHECK(b != nullptr && b->device_ordinal() >= 0, "NCCL ranks must be CUDA backends");
      devices_.push_back(b->device_ordinal());
    }
    // Never NVLink SHARP (multicast objects): set before NCCL reads its environment.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    comms_.resize(static_cast<size_t>(n));
    const ncclResult_t r = api_.init_all(comms_.data(), n, devices_.data());
    if (r != ncclSuccess) fail("tensor parallelism: ncclCommInitAll over {} GPUs failed: {}", n, api_.error_string(r));
    streams_.resize(static_cast<size_t>(n));
    stats_.resize(static_cast<size_t>(n));
    gather_.resize(static_cast<size_t>(n));
    gather_bytes_.assign(static_cast<size_t>(n), 0);
    for (int32_t i = 0; i < n; ++i) {
      check_cuda(cudaSetDevice(devices_[static_cast<size_t>(i)]), "cudaSetDevice");
      check_cuda(cudaStreamCreateWithFlags(&streams_[static_cast<size_t>(i)], cudaStreamNonBlocking), "cudaStreamCreate");
    }
  }

  ~NcclCommunicator() override {
    for (size_t i = 0; i < comms_.size(); ++i) {
      (void)cudaSetDevice(devices_[i]);
      (void)cudaStreamSynchronize(streams_[i]);
      if (aborted_.load()) {
        (void)api_.abort(comms_[i]);
      } else {
        (void)api_.destroy(comms_[i]);
      }
      if (gather_[i] != nullptr) (void)cudaFree(gather_[i]);
      (void)cudaStreamDestroy(streams_[i]);
    }
  }

  int32_t size() const override { return static_cast<int32_t>(comms_.size()); }

  void all_reduce_sum(int32_t rank, ActView x) override {
    CollectiveTimer timer(stats_.at(static_cast<size_t>(rank)));
    const auto i = enter(rank);
    check_nccl(api_.all_reduce(x.data, x.data, static_cast<size_t>(x.size()), ncclFloat, ncclSum, comms_[i], streams_[i]));
    wait(i);
  }

  void all_gather(int32_t rank, ActView local, ActView out) override {
    CollectiveTimer timer(stats_.at(static_cast<size_t>(rank)));
    const auto i = enter(rank);
    const int64_t n = size();
    STRATA_CHECK(out.rows == local.rows && out.cols == local.cols * n);
    // NCCL gathers whole buffers rank after rank ([N][rows][cols]); the logits want each rank's
    // columns within every row ([rows][N * cols]): gathered into scratch, then one 2-D copy per rank.
    const uint64_t bytes = static_cast<uint64_t>(out.size()) * sizeof(float);
    if (gather_bytes_[i] < bytes) {
      if (gather_[i] != nullptr) check_cuda(cudaFree(gather_[i]), "cudaFree");
      gather_[i] = nullptr;
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&gather_[i]), bytes), "cudaMalloc");
      gather_bytes_[i] = bytes;
    }
    const auto count = static_cast<size_t>(local.size());
    check_nccl(api_.all_gather(local.data, gather_[i], count, ncclFloat, comms_[i], streams_[i]));
    const size_t width = static_cast<size_t>(local.cols) * sizeof(float);
    for (int64_t k = 0; k < n; ++k) {
      check_cuda(cudaMemcpy2DAsync(out.data + k * local.cols, static_cast<size_t>(out.cols) * sizeof(float),
                                   gather_[i] + k * static_cast<int64_t>(count), width, width,
                                   static_cast<size_t>(local.rows), cudaMemcpyDeviceToDevice, streams_[i]),
                 "cudaMemcpy2DAsync");
    }
    wait(i);
  }

  void barrier(int32_t rank) override {
    const auto i = enter(rank);
    // An all-reduce of nothing in particular: a scratch float of this rank's.
    if (gather_[i] == nullptr) {
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&gather_[i]), sizeof(float)), "cudaMalloc");
      gather_bytes_[i] = sizeof(float);
    }
    check_nccl(api_.all_reduce(gather_[i], gather_[i], 1, ncclFloat, ncclSum, comms_[i], streams_[i]));
    wait(i);
  }

  void abort() override {
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    // Wakes the collectives in flight: their streams finish (with an error) and wait() throws.
    for (ncclComm_t c : comms_) (void)api_.abort(c);
  }
  bool aborted() const override { return aborted_.load(); }
  Stats stats(int32_t rank) const override { return stats_.at(static_cast<size_t>(rank)); }

 private:
  // The rank's GPU selected and its backend's ops done: the collective reads what they wrote.
  size_t enter(int32_t rank) {
    STRATA_CHECK(rank >= 0 && rank < size());
    if (aborted_.load()) throw CommAborted();
    const auto i = static_cast<size_t>(rank);
    check_cuda(cudaSetDevice(devices_[i]), "cudaSetDevice");
    ranks_[i]->synchronize();
    return i;
  }
  // Polls the collective's stream, so that an abort() by another rank is seen.
  void wait(size_t i) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(streams_[i]);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        (void)cudaGetLastError();
        if (aborted_.load()) throw CommAborted();
        fail("tensor parallelism: a collective failed on GPU {}: {}", devices_[i], cudaGetErrorString(e));
      }
      if (aborted_.load()) throw CommAborted();
      std::this_thread::yield();
    }
    if (aborted_.load()) throw CommAborted();
  }
  void check_nccl(ncclResult_t r) {
    if (r == ncclSuccess) return;
    if (aborted_.load()) throw CommAborted();
    fail("tensor parallelism: NCCL error: {}", api_.error_string(r));
  }

  const NcclApi& api_;
  std::vector<Backend*> ranks_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<float*> gather_;  // per rank: all_gather's scratch on its GPU
  std::vector<uint64_t> gather_bytes_;
  std::vector<Stats> stats_;  // per rank, written by its thread
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::span<Backend* const> ranks) {
  return std::make_unique<NcclCommunicator>(ranks);
}

}  // namespace strata::cuda
