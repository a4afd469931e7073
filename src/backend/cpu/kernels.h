// CPU kernels used by the forward pass. Each is a free function over plain pointers with its
// shapes in the comment; shapes are checked by the caller (model/), not in the inner loops.
// Every kernel here has a scalar twin in kernels_ref.h that tests compare against; the versions
// here use SIMD chosen at run time (Highway) and the thread pool.
// Thread-safety: kernels may run concurrently on disjoint outputs; the ThreadPool& they take must
// not be used by another thread at the same time.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backend/op_types.h"
#include "core/thread_pool.h"
#include "gguf/tensor_type.h"
#include "kv/kv_types.h"

namespace strata::cpu {

// The plain parameter types are the backend interface's (backend/op_types.h); the kernels take
// host pointers in them.
using strata::AttentionSeq;
using strata::RopeParams;
using strata::WeightMatrix;

// Weight types matmul() accepts.
bool matmul_supports(GgmlType type);

// Per-thread-of-control scratch memory reused across calls (quantized activations, converted
// weight slices, attention state), so the per-token path does not allocate once it has grown.
// One per engine thread. get() invalidates pointers returned by earlier get() calls.
struct KernelScratch {
  static constexpr size_t kAlign = 64;  // a cache line: per-thread regions start on one
  std::vector<uint8_t> bytes;
  // At least n bytes, kAlign-aligned.
  uint8_t* get(size_t n) {
    if (bytes.size() < n + kAlign) bytes.resize(n + kAlign);
    const auto addr = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + ((kAlign - addr % kAlign) % kAlign);
  }
};

// y[n][w.rows] = x[n][w.cols] · Wᵀ, accumulating in f32. x rows are contiguous (stride w.cols),
// y rows too (stride w.rows).
//   F32/F16/BF16 weights: exact f32 products (f16/bf16 widened exactly), f32 sums.
//   Quantized weights: each x row is quantized to 8 bits on the fly (blocks of 32 with an f32
//   scale for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, of 256 for the K-quants, as ggml's Q8_0/Q8_1/Q8_K) and the
//   block dot products are exact integer sums, scaled and accumulated in f32.
// Each output y[t][r] is computed by the same sequence of operations whatever n and the thread
// count are, so a row's result does not depend on the batch it is in (bit for bit on one machine).
// Preconditions: matmul_supports(w.type); w.cols a multiple of the type's block size; x and y do
// not overlap.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool, KernelScratch& scratch);

// One weight matrix of a fused matmul and where its output goes: y[n][w->rows].
struct MatmulJob {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
};

// How matmul/matmul_multi share the rows of a call of fewer than 16 tokens (weights streamed from
// memory, each thread at its own rate) among the pool's threads, which take chunks in order until
// none are left. kGuided: each chunk is 2/3 of the rows not yet in a chunk over the thread count
// (at least 64 KiB of weights and 16 rows), so a call starts with long streams and ends with short
// chunks: on the Xeon VM 0-4% faster than kFixed on llama-1b, 10% on llama-134m Q4_K, never slower
// beyond the noise (docs/PERFORMANCE.md, issue 17). kFixed: about 4 chunks per thread, the last
// thread's worth cut 4 times finer (before 2026-12-05). Results are the same bits either way (a
// row's arithmetic does not depend on its chunk). Process-wide; kGuided until set (CpuBackend:
// STRATA_CPU_DECODE_CHUNKS=guided|fixed).
enum class DecodeChunks : uint8_t { kGuided = 0, kFixed = 1 };
void set_decode_chunks(DecodeChunks chunks);
DecodeChunks decode_chunks();

// Runs several matrices over the same input in one pool dispatch (Q/K/V, gate/up): for each job,
// y = x · wᵀ as matmul() computes it (same results bit for bit). The input is quantized once per
// activation format the jobs need. Preconditions: as matmul() for each job; all jobs have the
// same cols; no output overlaps x or another output.
void matmul_multi(std::span<const MatmulJob> jobs, const float* x, int64_t n, ThreadPool& pool,
                  KernelScratch& scratch);

// y[r][:] = x[r][:] / sqrt(mean(x[r]²) + eps) * weight, for r < n_rows; x, y: [n_rows][dim]
// (y may equal x).
void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps);

// Rotary embedding in place: x [n_tokens][n_heads][head_dim], token t at position pos[t]. The
// angles are computed once per token (in double, reduced mod 2π) for all heads.
// Precondition: n_rot even, <= head_dim and <= 1024.
void rope(float* x, const int32_t* pos, int64_t n_tokens, int32_t n_heads, int32_t head_dim, const RopeParams& p);

// gate[i] = silu(gate[i]) * up[i] for i < n.
void silu_mul(float* gate, const float* up, int64_t n);

// y[i] += x[i] for i < n.
void add_inplace(float* y, const float* x, int64_t n);

// Writes keys and values of n_tokens new tokens into their slots:
// k, v: [n_tokens][n_kv_heads * head_dim] (f32); slots[t] = block * block_size + offset.
void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n_tokens);

// AttentionSeq: backend/op_types.h.
// out[t][h][:] = softmax(q[t][h] · Kᵀ * scale) · V over the sequence's keys, for every query
// head h (kv head = h / (n_head / n_kv_heads)). q, out: [n_tokens][n_head][head_dim].
// Online softmax in f32 per KV block (attention.cpp); work is spread over (sequence, kv head, tile
// of query rows) on the pool, and a query's result does not depend on the rest of the batch.
// Preconditions: n_head % n_kv_heads == 0; every block table covers its positions.
void paged_attention(const float* q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                     float scale, float* out, ThreadPool& pool, KernelScratch& scratch);

// Row r of an embedding table (any matmul-supported type) into out[cols].
void get_row(const WeightMatrix& table, int64_t r, float* out);

// The SIMD target the kernels dispatch to on this CPU ("AVX2", "AVX3_DL", "SCALAR", ...): the best
// of the compiled targets (simd_compiled_targets(), a mask of HWY_* bits) the CPU supports.
std::string_view simd_target_name();
int64_t simd_compiled_targets();
// Restricts every kernel to one compiled target, by its Highway name (case-insensitive: "AVX2",
// "AVX3", "AVX3_DL", ...), process-wide: STRATA_CPU_TARGET, read by CpuBackend, so one machine can
// measure a narrower target's kernels. Throws std::invalid_argument for a name not compiled in or
// a target this CPU does not support, naming the ones it does.
void restrict_simd_target(std::string_view name);

}  // namespace strata::cpu
