// Host-side launchers of the CUDA backend's kernels (each implemented in a .cu file of this
// folder). Every pointer argument is device memory unless its comment says "host"; every launcher
// enqueues its work on `stream` and returns at once (no synchronisation), checking the launch with
// STRATA_CUDA_LAUNCH_CHECK. Shapes are checked by the caller (CudaBackend), not here.
//
// Numerics: activations are f32 in device memory, as on CPU; products accumulate in f32; KV and
// warm-tier bytes are exactly those of the CPU formats (kv/kv_types.h, kv/warm_format.h), so a
// block can move between host and device unchanged and attention reads what the CPU would.
// Thread-safety: launchers are called from the engine thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>

#include "backend/op_types.h"
#include "kv/kv_types.h"
#include "kv/warm_format.h"

namespace strata::cuda {

// The step trace's buffer (launch.cuh; -DSTRATA_CUDA_STEP_TRACE=ON): rec = 4 words per record, n its
// count (zeroed by the caller), cap the records it holds; rec null: off. One setter per
// translation unit of kernels (each has its own copy of the constant).
struct StepTraceDev {
  unsigned long long* rec = nullptr;
  unsigned* n = nullptr;
  unsigned cap = 0;
};
void step_trace_set_attention(const StepTraceDev& t, cudaStream_t s);
void step_trace_set_elementwise(const StepTraceDev& t, cudaStream_t s);
void step_trace_set_importance(const StepTraceDev& t, cudaStream_t s);
void step_trace_set_matmul(const StepTraceDev& t, cudaStream_t s);


// --- elementwise (elementwise.cu) ------------------------------------------------------------

// out[t][:] = row tokens[t] of an F32/F16/BF16 table as f32 (quantized tables: dequantize_rows_f32).
void embed_float_table(const WeightMatrix& table, const int32_t* tokens, int64_t n, float* out, cudaStream_t s);
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w ; y may equal x. y16 (optional, [rows][cols] IEEE
// half): the same values rounded to half, exactly as f32_to_16bit would (for the next cuBLAS GEMM).
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps, cudaStream_t s,
              void* y16 = nullptr);
// In place, x [n][n_heads * head_dim], row t at pos[t]. inv_freq: [n_rot / 2] doubles
// freq_base^(-2i / n_rot) (device memory, computed on the host as the CPU reference does);
// n_rot <= 512.
void rope(float* x, const int32_t* pos, int64_t n, int32_t n_heads, int32_t head_dim, const RopeParams& p,
          const double* inv_freq, cudaStream_t s);
// gate = silu(gate) * up; out16 (optional, n halves): the results rounded to half, as f32_to_16bit.
void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s, void* out16 = nullptr);
// hi = bf16(x), lo = bf16(x - hi) (n elements each): the two halves of a split-precision bf16 product.
void f32_to_bf16_split(const float* src, int64_t n, void* hi, void* lo, cudaStream_t s);
// x += d, then y = rms_norm(x) * w; x, d, y [rows][cols]; y16 as rms_norm's.
void add_rms_norm(float* x, const float* d, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                  cudaStream_t s, void* y16 = nullptr);
// RoPE of q [n][n_head * head_dim] and k [n][n_kv * head_dim] in place, then k and v (roped k) into
// their KV slots, exactly as rope() twice and kv_store().
void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n, int32_t n_head, int32_t n_kv,
                   int32_t head_dim, const RopeParams& p, const double* inv_freq, const KvLayerView& kv,
                   const int32_t* slots, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);
void gather_rows(const float* src, int64_t cols, const int32_t* rows, int64_t n, float* dst, cudaStream_t s);
// out[r] = the lowest index of the largest value of row r of x [rows][cols] (NaN never the largest):
// the host's max_logit + argmax_index (sample/logit_kernels.h); -1 when that value is not finite
// (every value -inf or NaN, or a +inf). embed[r]: the same with 0 for -1.
void greedy_pick(const float* x, int64_t rows, int64_t cols, int32_t* out, int32_t* embed, cudaStream_t s);
// Fills n floats of a read-bandwidth probe with a reduction (the result is written to *sink).
void read_probe(const float4* data, int64_t n4, float* sink, cudaStream_t s);
// Hints that bring up to kL2Ranges byte ranges (weights) into L2, from a stream beside the decode
// step's chain (CudaBackend::Impl::side_pf_mode). mode 0: bulk prefetches (cp.async.bulk.prefetch.L2) of
// `chunk` bytes; 1: one prefetch.global.L2::evict_last per 128-byte line. No completion: hints only.
constexpr int kL2Ranges = 8;
struct L2Ranges {
  const uint8_t* p[kL2Ranges] = {};
  uint64_t bytes[kL2Ranges] = {};
  int n = 0;
};
void l2_prefetch(const L2Ranges& r, int blocks, uint32_t chunk, int mode, cudaStream_t s);

// --- matmul (matmul.cu) ----------------------------------------------------------------------

// Weight types the kernels read in their GGUF blocks.
bool matmul_type_supported(GgmlType t);  // F32, F16, BF16, Q8_0, Q4_K, Q6_K
// y[n][w.rows] = x[n][w.cols] . w^T with f32 accumulation, read straight from the weight's blocks;
// for small n (decode): one pass over the weights for all n rows of x. n <= kGemvMaxRows.
inline constexpr int64_t kGemvMaxRows = 8;
// The 8-bit x of a GEMV (every entry below): buf, a device buffer of gemv_xq_bytes(w.type, n, w.cols)
// bytes, or null. Where gemv_xq_bytes is not 0 and buf is given, the GEMV reads x quantized to 8
// bits in groups of 32 (xq.cuh) instead of the f32 x (Q4_K: byte dot products instead of float
// FMAs; Q6_K, Q8_0 likewise): quantized by a launch of its own first, or, with ready, already in
// buf (written by the kernel that wrote x: paged_attention / rope_kv_store_attention). A row's
// result still depends on that row of x alone. Null: the f32 x.
// out (the producers only: gemv_silu_mul, gemv_silu_mul_normed, gemv_add_norm; where
// gemv_xq_out says yes, else null): a buffer of xq_bytes(1, rows) other than buf, where the launch
// also writes the 8-bit form of its output (gemv_add_norm: of h), the bytes a quantization of that
// output would write, so that the GEMV after it takes it with ready.
// out_rows_per_warp: 1 (blocks of 32 warps, one row each) or 2 (16 warps of two rows: the default).
struct GemvXq {
  void* buf = nullptr;
  bool ready = false;
  void* out = nullptr;
  int out_rows_per_warp = 2;
  // Nonzero: the staged form where its rows fit shared memory (else the register form): for the
  // producers (matmul.cu's gemv_xq_staged_kernel) 1 = the SwiGLU at four rows per warp and the
  // lazy-norm producers at two, 2 or 4 = that many rows per warp for both; for the one-row GEMVs
  // that write floats (gemv, gemv_multi, gemv_multi_normed: gemv_staged_kernel) any nonzero value,
  // four rows per warp, but 3: gemv_multi_normed's only (the lazy norm's consumers).
  int out_staged = 0;
  // Nonzero: the staged form only where a block's rows take at most this many bytes of shared memory.
  uint64_t out_staged_max_bytes = 0;
  // The staged producers' shared memory: 0 (the default) = chosen per launch (4 where they fit in one
  // wave of blocks, else the ring; Q4_K's where the block's 32 rows do not fit shared memory: the
  // register form); kStageSlotsAutoRing = as 0, but the ring for Q4_K too; 2 or 4 = that many 8-row
  // slots (4: the block's 32 rows at once, where they fit; 2: a ring).
  int out_staged_slots = 0;
};
inline constexpr int kStageSlotsAutoRing = -1;
// STRATA_CUDA_GEMV_EARLY_TRIGGER's value as the one-row GEMVs read it (matmul.cu, gemv_early_trigger):
// 0 = "0" (none triggers the next kernel before its wait), 1 = unset or empty (F16/BF16), 2 = "all"
// (every type), 3 = "q4_k" (F16/BF16 and Q4_K); -1 for any other value (CudaBackend rejects it).
int gemv_early_trigger_mode(std::string_view value);
// Whether a producer of `rows` outputs over weights of `type` (cols, row_bytes) at n rows of x
// writes its output's 8-bit form when asked (GemvXq::out): one row of x, weights whose GEMV reads
// 8-bit x (gemv_xq_bytes), rows a multiple of 32, rows on one warp each.
bool gemv_xq_out(GgmlType type, int64_t n, int64_t rows, int64_t cols, uint64_t row_bytes);
void gemv(const WeightMatrix& w, const float* x, int64_t n, float* y, cudaStream_t s, GemvXq xq = {});
// Bytes of the quantized x for a GEMV of n rows of cols over weights of `type`: xq_bytes(n, cols)
// where the GEMVs take it (Q4_K and Q6_K; STRATA_CUDA_GEMV_Q8X=0: none, =q4_k: Q4_K, =all: Q8_0 too), else 0
// (f32 x).
int64_t gemv_xq_bytes(GgmlType type, int64_t n, int64_t cols);
// Bytes of n rows of cols quantized to 8 bits (1.5 n cols; 0 unless cols % 32 == 0): n cols bytes,
// then a float2 per 16 values.
int64_t xq_bytes(int64_t n, int64_t cols);
// ys[i][n][ws[i].rows] = x . ws[i]^T for i < count (<= 4) in one launch (e.g. Q, K, V or gate, up
// on the same x); all ws[i] of one type and one cols (else throws). ws, ys: host arrays. Each
// result is bit-identical to gemv(ws[i], x, n, ys[i]).
void gemv_multi(const WeightMatrix* ws, float* const* ys, int count, const float* x, int64_t n, cudaStream_t s,
                GemvXq xq = {});
// out[n][gate.rows] = silu(x . gate^T) * (x . up^T) in one launch (gate and up of one type and
// shape), each product bit-identical to gemv's and the SiLU to silu_mul's. n <= kGemvMaxRows.
void gemv_silu_mul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n, float* out,
                   cudaStream_t s, GemvXq xq = {});
// Lazy norm (Backend::matmul_add_rms_norm, PendingNorm): n <= kGemvMaxRows.
// gemv_add_norm: with d = in[n][w.cols] . w^T as gemv computes it, x[n][w.rows] += d (add()'s
// arithmetic), h = x * g (g [w.rows]), and parts[i][q] = the sum, in column order, of the squares
// of row i's x values in the q-th group of columns (a group size fixed by w's shape, never by n:
// a row's partials are the same bits in any batch); returns the parts per row, which
// gemv_add_norm_parts(w, n) gives without launching.
int64_t gemv_add_norm_parts(const WeightMatrix& w, int64_t n);
int64_t gemv_add_norm(const WeightMatrix& w, const float* in, int64_t n, float* x, const float* g, float* h, float* parts,
                      cudaStream_t s, GemvXq xq = {});
// gemv_multi / gemv_silu_mul of h = x * g whose products are then multiplied by
// r_i = 1 / sqrt(sum_p parts[i][p] / cols + eps) (the sum in double, in a fixed order; every block
// computes the same r_i): the products of RMSNorm(x) * g, not bit-identical to them.
void gemv_multi_normed(const WeightMatrix* ws, float* const* ys, int count, const float* h, int64_t n,
                       const float* parts, int32_t n_parts, float eps, cudaStream_t s, GemvXq xq = {});
void gemv_silu_mul_normed(const WeightMatrix& gate, const WeightMatrix& up, const float* h, int64_t n, float* out,
                          const float* parts, int32_t n_parts, float eps, cudaStream_t s, GemvXq xq = {});
// h[i][:] *= r_i as above (the same r_i bits as the GEMVs): the normed rows of a pending norm.
void norm_resolve(float* h, int64_t rows, int64_t cols, const float* parts, int32_t n_parts, float eps, cudaStream_t s);
// Rows [r0, r0 + nr) of w dequantized to IEEE half (dst [nr][w.cols], row-major), for the
// cuBLAS path of quantized weights (one matrix at a time, never the whole model).
void dequantize_to_f16(const WeightMatrix& w, int64_t r0, int64_t nr, void* dst, cudaStream_t s);
// out[t][:] = row rows[t] of a quantized w (Q8_0/Q4_K/Q6_K) as f32, exactly dequantize_row's values
// (embedding lookups of quantized tables). Added by the lead after matmul.cu's block decoders.
void dequantize_rows_f32(const WeightMatrix& w, const int32_t* rows, int64_t n, float* out, cudaStream_t s);
// dst[i] = src[i] rounded to half (bf16 = false) or bfloat16 (bf16 = true), round to nearest even.
void f32_to_16bit(const float* src, int64_t n, void* dst, bool bf16, cudaStream_t s);

// --- KV (kv.cu, attention.cu) ----------------------------------------------------------------

// K/V rows of n new tokens ([n][n_kv_heads * head_dim] f32) into their slots (slot = block *
// block_size + offset) in kv.dtype (round to nearest even, as core/fp16.h).
void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n,
              cudaStream_t s);
// warm_encode() of kv/warm_format.h on the device, byte for byte: `span` hot blocks (ids in
// `blocks`, device memory) of one layer into one warm slot (k_slot, v_slot).
void warm_encode(WarmFormat f, const KvLayerView& hot, const int32_t* blocks, int32_t span, uint8_t* k_slot,
                 uint8_t* v_slot, cudaStream_t s);
// The same for n warm slots of one layer in one launch: slot dst_slots[i] (K at
// hot.warm_k + slot * hot.warm_k_slot_bytes, V likewise) from blocks [i * span, (i + 1) * span).
void warm_encode_many(WarmFormat f, const KvLayerView& hot, const int32_t* blocks, int32_t span,
                      const int32_t* dst_slots, int64_t n, cudaStream_t s);
// Warm sub-block `id` (>= kv.n_hot_blocks) to f32 rows k, v [block_size][n_kv_heads * head_dim],
// exactly warm_decode_row's values.
void warm_decode(const KvLayerView& kv, BlockId id, float* k, float* v, cudaStream_t s);
// Many small copies in one launch (KV block transfers: the gather into a staging buffer before a
// device -> host copy, the scatter out of one after a host -> device copy): pieces[i].bytes bytes
// from pieces[i].src to pieces[i].dst (device memory; pieces: device memory, [n]); no piece
// overlaps another's destination. 16-byte moves where a piece's addresses and size allow.
struct CopyPiece {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t bytes;
};
void batched_copy(const CopyPiece* pieces, int64_t n, cudaStream_t s);

// One sequence of an attention batch as the kernels read it (device memory): rows [q_begin,
// q_begin + n_q) of q/out at positions start_pos.., block table at tables + table_offset
// (n_blocks ids: hot ids < kv.n_hot_blocks, warm sub-block ids above, as KvLayerView says).
struct AttnSeqDev {
  int32_t q_begin;
  int32_t n_q;
  int32_t start_pos;
  int32_t n_blocks;
  int32_t table_offset;
};

// What the caller (CudaBackend) knows of the whole batch, computed on the host.
struct AttnBatch {
  const AttnSeqDev* seqs = nullptr;  // [n_seqs]
  const int32_t* tables = nullptr;   // flattened block tables
  int32_t n_seqs = 0;
  int32_t n_tokens = 0;       // sum of n_q
  int32_t max_n_q = 0;        // largest n_q
  int32_t max_ctx = 0;        // largest start_pos + n_q
  // Context the decode launch plan (warps per block, key splits; attention_splits) is made for;
  // 0: max_ctx. In a recorded pass max_ctx is the padded table's length, and the plan is made for
  // decode_plan_ctx(longest context) instead, so that short contexts under a long padded table do
  // not pay for splits, and the kernel that merges them, that they do not need. Any value gives a
  // correct result (the kernels split the real context at run time); only the launch shape changes.
  int32_t plan_ctx = 0;
  float* scratch = nullptr;   // attention_scratch_floats(...) floats for split-context partials
  // Importance asked (null: off): every attention kernel writes each split's final (max, sum) of
  // its keys, imp_ml[row][split][2] (row = token * n_head + head; max = -INF: no key), so that the
  // mass needs no log-sum-exp pass; the decode kernel (max_n_q == 1) also writes every scaled
  // score, imp_scores[row][key] (stride imp_stride >= max_ctx), and importance_decode_mass turns
  // them into mass without a second pass over K.
  float* imp_scores = nullptr;
  int64_t imp_stride = 0;
  float* imp_ml = nullptr;
};

// The context a recorded decode pass plans for: the longest context rounded up to a power of two,
// at least 128 (4 warps of 32 keys), so that one recording serves contexts up to twice as long.
inline int32_t decode_plan_ctx(int32_t ctx) {
  int32_t p = 128;
  while (p < ctx && p < (1 << 30)) p *= 2;
  return p;
}

// Floats of scratch that paged_attention needs for a batch of this shape.
int64_t attention_scratch_floats(int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t max_ctx);
// out[t][h] = softmax(q[t][h] . K^T * scale) . V, causal, over each sequence's block table; GQA
// (kv head = h / (n_head / n_kv_heads)); f32 math, reading hot f32/f16/bf16 and warm
// int8/fp8/int4 rows (decoded in the inner loop exactly as warm_decode_row).
// xq: a buffer of xq_bytes(b.n_tokens, n_head * head_dim) for the output's 8-bit form (GemvXq), or
// null; returns whether it was written (decode batches that the latency kernel takes, head_dim %
// 32 == 0), the bytes a GEMV's own quantization of out would have written.
bool paged_attention(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                     float* out, cudaStream_t s, void* xq = nullptr);
// Splits of the keys paged_attention (and rope_kv_store_attention) use for a batch of this shape:
// the second dimension of AttnBatch::imp_ml.
int32_t attention_splits(const KvLayerView& kv, const AttnBatch& b, int32_t n_head);
// Whether rope_kv_store_attention takes the batch: decode only (one new token per sequence),
// head_dim <= 256, n_rot even and <= head_dim.
bool rope_attention_fusable(const KvLayerView& kv, const AttnBatch& b, int32_t n_rot);
// rope_kv_store(q, k, v, pos, ..., slots) then paged_attention(q, ...) in one decode kernel, with
// the same results (out and the KV arena bit-identical); q and k are left unrotated; xq as
// paged_attention's. Precondition: rope_attention_fusable.
bool rope_kv_store_attention(const float* q, const float* k, const float* v, const int32_t* pos,
                             const int32_t* slots, const RopeParams& p, const double* inv_freq, const KvLayerView& kv,
                             const AttnBatch& b, int32_t n_head, float scale, float* out, cudaStream_t s,
                             void* xq = nullptr);

// --- importance (importance.cu) -----------------------------------------------------------------

// Per sequence of an attention batch: the first counted query row (AttentionSeq::importance_from)
// and the offset of its keys in the packed mass buffer, or off = -1 when it did not ask.
struct ImpSeqDev {
  int32_t from;
  int32_t off;
};
inline constexpr int32_t kImportanceMaxHeadDim = 256;
// Scratch sizes (floats) of attention_importance for a batch shape: the partial mass sums
// (`parts` of mass_floats each, mass_floats >= every sequence's off + keys).
struct ImportanceScratch {
  int32_t parts = 0;
  int64_t part_floats = 0;
};
ImportanceScratch importance_scratch(int32_t n_kv_heads, int32_t max_n_q, int64_t mass_floats);
// Adds one layer's importance into the partials: part[p][off + k] (= when !accumulate, the pass's
// first layer; += after) such that Σ_p part[p][off + k] = Σ over rows i >= from of the sequence
// that see key k and over all query heads h of softmax_k(q[i][h] . K^T * scale), for every key
// k < start_pos + n_q of every sequence that asked; q as paged_attention read it (rotated).
// head_dim <= kImportanceMaxHeadDim. Deterministic (no atomics).
// lse_part: the attention kernel's AttnBatch::imp_ml of this layer, with its `nsplit` splits.
void attention_importance(const float* q, const KvLayerView& kv, const AttnBatch& b, const ImpSeqDev* imp,
                          int32_t n_head, float scale, const float* lse_part, int32_t nsplit, float* part,
                          int64_t mass_floats, bool accumulate, cudaStream_t s);
// The layers one importance_decode_mass launch sums: n of them, layer l's scores at
// b.imp_scores + l * score_stride and its splits' (max, sum) at b.imp_ml + l * ml_stride.
struct ImpDecodeLayers {
  int32_t n = 1;
  int64_t score_stride = 0;
  int64_t ml_stride = 0;
};
// Shared memory of importance_decode_mass (floats, 48 KiB): an lse per layer and head, a sum per
// layer and key of its tile.
inline constexpr int32_t kImportanceDecodeSmemFloats = 12288;
// The most layers one importance_decode_mass launch takes for n_head heads (>= 1).
int32_t importance_decode_layers_max(int32_t n_head);
// The same sums for a decode batch whose attention wrote AttnBatch::imp_scores / imp_ml (one
// partial: part[off + k]), over `layers` (<= importance_decode_layers_max) in layer order: per key
// and layer, Σ over all query heads (in head order) of exp(score - lse), lse merged from the
// splits' (max, sum) in split order; the layers' sums added in layer order to part (= the first
// when !accumulate). A sequence with no counted row (n_q != 1 or from > 0) gets 0 (= ) or nothing
// (+=). Deterministic; the same bits as one launch per layer. pdl: launched with programmatic
// dependent launch (right after the attention kernel), else plainly.
void importance_decode_mass(const AttnBatch& b, const ImpSeqDev* imp, int32_t n_head, int32_t nsplit,
                            const ImpDecodeLayers& layers, float* part, bool accumulate, bool pdl, cudaStream_t s);
// mass[j] = Σ_p part[p][j] (in p order), j < n: the pass's sums, after its last layer.
void importance_reduce(const float* part, int32_t n_parts, int64_t part_stride, int64_t n, float* mass, cudaStream_t s);
// Token rows (K and V) of hot slot src[i] to hot slot dst[i], i < n (src, dst: device memory).
void kv_move_rows(const KvLayerView& kv, const int32_t* src, const int32_t* dst, int64_t n, cudaStream_t s);
// K rows of hot slots slots[i] to out + i * row, then their V rows to out + (n + i) * row, i < n
// (row = kv.token_stride_bytes(); slots, out: device memory).
void kv_read_rows(const KvLayerView& kv, const int32_t* slots, int64_t n, uint8_t* out, cudaStream_t s);

}  // namespace strata::cuda
