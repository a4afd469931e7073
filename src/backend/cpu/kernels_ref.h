// Scalar reference versions of the kernels in kernels.h: straightforward loops in f32 (f64 where
// it costs nothing), single-threaded. Tests compare the fast kernels against these; they are also
// the definition of what each kernel computes. Thread-safety: pure functions on caller memory.
#pragma once

#include <span>

#include "backend/cpu/kernels.h"

namespace strata::cpu::ref {

// Dequantizes each weight row and accumulates in double.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);
void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps);
void rope(float* x, const int32_t* pos, int64_t n_tokens, int32_t n_heads, int32_t head_dim, const RopeParams& p);
void silu_mul(float* gate, const float* up, int64_t n);
void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n_tokens);
// Reads every key and value row through kv_row(), so warm blocks are decoded by the warm tier's
// reference decoder (kv/warm_format.h: warm_decode_row).
void paged_attention(const float* q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                     float scale, float* out);
// Softmax in place with max subtraction.
void softmax(float* x, int64_t n);
// Row (block, slot, kv head) of K or V as f32 into out[head_dim]: hot ids (< kv.n_hot_blocks) from
// the arena, host ids (>= kv.host_base) from their host slot, warm sub-block ids decoded with
// warm_decode_row.
void kv_row(const KvLayerView& kv, bool value, BlockId block, int32_t slot, int32_t head, float* out);
// Element (block, slot, head, d) of K or V as f32 (hot or warm, as kv_row).
float kv_read(const KvLayerView& kv, bool value, BlockId block, int32_t slot, int32_t head, int32_t d);

}  // namespace strata::cpu::ref
