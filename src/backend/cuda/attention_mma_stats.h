// What the tensor-core attention path (attention_mma.cu) and the latency decode kernel
// (attention.cu's attention_decode_hot_kernel) did, in plain C++ (no CUDA headers), for tests that
// must know a batch took that kernel: the CUDA op suite checks that its prefill chunks over warm
// tables reach the first, and its small decode batches over hot tables the second.
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
// false when STRATA_CUDA_HOT_DECODE=0 sends every decode batch to attention_decode_kernel.
bool hot_decode_enabled();
// Launches of attention_decode_hot_kernel since the process started.
int64_t hot_decode_launches();

}  // namespace strata::cuda::attn
