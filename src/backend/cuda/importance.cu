// Attention importance on the CUDA backend (AttentionSeq::importance, --kv-evict): the softmax mass
// each cached key received from the counted query rows of its sequence, summed over all query
// heads, accumulated over the layers of a pass. Two kernels after a layer's attention, reading the
// same q (rotated) and the same K rows (hot or warm, through row_src / row_elem) as attention:
//
//   importance_lse_kernel: one warp per (sequence, counted row, head): the log-sum-exp of that
//     query's scores over its causal keys (lanes take keys, online max/sum, merged by shuffles)
//     into lse[row][head];
//   importance_mass_kernel: one thread per (sequence, key): Σ over counted rows that see the key
//     and over heads of exp(score - lse), written (first layer of the pass) or added (later layers)
//     into the sequence's region of the packed mass buffer.
//
// The attention kernels are not touched: importance costs these two launches per layer, and only
// passes that ask for it pay them. Deterministic: every sum has a fixed order (a thread owns a key;
// the layers run in stream order), so the same pass gives the same bits.
// Thread-safety: launchers are called from the engine thread only.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_rows.cuh"

namespace strata::cuda {
namespace {

constexpr int kLseWarps = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kMassThreads = 128;

__device__ __forceinline__ float key_dot(const float* q, const RowSrc& r, int32_t hd) {
  float acc = 0.0f;
  for (int32_t d = 0; d < hd; ++d) acc = fmaf(q[d], row_elem(r, d), acc);
  return acc;
}

__global__ void __launch_bounds__(kLseWarps * 32) importance_lse_kernel(const float* __restrict__ q, KvLayerView kv,
                                                                        AttnBatch b, const ImpSeqDev* __restrict__ imp,
                                                                        int32_t n_head, float scale, float* lse) {
  __shared__ float qs[kLseWarps][kMaxHeadDim];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t si = static_cast<int32_t>(blockIdx.x), h = static_cast<int32_t>(blockIdx.y);
  const AttnSeqDev sq = b.seqs[si];
  const ImpSeqDev is = imp[si];
  const int32_t i = static_cast<int32_t>(blockIdx.z) * kLseWarps + warp;
  if (is.off < 0 || i >= sq.n_q || i < is.from) return;  // whole warps leave; no block-wide barrier below
  const int32_t hd = kv.head_dim, bs = kv.block_size, group = n_head / kv.n_kv_heads, kvh = h / group;
  const int64_t row = int64_t{sq.q_begin} + i;
  const float* qv = q + (row * n_head + h) * hd;
  for (int32_t d = lane; d < hd; d += 32) qs[warp][d] = qv[d];
  __syncwarp();
  const int32_t* table = b.tables + sq.table_offset;
  const int32_t n_vis = sq.start_pos + i + 1;
  float m = -INFINITY, l = 0.0f;
  for (int32_t k = lane; k < n_vis; k += 32) {
    const RowSrc r = row_src(kv, false, table[k / bs], k % bs, kvh);
    const float s = key_dot(qs[warp], r, hd) * scale;
    const float m2 = fmaxf(m, s);
    l = l * __expf(m - m2) + __expf(s - m2);
    m = m2;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o), lo = __shfl_xor_sync(0xffffffffu, l, o);
    const float m2 = fmaxf(m, mo);
    l = (m == -INFINITY ? 0.0f : l * __expf(m - m2)) + (mo == -INFINITY ? 0.0f : lo * __expf(mo - m2));
    m = m2;
  }
  if (lane == 0) lse[row * n_head + h] = m + __logf(l);
}

__global__ void __launch_bounds__(kMassThreads) importance_mass_kernel(const float* __restrict__ q, KvLayerView kv,
                                                                       AttnBatch b, const ImpSeqDev* __restrict__ imp,
                                                                       int32_t n_head, float scale,
                                                                       const float* __restrict__ lse, float* mass,
                                                                       bool accumulate) {
  const int32_t si = static_cast<int32_t>(blockIdx.x);
  const AttnSeqDev sq = b.seqs[si];
  const ImpSeqDev is = imp[si];
  const int32_t k = static_cast<int32_t>(blockIdx.y) * kMassThreads + static_cast<int32_t>(threadIdx.x);
  const int32_t keys = sq.start_pos + sq.n_q;
  if (is.off < 0 || k >= keys) return;
  const int32_t hd = kv.head_dim, bs = kv.block_size, group = n_head / kv.n_kv_heads;
  const int32_t* table = b.tables + sq.table_offset;
  const int32_t id = table[k / bs], slot = k % bs;
  // Rows that see key k: start_pos + i >= k.
  const int32_t i0 = max(is.from, max(0, k - sq.start_pos));
  float sum = 0.0f;
  for (int32_t kvh = 0; kvh < kv.n_kv_heads; ++kvh) {
    const RowSrc r = row_src(kv, false, id, slot, kvh);
    for (int32_t i = i0; i < sq.n_q; ++i) {
      const int64_t row = int64_t{sq.q_begin} + i;
      for (int32_t g = 0; g < group; ++g) {
        const int32_t h = kvh * group + g;
        const float s = key_dot(q + (row * n_head + h) * hd, r, hd) * scale;
        sum += __expf(s - lse[row * n_head + h]);
      }
    }
  }
  float* dst = mass + is.off + k;
  *dst = accumulate ? *dst + sum : sum;
}

}  // namespace

void attention_importance(const float* q, const KvLayerView& kv, const AttnBatch& b, const ImpSeqDev* imp,
                          int32_t n_head, float scale, float* lse, float* mass, bool accumulate, cudaStream_t s) {
  if (b.n_seqs <= 0 || b.max_ctx <= 0) return;
  const dim3 lse_grid(static_cast<unsigned>(b.n_seqs), static_cast<unsigned>(n_head),
                      static_cast<unsigned>((b.max_n_q + kLseWarps - 1) / kLseWarps));
  importance_lse_kernel<<<lse_grid, kLseWarps * 32, 0, s>>>(q, kv, b, imp, n_head, scale, lse);
  STRATA_CUDA_LAUNCH_CHECK();
  const dim3 mass_grid(static_cast<unsigned>(b.n_seqs), static_cast<unsigned>((b.max_ctx + kMassThreads - 1) / kMassThreads));
  importance_mass_kernel<<<mass_grid, kMassThreads, 0, s>>>(q, kv, b, imp, n_head, scale, lse, mass, accumulate);
  STRATA_CUDA_LAUNCH_CHECK();
}

namespace {

// One block per move: the token row of K, then of V (n_kv_heads * head_dim elements), in 4-byte
// words when the row allows, else bytes.
__global__ void move_rows_kernel(KvLayerView kv, const int32_t* __restrict__ src, const int32_t* __restrict__ dst,
                                 int64_t row_bytes) {
  const int64_t from = int64_t{src[blockIdx.x]} * row_bytes, to = int64_t{dst[blockIdx.x]} * row_bytes;
  if (row_bytes % 4 == 0) {
    const int64_t n = row_bytes / 4;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
      reinterpret_cast<uint32_t*>(kv.k + to)[e] = reinterpret_cast<const uint32_t*>(kv.k + from)[e];
      reinterpret_cast<uint32_t*>(kv.v + to)[e] = reinterpret_cast<const uint32_t*>(kv.v + from)[e];
    }
  } else {
    for (int64_t e = threadIdx.x; e < row_bytes; e += blockDim.x) {
      kv.k[to + e] = kv.k[from + e];
      kv.v[to + e] = kv.v[from + e];
    }
  }
}

}  // namespace

void kv_move_rows(const KvLayerView& kv, const int32_t* src, const int32_t* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  move_rows_kernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, src, dst, kv.token_stride_bytes());
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata::cuda
