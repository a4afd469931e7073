// What the tensor-core attention path (attention_mma.cu) did, in plain C++ (no CUDA headers), for
// tests that must know a batch took that kernel: the CUDA op suite checks that its prefill chunks
// over warm tables reach it.
// Thread-safety: the counter is atomic; mma_enabled reads the environment once.
#pragma once

#include <cstdint>

namespace strata::cuda::attn {

// false when STRATA_CUDA_MMA_ATTN=0 sends every batch to the FP32 kernels.
bool mma_enabled();
// false when STRATA_CUDA_MMA_WARM=0 sends views with a warm tier to the FP32 kernels.
bool mma_warm_enabled();
// Launches of the tensor-core kernel since the process started.
int64_t mma_launches();

}  // namespace strata::cuda::attn
