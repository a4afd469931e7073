// Attention importance on the CUDA backend (AttentionSeq::importance, --kv-evict): the softmax mass
// each cached key received from the counted query rows of its sequence, summed over all query
// heads, accumulated over the layers of a pass. Every attention kernel writes, when a batch asks,
// each split's final (max, sum) per query row (AttnBatch::imp_ml), so the log-sum-exp of every row
// is known without a pass of its own; then:
//
//   decode batches (every sequence one query row): the decode kernel also writes every scaled
//     score (AttnBatch::imp_scores), and importance_decode_mass_kernel (block per sequence and
//     tile of 256 keys) merges each head's lse from the splits and sums exp(score - lse) over the
//     heads per key — no second pass over K: one small kernel per layer;
//   other batches (prefill chunks): importance_mass_kernel, block per (sequence, key tile, chunk
//     of 64 counted rows x kv head), stages a tile of KT keys (as f32) and of query vectors in
//     shared memory and sums, per key, exp(q.k * scale - lse) over the chunk's rows that see it and
//     the kv head's query heads, reading the same q (rotated) and K rows (hot or warm, through
//     row_src / row_elem) as attention; partials per chunk and kv head, which
//     importance_reduce_kernel adds in order when the pass is collected.
//
// The first layer of a pass writes the sums (=), the next ones add (+=). Deterministic: every sum
// has a fixed order (no atomics; the layers run in stream order), so the same pass gives the same
// bits.
// Thread-safety: launchers are called from the engine thread only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_rows.cuh"
#include "backend/cuda/launch.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerChunk = 64;  // mass kernel: counted rows per block (prefill splits its rows)

// Keys per shared tile: KT * head_dim <= 8192 floats (~32 KB with padding); KT / kWarps <= 32.
__host__ __device__ __forceinline__ int tile_keys(int32_t hd) { return hd <= 64 ? 128 : (hd <= 128 ? 64 : 32); }
// Query vectors staged at once.
__host__ __device__ __forceinline__ int tile_vecs(int32_t hd) { return hd <= 128 ? 16 : 8; }

// Keys [k0, min(k0 + KT, k_end)) of kv head kvh (as f32, row stride hd + 1) into Ks. A warp per key
// (its lanes over the channels, up to 8 each); each lane first fetches one table entry, so the
// warp's keys' rows are located without a dependent table load per key, and the loads of four keys
// are issued (into registers) before any is stored, so that many are in flight at once.
__device__ __forceinline__ void load_k_tile(const KvLayerView& kv, const int32_t* __restrict__ table, int32_t kvh,
                                            int32_t k0, int32_t k_end, int KT, float* __restrict__ Ks) {
  constexpr int kKeysInFlight = 4, kMaxPerLane = kImportanceMaxHeadDim / 32;
  const int32_t hd = kv.head_dim, bs = kv.block_size;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int per = KT / kWarps;  // <= 32
  int32_t my_id = 0;
  {
    const int32_t k = k0 + warp + lane * kWarps;
    if (lane < per && k < k_end) my_id = table[k / bs];
  }
  for (int j0 = 0; j0 < per; j0 += kKeysInFlight) {
    float v[kKeysInFlight][kMaxPerLane];
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      const int j = j0 + u;
      const int32_t id = __shfl_sync(0xffffffffu, my_id, j & 31);
      const int32_t k = k0 + warp + j * kWarps;
      if (j < per && k < k_end) {
        const RowSrc r = row_src(kv, false, id, k % bs, kvh);
#pragma unroll
        for (int e = 0; e < kMaxPerLane; ++e) {
          const int32_t d = lane + 32 * e;
          v[u][e] = d < hd ? row_elem(r, d) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      const int j = j0 + u;
      const int32_t k = k0 + warp + j * kWarps;
      if (j >= per || k >= k_end) continue;
      const int key = warp + j * kWarps;
#pragma unroll
      for (int e = 0; e < kMaxPerLane; ++e) {
        const int32_t d = lane + 32 * e;
        if (d < hd) Ks[key * (hd + 1) + d] = v[u][e];
      }
    }
  }
}

// The log-sum-exp of a row from the attention kernel's per-split {max, sum} (AttnBatch::imp_ml),
// merged in split order; splits that got no key (max = -INF) are skipped. The loads of kBatch
// splits are issued before any is merged (independent loads in flight instead of one dependent
// load per split; the merge order, hence every bit, is that of a split-by-split loop).
template <int kBatch = 8>
__device__ __forceinline__ float merged_lse(const float* __restrict__ ml, int32_t nsplit) {
  float M = -INFINITY, L = 0.0f;
  for (int32_t sp0 = 0; sp0 < nsplit; sp0 += kBatch) {
    float mt[kBatch], lt[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const bool in = sp0 + u < nsplit;
      mt[u] = in ? ml[2 * (sp0 + u)] : -INFINITY;
      lt[u] = in ? ml[2 * (sp0 + u) + 1] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (mt[u] == -INFINITY) continue;
      const float m2 = fmaxf(M, mt[u]);
      L = (M == -INFINITY ? 0.0f : L * __expf(M - m2)) + lt[u] * __expf(mt[u] - m2);
      M = m2;
    }
  }
  return M + __logf(L);
}

__device__ __forceinline__ float dot_shared(const float* a, const float* b, int32_t hd) {
  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
  int32_t d = 0;
  for (; d + 4 <= hd; d += 4) {
    acc0 = fmaf(a[d], b[d], acc0);
    acc1 = fmaf(a[d + 1], b[d + 1], acc1);
    acc2 = fmaf(a[d + 2], b[d + 2], acc2);
    acc3 = fmaf(a[d + 3], b[d + 3], acc3);
  }
  for (; d < hd; ++d) acc0 = fmaf(a[d], b[d], acc0);
  return (acc0 + acc1) + (acc2 + acc3);
}

// One block per (sequence, tile of KT keys, chunk of kRowsPerChunk counted rows x kv head): the kv
// head's key tile in shared memory; thread t takes key t % KT for the chunk's vectors of that head
// t / KT, + parts, ..., summing exp(score - lse) (lse merged from the splits' partials in split
// order); the parts of a key are added in order at the end, into this block's partial
// part[chunk * n_kv + kvh][off + k] (= on the pass's first layer, += after).
// importance_reduce_kernel sums the partials in order when the pass is collected.
__global__ void __launch_bounds__(kThreads) importance_mass_kernel(const float* __restrict__ q, KvLayerView kv,
                                                                   AttnBatch b, const ImpSeqDev* __restrict__ imp,
                                                                   int32_t n_head, float scale, int32_t nsplit,
                                                                   const float* __restrict__ lse_part, float* part,
                                                                   int64_t part_stride, bool accumulate) {
  extern __shared__ float smem[];
  const int32_t si = static_cast<int32_t>(blockIdx.x);
  const AttnSeqDev sq = b.seqs[si];
  const ImpSeqDev is = imp[si];
  const int32_t hd = kv.head_dim, group = n_head / kv.n_kv_heads;
  const int KT = tile_keys(hd), VT = tile_vecs(hd), parts = kThreads / KT;
  const int32_t keys = sq.start_pos + sq.n_q;
  const int32_t k0 = static_cast<int32_t>(blockIdx.y) * KT;
  if (is.off < 0 || k0 >= keys) return;
  const int32_t c = static_cast<int32_t>(blockIdx.z) / kv.n_kv_heads, kvh = static_cast<int32_t>(blockIdx.z) % kv.n_kv_heads;
  const int key = static_cast<int>(threadIdx.x) % KT, part_of = static_cast<int>(threadIdx.x) / KT;
  const int32_t k = k0 + key;
  // Counted rows of this chunk that see at least the tile's first key.
  const int32_t r0 = max(max(is.from, c * kRowsPerChunk), max(0, k0 - sq.start_pos));
  const int32_t r1 = min(sq.n_q, (c + 1) * kRowsPerChunk);
  float* Ks = smem;                // [KT][hd + 1]
  float* Qs = Ks + KT * (hd + 1);  // [VT][hd]
  float* Ls = Qs + VT * hd;        // [VT]
  float sum = 0.0f;
  const int32_t* table = b.tables + sq.table_offset;
  const int32_t n_vec = max(0, r1 - r0) * group;
  if (n_vec > 0) load_k_tile(kv, table, kvh, k0, keys, KT, Ks);
  for (int32_t v0 = 0; v0 < n_vec; v0 += VT) {
    const int nv = min(VT, n_vec - v0);
    __syncthreads();  // the previous vectors read (and, first time, Ks written)
    for (int e = static_cast<int>(threadIdx.x); e < nv * hd; e += kThreads) {
      const int v = e / hd, d = e % hd;
      const int32_t vv = v0 + v, row = sq.q_begin + r0 + vv / group, h = kvh * group + vv % group;
      Qs[v * hd + d] = q[(int64_t{row} * n_head + h) * hd + d];
    }
    if (static_cast<int>(threadIdx.x) < nv) {
      const int32_t vv = v0 + static_cast<int32_t>(threadIdx.x), row = sq.q_begin + r0 + vv / group,
                    h = kvh * group + vv % group;
      Ls[threadIdx.x] = merged_lse(lse_part + (int64_t{row} * n_head + h) * nsplit * 2, nsplit);
    }
    __syncthreads();
    if (k < keys) {
      for (int v = part_of; v < nv; v += parts) {
        const int32_t row = r0 + (v0 + v) / group;
        if (k > sq.start_pos + row) continue;
        const float sc = dot_shared(Qs + v * hd, Ks + key * (hd + 1), hd) * scale;
        sum += __expf(sc - Ls[v]);
      }
    }
  }
  __syncthreads();
  float* red = smem;  // [parts][KT]
  red[part_of * KT + key] = sum;
  __syncthreads();
  if (part_of != 0 || k >= keys) return;
  float total = 0.0f;
  for (int p = 0; p < parts; ++p) total += red[p * KT + key];
  float* dst = part + blockIdx.z * part_stride + is.off + k;
  *dst = accumulate ? *dst + total : total;
}

// Decode batches (importance_decode_mass): block per (sequence, tile of KT keys), over n_layers
// layers whose attention wrote their scores and splits' (max, sum) at layer strides (n_layers = 1:
// one layer, launched after its attention; more: the layers of a pass gathered in one buffer,
// summed by one launch). The lse of each (layer, head) row of the sequence, merged from the splits
// in split order, into shared memory (the block's threads over the rows: a few batched loads
// each). Then the block's `lanes` groups of KT threads (lanes * KT = kDecThreads) take the layers
// in turn (group g: layers g, g + lanes, ...): thread t of a group sums, for key t of the tile and
// each of its layers, exp(score - lse) over the heads in head order (score rows are contiguous in
// keys: a warp's loads coalesce; kHeadsInFlight heads' scores are loaded before their exp-adds, so
// that the loads are in flight together) into shared memory; and the first group adds the layers'
// sums in layer order: acc = sum_0 (or prev + sum_0), acc += sum_1, ... — the float operations, in
// order, of one n_layers = 1 launch per layer (the same bits).
constexpr int kDecThreads = 256;
constexpr int kHeadsInFlight = 8;
// Groups of threads over the layers: a power of two <= min(8, n_layers) (so KT >= 32: whole warps).
__host__ __device__ __forceinline__ int decode_lanes(int32_t n_layers) {
  return n_layers >= 8 ? 8 : (n_layers >= 4 ? 4 : (n_layers >= 2 ? 2 : 1));
}
// Shared memory of a launch, floats: the lse's and the per-layer sums.
__host__ __forceinline__ int64_t decode_smem_floats(int32_t n_layers, int32_t n_head) {
  return int64_t{n_layers} * (n_head + kDecThreads / decode_lanes(n_layers));
}
__global__ void __launch_bounds__(kDecThreads) importance_decode_mass_kernel(AttnBatch b, const ImpSeqDev* __restrict__ imp,
                                                                             int32_t n_head, int32_t nsplit,
                                                                             int32_t n_layers, int64_t score_layer_stride,
                                                                             int64_t ml_layer_stride, float* part,
                                                                             bool accumulate) {
  pdl_wait();  // the attention kernel's scores (launch.cuh: before anything, in every block)
  pdl_trigger();
  extern __shared__ float smem[];
  const int lanes = decode_lanes(n_layers), KT = kDecThreads / lanes;
  float* lse = smem;                             // [n_layers][n_head]
  float* sums = smem + int64_t{n_layers} * n_head;  // [n_layers][KT]
  const AttnSeqDev sq = b.seqs[blockIdx.x];
  const ImpSeqDev is = imp[blockIdx.x];
  const int32_t keys = sq.start_pos + sq.n_q;
  const int32_t k0 = static_cast<int32_t>(blockIdx.y) * KT;
  if (is.off < 0 || k0 >= keys) return;  // block-uniform
  const int key = static_cast<int>(threadIdx.x) % KT, group = static_cast<int>(threadIdx.x) / KT;
  const int32_t k = k0 + key;
  float* dst = part + is.off + k;
  if (sq.n_q != 1 || is.from > 0) {  // block-uniform: no counted row, no mass (a first write clears)
    if (group == 0 && !accumulate && k < keys) *dst = 0.0f;
    return;
  }
  const float prev = group == 0 && accumulate && k < keys ? *dst : 0.0f;  // loaded early: its latency hides
  const int64_t row0 = int64_t{sq.q_begin} * n_head;
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n_layers * n_head; i += kDecThreads) {
    const int32_t l = i / n_head, h = i % n_head;
    lse[i] = merged_lse(b.imp_ml + l * ml_layer_stride + (row0 + h) * nsplit * 2, nsplit);
  }
  __syncthreads();
  if (k < keys) {
    for (int32_t l = group; l < n_layers; l += lanes) {
      const float* __restrict__ sc = b.imp_scores + l * score_layer_stride + row0 * b.imp_stride + k;
      const float* ls = lse + l * n_head;
      float total = 0.0f;
      int32_t h = 0;
      for (; h + kHeadsInFlight <= n_head; h += kHeadsInFlight) {
        float v[kHeadsInFlight];
#pragma unroll
        for (int u = 0; u < kHeadsInFlight; ++u) v[u] = sc[(h + u) * b.imp_stride];
#pragma unroll
        for (int u = 0; u < kHeadsInFlight; ++u) total += __expf(v[u] - ls[h + u]);
      }
      for (; h < n_head; ++h) total += __expf(sc[h * b.imp_stride] - ls[h]);
      sums[l * KT + key] = total;
    }
  }
  __syncthreads();
  if (group != 0 || k >= keys) return;
  float acc = prev;
  for (int32_t l = 0; l < n_layers; ++l) acc = l == 0 && !accumulate ? sums[l * KT + key] : acc + sums[l * KT + key];
  *dst = acc;
}

// mass[j] = Σ over partials p of part[p][j], in partial order, for j < n.
__global__ void importance_reduce_kernel(const float* __restrict__ part, int64_t part_stride, int32_t n_parts,
                                         int64_t n, float* mass) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float total = 0.0f;
  for (int32_t p = 0; p < n_parts; ++p) total += part[p * part_stride + j];
  mass[j] = total;
}

}  // namespace

ImportanceScratch importance_scratch(int32_t n_kv_heads, int32_t max_n_q, int64_t mass_floats) {
  ImportanceScratch sc;
  sc.parts = (max_n_q + kRowsPerChunk - 1) / kRowsPerChunk * n_kv_heads;
  sc.part_floats = int64_t{std::max(sc.parts, 1)} * mass_floats;
  return sc;
}

void attention_importance(const float* q, const KvLayerView& kv, const AttnBatch& b, const ImpSeqDev* imp,
                          int32_t n_head, float scale, const float* lse_part, int32_t nsplit, float* part,
                          int64_t mass_floats, bool accumulate, cudaStream_t s) {
  if (b.n_seqs <= 0 || b.max_ctx <= 0) return;
  const int32_t hd = kv.head_dim;
  const int KT = tile_keys(hd), VT = tile_vecs(hd);
  const int32_t chunks = (b.max_n_q + kRowsPerChunk - 1) / kRowsPerChunk;
  const size_t mass_smem = sizeof(float) * static_cast<size_t>(KT * (hd + 1) + VT * hd + VT);
  const dim3 mass_grid(static_cast<unsigned>(b.n_seqs), static_cast<unsigned>((b.max_ctx + KT - 1) / KT),
                       static_cast<unsigned>(chunks * kv.n_kv_heads));
  importance_mass_kernel<<<mass_grid, kThreads, mass_smem, s>>>(q, kv, b, imp, n_head, scale, nsplit, lse_part, part,
                                                                mass_floats, accumulate);
  STRATA_CUDA_LAUNCH_CHECK();
}

int32_t importance_decode_layers_max(int32_t n_head) {
  int32_t n = 1;
  while (n < 4096 && decode_smem_floats(n + 1, n_head) <= kImportanceDecodeSmemFloats) ++n;
  return n;
}

void importance_decode_mass(const AttnBatch& b, const ImpSeqDev* imp, int32_t n_head, int32_t nsplit,
                            const ImpDecodeLayers& layers, float* part, bool accumulate, bool pdl, cudaStream_t s) {
  if (b.n_seqs <= 0 || b.max_ctx <= 0 || layers.n <= 0) return;
  const int KT = kDecThreads / decode_lanes(layers.n);
  const dim3 grid(static_cast<unsigned>(b.n_seqs), static_cast<unsigned>((b.max_ctx + KT - 1) / KT));
  const size_t smem = sizeof(float) * static_cast<size_t>(decode_smem_floats(layers.n, n_head));
  if (pdl) {
    launch_pdl(importance_decode_mass_kernel, grid, dim3(kDecThreads), smem, s, b, imp, n_head, nsplit, layers.n,
               layers.score_stride, layers.ml_stride, part, accumulate);
  } else {
    importance_decode_mass_kernel<<<grid, kDecThreads, smem, s>>>(b, imp, n_head, nsplit, layers.n, layers.score_stride,
                                                                 layers.ml_stride, part, accumulate);
    STRATA_CUDA_LAUNCH_CHECK();
  }
}

void importance_reduce(const float* part, int32_t n_parts, int64_t part_stride, int64_t n, float* mass, cudaStream_t s) {
  if (n <= 0) return;
  importance_reduce_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(part, part_stride, n_parts, n, mass);
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

// One block per slot: its K row to out[slot index], its V row to out[n + slot index] (rows of
// row_bytes), in 4-byte words when the row allows, else bytes.
__global__ void read_rows_kernel(KvLayerView kv, const int32_t* __restrict__ slots, int64_t n, int64_t row_bytes,
                                 uint8_t* __restrict__ out) {
  const int64_t from = int64_t{slots[blockIdx.x]} * row_bytes;
  uint8_t* k_to = out + int64_t{blockIdx.x} * row_bytes;
  uint8_t* v_to = out + (n + blockIdx.x) * row_bytes;
  if (row_bytes % 4 == 0) {
    for (int64_t e = threadIdx.x; e < row_bytes / 4; e += blockDim.x) {
      reinterpret_cast<uint32_t*>(k_to)[e] = reinterpret_cast<const uint32_t*>(kv.k + from)[e];
      reinterpret_cast<uint32_t*>(v_to)[e] = reinterpret_cast<const uint32_t*>(kv.v + from)[e];
    }
  } else {
    for (int64_t e = threadIdx.x; e < row_bytes; e += blockDim.x) {
      k_to[e] = kv.k[from + e];
      v_to[e] = kv.v[from + e];
    }
  }
}

}  // namespace

void kv_read_rows(const KvLayerView& kv, const int32_t* slots, int64_t n, uint8_t* out, cudaStream_t s) {
  if (n <= 0) return;
  read_rows_kernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, slots, n, kv.token_stride_bytes(), out);
  STRATA_CUDA_LAUNCH_CHECK();
}

void kv_move_rows(const KvLayerView& kv, const int32_t* src, const int32_t* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  move_rows_kernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, src, dst, kv.token_stride_bytes());
  STRATA_CUDA_LAUNCH_CHECK();
}

#if defined(STRATA_CUDA_STEP_TRACE)
void step_trace_set_importance(const StepTraceDev& t, cudaStream_t s) { step_trace_set_local(t, s); }
#else
void step_trace_set_importance(const StepTraceDev&, cudaStream_t) {}
#endif

}  // namespace strata::cuda
