// Kernel launches with programmatic dependent launch (PDL, sm_90): a kernel launched by
// launch_pdl may start while the kernel before it on the stream is still running. Until it calls
// pdl_wait() it must read nothing that an earlier kernel writes and write nothing at all; after
// pdl_wait() every earlier kernel of the stream has completed and its writes are visible. What it
// may do before: read weights (constant for the whole run) and its own parameters. So a GEMV loads
// its first weight pieces while the norm or attention kernel before it still runs, and the fixed
// cost of each launch (grid start, DRAM latency of the first loads) overlaps the previous kernel.
//
// pdl_trigger() lets the next kernel of the stream launch (once every block of this grid has
// called it or exited); kernels call it right after pdl_wait(), a few before it where the next
// kernel's earlier start measured faster (the latency decode attention and its split merge, the
// one-row quantization of a GEMV's x, the one-row F16/BF16 GEMVs and producers). Either way
// the next kernel's pdl_wait() waits for this one to complete, and this one completes only after
// its own wait, so "every earlier kernel has completed" still holds. Both are no-ops on a kernel launched without the attribute, and below
// sm_90.
//
// Rule for kernels launched by launch_pdl: every block calls pdl_wait() before it exits (a grid
// whose blocks all left without waiting could complete before its predecessor, and its successor
// would then wait on too little).
//
// STRATA_CUDA_PDL=0 launches every kernel without the attribute (fully serialised, as <<<>>>).
// Stream capture into CUDA graphs keeps the programmatic edges.
// Thread-safety: launch_pdl may be called from any thread; pdl_enabled() is read once.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace strata::cuda {

// The step trace (a diagnostic, built with -DSTRATA_CUDA_STEP_TRACE=ON; cuda_backend.cpp): while
// c_step_trace.rec is set, thread 0 of every block appends one record of 4 words to it: the
// globaltimer before and after its pdl_wait(), (blocks of the grid << 32 | linear block index),
// (threads of the block << 32 | multiprocessor); step_trace_stamp(ph) appends (t, t, (900000 + ph)
// << 32 | block, 0), a phase of that block. A kernel's records follow its predecessor's (its waits
// return after the predecessor completes), which is what scripts/cuda/step_trace.py groups by. Each
// record costs thread 0 an atomic round trip (~0.25 us on an H100), so traced times run long.
// Without the option the hooks are empty.
#if defined(STRATA_CUDA_STEP_TRACE)
namespace {
__constant__ StepTraceDev c_step_trace;
[[maybe_unused]] void step_trace_set_local(const StepTraceDev& t, cudaStream_t s) {
  STRATA_CUDA(cudaMemcpyToSymbolAsync(c_step_trace, &t, sizeof t, 0, cudaMemcpyHostToDevice, s));
}
}  // namespace

__device__ __forceinline__ unsigned long long* step_trace_slot() {
  const unsigned i = atomicAdd(c_step_trace.n, 1u);
  return i < c_step_trace.cap ? c_step_trace.rec + 4ull * i : nullptr;
}
#endif

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if defined(STRATA_CUDA_STEP_TRACE)
  if (c_step_trace.rec != nullptr && threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    unsigned long long t0, t1;
    unsigned smid;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)::"memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)::"memory");
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (unsigned long long* r = step_trace_slot()) {
      r[0] = t0;
      r[1] = t1;
      r[2] = (static_cast<unsigned long long>(gridDim.x * gridDim.y * gridDim.z) << 32) |
             (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
      r[3] = (static_cast<unsigned long long>(blockDim.x * blockDim.y * blockDim.z) << 32) | smid;
    }
    return;
  }
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Phase ph of this block in the step trace (thread 0; nothing without the option).
__device__ __forceinline__ void step_trace_stamp([[maybe_unused]] int ph) {
#if defined(__CUDA_ARCH__) && defined(STRATA_CUDA_STEP_TRACE)
  if (c_step_trace.rec != nullptr && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    if (unsigned long long* r = step_trace_slot()) {
      r[0] = r[1] = t;
      r[2] = (static_cast<unsigned long long>(900000 + ph) << 32) | blockIdx.x;
      r[3] = 0;
    }
  }
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// True unless STRATA_CUDA_PDL=0 (read once per process).
inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// kernel<<<grid, block, smem, s>>>(args...) with the programmatic-serialisation attribute (when
// pdl_enabled()); checks the launch.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  STRATA_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace strata::cuda
