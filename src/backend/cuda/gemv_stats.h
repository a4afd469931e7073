// What the lazy-norm GEMVs (matmul.cu's gemv_add_norm and the *_normed consumers) did, in plain C++
// (no CUDA headers), for tests that must know the decode step took them: the CUDA op suite checks
// that matmul_add_rms_norm left its norm pending and the consumers applied it.
// Thread-safety: the counters are atomic.
#pragma once

#include <cstdint>

#include "gguf/tensor_type.h"

namespace strata::cuda::gemv_stats {

// Launches since the process started of the producer (residual add + x * g + partial sums of
// squares) and of the consumers (products times r).
int64_t norm_producer_launches();
int64_t norm_consumer_launches();
// Launches of the 8-bit quantization of x before a GEMV (kernels.h, gemv_xq_bytes; not counted
// where the kernel that wrote x wrote its 8-bit form too), and whether the GEMVs over
// weights of `type` take it (STRATA_CUDA_GEMV_Q8X).
int64_t xq_launches();
// Launches of the one-row producers that wrote their output's 8-bit form too (GemvXq::out).
int64_t xq_out_launches();
// Of those, the launches of the staged form (weights copied into shared memory; GemvXq::out_staged).
int64_t xq_staged_launches();
// Launches of the staged one-row GEMVs that write floats (the QKV projection, the LM head; GemvXq::out_staged).
int64_t gemv_staged_launches();
bool xq_type(GgmlType type);

}  // namespace strata::cuda::gemv_stats
