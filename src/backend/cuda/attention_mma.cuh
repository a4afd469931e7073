// The tensor-core path of paged attention (attention_mma.cu), for attention.cu's dispatcher:
// chunks of prompt (any batch with a sequence of n_q > 1) over f16/bf16 KV with head_dim 64 or 128,
// hot blocks, blocks in host slots and warm (int8/fp8/int4) sub-blocks alike. Everything else
// keeps attention.cu's FP32 kernels.
// Thread-safety: launchers are called from the engine thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "kv/kv_types.h"

namespace strata::cuda::attn {

// Whether launch_mma takes this layer's KV (dtype, head_dim, 16-byte aligned hot rows; any warm
// format).
bool mma_eligible(const KvLayerView& kv);
// Splits of the context per block of query vectors that launch_mma uses for a batch of this shape
// (max_ctx may be an upper bound of the batch's contexts).
int32_t mma_splits(int32_t n_tokens, int32_t n_head, int32_t max_ctx);
// Launches the tensor-core kernel (precondition: mma_eligible(kv)). With one split it writes out[];
// with nsplit = mma_splits(...) > 1 it writes the partials {m, l, acc[hd]} of every (token, head)
// row and split to b.scratch, for attention.cu's combine kernel. Returns nsplit.
int32_t launch_mma(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
                   cudaStream_t s);

}  // namespace strata::cuda::attn
