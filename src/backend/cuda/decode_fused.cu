// The fused decode step: see decode_fused.cuh for what and why.
//
// Block layout: warp 0 is the producer (its lane 0 issues the bulk copies), warps 1..8 consume.
// Each weight matrix of a phase is cut into groups of rows and a group into tiles (Geom); the
// groups of a phase are spread over the blocks in contiguous runs, and a block's consumer warps
// take its groups round-robin (group gc of the step -> warp gc % 8, all of its tiles), so the
// producer and the consumers walk one sequence of tiles: layer by layer, phase by phase.
//
// Phases of a layer, each ended by a grid-wide barrier (a counter in global memory):
//   0. QKV: h = RMSNorm(x) * attn_norm in shared memory, q|k|v = h . W^T (+ bias) -> work.
//   1. attention: block (split s, head h) rotates q_h and the new k, stores the new k, v (split 0,
//      first head of its group), and attends to its share of the context's keys; it writes its
//      unnormalised partial (max, sum, P.V) -> work.
//   2. O: the partials merged into the attention output in shared memory; x += out . Wo^T.
//   3. gate/up: h = RMSNorm(x) * ffn_norm; act = silu(h . Wg^T) * (h . Wu^T) -> work.
//   4. down: x += act . Wd^T.
// Data written by other blocks is read with ld.global.cg (L2), never from a stale L1 line. The
// residual adds are reductions in L2 (red.global.add: no round trip); each element of x gets one
// add per phase, from the block that owns its row, so the result is exact and deterministic.
#include "backend/cuda/decode_fused.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_rows.cuh"

namespace strata::cuda {
namespace {

constexpr int W = kFusedConsumerWarps;
constexpr int kConsumerThreads = 32 * W;
constexpr int kThreads = kConsumerThreads + 32;
constexpr int kMaxSplits = 8;
constexpr int kMaxSlots = 12;

// What the host computes once per shape. Each phase's matrices are cut into groups of TR rows
// (gate/up: TR / 2 rows of each of the two), and a group into nkb tiles of KB columns (KB = the
// whole row when TR rows fit a slot). A tile is multiplied on the tensor cores as a 16 x KB / NS
// matrix: its TR rows times NS = 16 / TR column segments, segment s made of the 16-column steps
// s, s + NS, s + 2 NS, ... (so the rows an ldmatrix reads sit 32 bytes apart, not in one bank).
struct Geom {
  int32_t slots = 0;    // ring slots of kFusedSlotBytes
  int32_t splits = 1;   // attention blocks per head
  int32_t tr[4]{};      // rows per group (0 QKV, 1 O, 2 gate/up, 3 down)
  int32_t kb[4]{};      // columns per tile
  int32_t nkb[4]{};     // tiles per group
  int32_t groups[4]{};  // groups per phase
  int32_t qkv_groups[3]{};
  int32_t red_off = 0, wt_off = 0, res_off = 0, cs_off = 0, xs_off = 0;  // float offsets after the barriers
  int32_t xl_off = 0;   // halves from x's high halves to its low halves
  int32_t smem = 0;     // dynamic shared memory bytes
};

// --- PTX: mbarriers, bulk copies, named barriers, acquire loads ------------------------------------

// The same, ordered with the memory operations and barriers around it (the trace's stamps: a
// plain read may be moved across them by the compiler).
__device__ __forceinline__ uint64_t stamp_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// The consumer warps only (the producer never joins).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"r"(kConsumerThreads) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Grid-wide barrier of the consumer warps (as cooperative groups' grid sync: the block's threads
// meet, one of them publishes the block's writes, adds to the counter and waits for every block's
// add, the block meets again). `number`: the barrier's count in the step, from 1; the counter is
// zeroed by the launcher. (Measured on the H200: polling a flag that the last arriver raises, on a
// line of its own, was 0.5-1.4 us slower per barrier than polling the counter.)
__device__ __forceinline__ void grid_sync(unsigned* counter, unsigned number) {
  consumers_sync();
  if (threadIdx.x == 32) {
    __threadfence();
    atomicAdd(counter, 1u);
    const unsigned target = number * gridDim.x;
    const uint64_t t0 = now_ns();
    for (uint32_t i = 1; ld_acquire(counter) < target; ++i) {
      if ((i & 1023) == 0 && now_ns() - t0 > kHangNs) __trap();
    }
    __threadfence();
  }
  consumers_sync();
}

// --- groups and tiles ------------------------------------------------------------------------

struct Group {
  const uint8_t* a;  // the matrix
  const uint8_t* b;  // gate/up: the up matrix
  int32_t row0, nrows;  // gate/up: rows of each matrix
  int32_t mat;          // QKV: 0 q, 1 k, 2 v
};

__device__ __forceinline__ void unit_range(int32_t units, int32_t* u0, int32_t* u1) {
  *u0 = static_cast<int32_t>(int64_t{units} * blockIdx.x / gridDim.x);
  *u1 = static_cast<int32_t>(int64_t{units} * (blockIdx.x + 1) / gridDim.x);
}

__device__ __forceinline__ int32_t phase_cols(const FusedDecodeParams& p, int ph) { return ph == 3 ? p.n_ff : p.n_embd; }

__device__ Group group_at(const FusedDecodeParams& p, const Geom& g, const FusedLayerDev& L, int ph, int32_t u) {
  Group gr{};
  const int32_t tr = g.tr[ph];
  switch (ph) {
    case 0: {
      int32_t rows = p.n_embd;
      gr.a = L.wq;
      gr.mat = 0;
      if (u >= g.qkv_groups[0]) {
        u -= g.qkv_groups[0];
        gr.a = L.wk, rows = p.n_kv * p.head_dim, gr.mat = 1;
        if (u >= g.qkv_groups[1]) u -= g.qkv_groups[1], gr.a = L.wv, gr.mat = 2;
      }
      gr.row0 = u * tr;
      gr.nrows = min(tr, rows - gr.row0);
      break;
    }
    case 1:
      gr.a = L.wo;
      gr.row0 = u * tr;
      gr.nrows = min(tr, p.n_embd - gr.row0);
      break;
    case 2:
      gr.a = L.wg;
      gr.b = L.wu;
      gr.row0 = u * (tr / 2);
      gr.nrows = min(tr / 2, p.n_ff - gr.row0);
      break;
    default:
      gr.a = L.wd;
      gr.row0 = u * tr;
      gr.nrows = min(tr, p.n_embd - gr.row0);
      break;
  }
  return gr;
}

// The producer's copies of tile kb of a group into `dst` (completing on `bar`); returns the bytes.
__device__ uint32_t copy_tile(const FusedDecodeParams& p, const Geom& g, int ph, const Group& gr, int32_t kb,
                              uint8_t* dst, uint64_t* bar, bool dry, uint64_t policy) {
  const int64_t C = phase_cols(p, ph), rb = C * 2;
  auto bulk_copy = [&](void* d, const void* src, uint32_t bytes, uint64_t* b) {
    if (p.exp & 8) {
      ::strata::cuda::bulk_copy(d, src, bytes, b);
    } else {
      bulk_copy_hint(d, src, bytes, b, policy);
    }
  };
  if (ph == 2) {  // gate rows, then up rows at row TR / 2 of the tile
    const auto bytes = static_cast<uint32_t>(gr.nrows * rb);
    mbar_expect_tx(bar, dry ? 0 : 2 * bytes);
    if (!dry) {
      bulk_copy(dst, gr.a + gr.row0 * rb, bytes, bar);
      bulk_copy(dst + (g.tr[2] / 2) * rb, gr.b + gr.row0 * rb, bytes, bar);
    }
    return 2 * bytes;
  }
  if (g.nkb[ph] == 1) {
    const auto bytes = static_cast<uint32_t>(gr.nrows * rb);
    mbar_expect_tx(bar, dry ? 0 : bytes);
    if (!dry) bulk_copy(dst, gr.a + gr.row0 * rb, bytes, bar);
    return bytes;
  }
  const int64_t kbb = int64_t{g.kb[ph]} * 2;  // a row's piece of this tile
  const auto bytes = static_cast<uint32_t>(gr.nrows * kbb);
  mbar_expect_tx(bar, dry ? 0 : bytes);
  if (!dry) {
    for (int32_t r = 0; r < gr.nrows; ++r) {
      bulk_copy(dst + r * kbb, gr.a + (gr.row0 + r) * rb + kb * kbb, static_cast<uint32_t>(kbb), bar);
    }
  }
  return bytes;
}

// --- the consumers' arithmetic -------------------------------------------------------------------

// The phase's vector in shared memory as two 16-bit arrays (f16, or bf16 for bf16 weights): xh
// the rounding of x, xl the rounding of x - xh, so xh + xl carries ~22 bits of x and the tensor
// cores' products (exact, summed in f32) are as accurate as f32 ones to ~1e-6.
template <bool kBf16>
__device__ __forceinline__ void split16(float v, uint16_t* hi, uint16_t* lo) {
  if constexpr (kBf16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
    *hi = __bfloat16_as_ushort(h), *lo = __bfloat16_as_ushort(l);
  } else {
    const __half h = __float2half_rn(v);
    const __half l = __float2half_rn(v - __half2float(h));
    *hi = __half_as_ushort(h), *lo = __half_as_ushort(l);
  }
}
// Elements [j, j + 4) of the vector (j a multiple of 4).
template <bool kBf16>
__device__ __forceinline__ void store4(uint16_t* xh, int32_t xl_off, int32_t j, float4 v) {
  uint16_t h[4], l[4];
  split16<kBf16>(v.x, &h[0], &l[0]);
  split16<kBf16>(v.y, &h[1], &l[1]);
  split16<kBf16>(v.z, &h[2], &l[2]);
  split16<kBf16>(v.w, &h[3], &l[3]);
  *reinterpret_cast<uint2*>(xh + j) = make_uint2(h[0] | (uint32_t{h[1]} << 16), h[2] | (uint32_t{h[3]} << 16));
  *reinterpret_cast<uint2*>(xh + xl_off + j) = make_uint2(l[0] | (uint32_t{l[1]} << 16), l[2] | (uint32_t{l[3]} << 16));
}

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// c += the tile (16 / ns rows of kb columns, row-major, at `tile`) times the vector's columns
// [col0, col0 + kb) as the tensor cores see them: A row r' = (tile row r' / ns, segment r' % ns),
// B column n = (segment n / 2, xh or xl by n % 2). Only the (segment, segment) entries of D are
// wanted; mma_result sums them.
template <bool kBf16>
__device__ __forceinline__ void mma_tile(const uint8_t* tile, int32_t kb, int32_t ns, int32_t col0, const uint16_t* xh,
                                         int32_t xl_off, int lane, float (&c)[4]) {
  const int m = lane >> 3, rr = lane & 7;
  const int rp = rr + 8 * (m & 1);
  uint32_t a_addr = smem_addr(tile) + static_cast<uint32_t>((rp / ns) * kb * 2 + ((rp % ns) * 16 + 8 * (m >> 1)) * 2);
  const int n = lane >> 2, t = lane & 3;
  const bool bon = (n >> 1) < ns;
  const uint16_t* xb = xh + ((n & 1) ? xl_off : 0) + col0 + (n >> 1) * 16 + 2 * t;
  const int32_t steps = kb / (16 * ns);
  const uint32_t a_step = static_cast<uint32_t>(ns * 32);
  const int32_t b_step = ns * 16;
#pragma unroll 4
  for (int32_t kk = 0; kk < steps; ++kk) {
    uint32_t a[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(a_addr));
    const uint32_t b0 = bon ? *reinterpret_cast<const uint32_t*>(xb) : 0u;
    const uint32_t b1 = bon ? *reinterpret_cast<const uint32_t*>(xb + 8) : 0u;
    mma16816<kBf16>(c, a, b0, b1);
    a_addr += a_step;
    xb += b_step;
  }
}

// The group's row results from the accumulators: res[r] for its 16 / ns rows (every lane may read
// them after the call; res: this warp's 16 floats of shared memory).
__device__ __forceinline__ void mma_result(const float (&c)[4], int32_t ns, int lane, float* res) {
  const int g = lane >> 2, t = lane & 3;
  const bool on = t < ns && t == g % ns;
  float v0 = on ? c[0] + c[1] : 0.0f, v1 = on ? c[2] + c[3] : 0.0f;
  for (int o = 1; o < 4 * ns; o <<= 1) {
    v0 += __shfl_xor_sync(0xffffffffu, v0, o);
    v1 += __shfl_xor_sync(0xffffffffu, v1, o);
  }
  if (lane % (4 * ns) == 0) {
    res[lane / (4 * ns)] = v0;
    res[8 / ns + lane / (4 * ns)] = v1;
  }
  __syncwarp();
}

template <bool kBf16>
__device__ __forceinline__ float2 two(uint32_t w) {
  if constexpr (kBf16) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &w, 4);
    return __half22float2(h);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The loaders below load every value a thread needs into registers before they store any:
// stores to shared memory through generic pointers would otherwise keep the compiler from issuing
// the next global load before them, and each L2 round trip (~0.5 us) would be paid one at a time.
constexpr int kLoadBatch = 8;  // float4 per thread per batch: n <= 8192 floats is one batch

// The vector xs (xh, xl: store4) = RMSNorm(src) * w (src: n floats written by other blocks; n a
// multiple of 8, at most kConsumerThreads * 4 * kLoadBatch: one batch in registers).
template <bool kBf16>
__device__ void load_normed(const float* src, const float* w, int32_t n, float eps, uint16_t* xs, int32_t xl_off,
                            float* red, int tid) {
  constexpr int32_t step = kConsumerThreads * 4;
  float4 v[kLoadBatch], g[kLoadBatch];
  float ss = 0.0f;
#pragma unroll
  for (int b = 0; b < kLoadBatch; ++b) {
    const int32_t j = tid * 4 + b * step;
    if (j < n) {
      v[b] = __ldcg(reinterpret_cast<const float4*>(src + j));
      g[b] = __ldg(reinterpret_cast<const float4*>(w + j));
    }
  }
#pragma unroll
  for (int b = 0; b < kLoadBatch; ++b) {
    if (tid * 4 + b * step < n) {
      ss = fmaf(v[b].x, v[b].x, ss);
      ss = fmaf(v[b].y, v[b].y, ss);
      ss = fmaf(v[b].z, v[b].z, ss);
      ss = fmaf(v[b].w, v[b].w, ss);
    }
  }
  ss = warp_sum(ss);
  if ((tid & 31) == 0) red[tid >> 5] = ss;
  consumers_sync();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < W; ++i) total += red[i];
  const float r = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
#pragma unroll
  for (int b = 0; b < kLoadBatch; ++b) {
    const int32_t j = tid * 4 + b * step;
    if (j < n) {
      store4<kBf16>(xs, xl_off, j,
                    make_float4(v[b].x * r * g[b].x, v[b].y * r * g[b].y, v[b].z * r * g[b].z, v[b].w * r * g[b].w));
    }
  }
  consumers_sync();
}

template <bool kBf16>
__device__ void load_plain(const float* src, int32_t n, uint16_t* xs, int32_t xl_off, int tid) {
  constexpr int32_t step = kConsumerThreads * 4;
  float4 v[kLoadBatch];
#pragma unroll
  for (int b = 0; b < kLoadBatch; ++b) {
    const int32_t j = tid * 4 + b * step;
    if (j < n) v[b] = __ldcg(reinterpret_cast<const float4*>(src + j));
  }
#pragma unroll
  for (int b = 0; b < kLoadBatch; ++b) {
    const int32_t j = tid * 4 + b * step;
    if (j < n) store4<kBf16>(xs, xl_off, j, v[b]);
  }
  consumers_sync();
}

// K/V element types as template arguments (0 f32, 1 f16, 2 bf16): the loads of a batch of keys
// must not sit behind a branch on the type.
template <int kKv>
__device__ __forceinline__ float kv_at(const uint8_t* row, int32_t d) {
  if constexpr (kKv == 0) return __ldg(reinterpret_cast<const float*>(row) + d);
  const uint16_t b = __ldg(reinterpret_cast<const unsigned short*>(row) + d);
  if constexpr (kKv == 1) return half_bits_to_f32(b);
  return bf16_bits_to_f32(b);
}
template <int kKv>
__device__ __forceinline__ void kv_at8(const uint8_t* row, int32_t d0, float (&v)[8]) {
  if constexpr (kKv == 0) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(row) + d0 / 4);
    const float4 b = __ldg(reinterpret_cast<const float4*>(row) + d0 / 4 + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(row) + d0 / 8);
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = two<kKv == 2>(u[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

// Work buffer: [qkv: n_embd + 2 kvd][part_acc: splits][n_head][hd][part_m: splits][n_head]
// [part_l: splits][n_head][act: n_ff].
struct Work {
  float *qkv, *acc, *m, *l, *act;
};
__device__ __forceinline__ Work work_of(const FusedDecodeParams& p) {
  Work w;
  w.qkv = p.work;
  w.acc = w.qkv + p.n_embd + 2 * p.n_kv * p.head_dim;
  w.m = w.acc + kMaxSplits * p.n_embd;
  w.l = w.m + kMaxSplits * p.n_head;
  w.act = w.l + kMaxSplits * p.n_head;
  return w;
}

constexpr int kMaxDims = 4;  // head_dim / 32 <= 4 (head_dim <= 128)
constexpr int kVBatch = 4;   // keys whose V elements one lane loads before it adds them

// Phase 1 for block (split s, head h): see the file comment. The split's keys are divided evenly
// over the warps (at short contexts every warp has a few: the phase lasts one chain of dependent
// loads, table -> K rows -> scores -> V rows); a warp takes its keys 32 at a time, a key per lane.
// ts (diagnostics, or null): 6 stamps of the phase's steps, written by the block's first thread.
template <int kKv>
__device__ void attention(const FusedDecodeParams& p, const Geom& g, const FusedLayerDev& L, const Work& wk, float* sm,
                          const double* rope_cs, unsigned long long* ts, int tid) {
  auto mark = [&](int i) {
    if (ts != nullptr && tid == 0) ts[i] = stamp_ns();
  };
  mark(0);
  const int32_t hd = p.head_dim, n_head = p.n_head;
  const int32_t b = blockIdx.x;
  const int32_t h = b % n_head, s = b / n_head;
  const int32_t group = n_head / p.n_kv, kvh = h / group;
  const int32_t kvd = p.n_kv * hd;
  float* qs = sm;
  float* kn = qs + hd;
  float* vn = kn + hd;
  float* pm = vn + hd;
  float* pl = pm + W;
  float* pacc = pl + W;  // [W][hd]
  const KvLayerView& kv = L.kv;
  if (tid < hd) {
    const float q = __ldcg(wk.qkv + h * hd + tid);
    const float k = __ldcg(wk.qkv + p.n_embd + kvh * hd + tid);
    const float v = __ldcg(wk.qkv + p.n_embd + kvd + kvh * hd + tid);
    qs[tid] = q, kn[tid] = k, vn[tid] = v;
  }
  consumers_sync();
  mark(1);
  const int32_t half = p.rope.n_rot / 2;
  for (int32_t i = tid; i < half; i += kConsumerThreads) {
    rope_rotate(qs, i, half, p.rope.neox, rope_cs[2 * i], rope_cs[2 * i + 1]);
    rope_rotate(kn, i, half, p.rope.neox, rope_cs[2 * i], rope_cs[2 * i + 1]);
  }
  consumers_sync();
  mark(2);
  if (s == 0 && h % group == 0 && tid < hd) {
    store_kv_elem(kv, (int64_t{p.slot[0]} * p.n_kv + kvh) * hd + tid, kn[tid], vn[tid]);
  }
  const int warp = tid >> 5, lane = tid & 31;
  const int32_t n_old = p.seq->start_pos;  // keys before the new token, in the cache
  const int32_t k0 = static_cast<int32_t>(int64_t{n_old} * s / g.splits);
  const int32_t k1 = static_cast<int32_t>(int64_t{n_old} * (s + 1) / g.splits);
  const int32_t kw0 = k0 + static_cast<int32_t>(int64_t{k1 - k0} * warp / W);
  const int32_t kw1 = k0 + static_cast<int32_t>(int64_t{k1 - k0} * (warp + 1) / W);
  constexpr int es = kKv == 0 ? 4 : 2;
  const int32_t bs = kv.block_size;
  const int32_t dims = hd / 32;
  float m = -INFINITY, l = 0.0f, acc[kMaxDims];
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i) acc[i] = 0.0f;
  for (int32_t c0 = kw0; c0 < kw1; c0 += 32) {
    const int32_t key = c0 + lane;
    const bool valid = key < kw1;
    float sc = -INFINITY;
    const uint8_t* vrow = nullptr;
    if (valid) {
      const int32_t blk = __ldg(p.table + key / bs);
      const uint8_t* krow = hot_row(kv, false, blk, key % bs, kvh, es);
      vrow = hot_row(kv, true, blk, key % bs, kvh, es);
      float d = 0.0f;
#pragma unroll 4
      for (int32_t d0 = 0; d0 < hd; d0 += 8) {
        float e[8];
        kv_at8<kKv>(krow, d0, e);
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(qs[d0 + i], e[i], d);
      }
      sc = d * p.scale;
    }
    const float cm = warp_max(sc);
    const float mn = fmaxf(m, cm);
    const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
    const float pr = valid ? expf(sc - mn) : 0.0f;
    l = l * corr + warp_sum(pr);
#pragma unroll
    for (int i = 0; i < kMaxDims; ++i) acc[i] *= corr;
    const int32_t nv = min(32, kw1 - c0);
    for (int32_t j0 = 0; j0 < nv; j0 += kVBatch) {
      float pj[kVBatch], vv[kVBatch][kMaxDims];
#pragma unroll
      for (int bb = 0; bb < kVBatch; ++bb) {
        const int32_t j = (j0 + bb) & 31;
        pj[bb] = __shfl_sync(0xffffffffu, pr, j);
        const auto vp = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(vrow), j));
#pragma unroll
        for (int i = 0; i < kMaxDims; ++i) {
          vv[bb][i] = (j0 + bb < nv && i < dims) ? kv_at<kKv>(vp, lane + 32 * i) : 0.0f;
        }
      }
#pragma unroll
      for (int bb = 0; bb < kVBatch; ++bb) {
        if (j0 + bb >= nv) pj[bb] = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxDims; ++i) acc[i] = fmaf(pj[bb], vv[bb][i], acc[i]);
      }
    }
    m = mn;
  }
  mark(3);  // warp 0's keys done
  if (lane == 0) pm[warp] = m, pl[warp] = l;
#pragma unroll
  for (int i = 0; i < kMaxDims; ++i) {
    if (i < dims) pacc[warp * hd + lane + 32 * i] = acc[i];
  }
  consumers_sync();
  mark(4);
  if (warp != 0) return;
  // Warp 0 merges the warps' partials (and, in split 0, the new token's key) into this split's.
  float snew = -INFINITY;
  if (s == 0) {
    float d = 0.0f;
    for (int32_t i = lane; i < hd; i += 32) d = fmaf(qs[i], kn[i], d);
    snew = warp_sum(d) * p.scale;
  }
  float M = snew;
  for (int i = 0; i < W; ++i) M = fmaxf(M, pm[i]);
  // The warps' weights, in place of their maxima (pm).
  float Lsum = 0.0f;
  for (int i = 0; i < W; ++i) Lsum = fmaf(pm[i] == -INFINITY ? 0.0f : expf(pm[i] - M), pl[i], Lsum);
  __syncwarp();
  if (lane < W) pm[lane] = pm[lane] == -INFINITY ? 0.0f : expf(pm[lane] - M);
  __syncwarp();
  const float wn = snew == -INFINITY ? 0.0f : expf(snew - M);
  Lsum += wn;
  const int32_t part = s * n_head + h;
  for (int32_t d = lane; d < hd; d += 32) {
    float a = wn * vn[d];
    for (int i = 0; i < W; ++i) a = fmaf(pm[i], pacc[i * hd + d], a);
    wk.acc[int64_t{part} * hd + d] = a;
  }
  if (lane == 0) wk.m[part] = M, wk.l[part] = Lsum;
  mark(5);
}

// xs = the attention output: every head's split partials merged (wt: n_head * kMaxSplits floats).
template <bool kBf16>
__device__ void load_attention(const FusedDecodeParams& p, const Geom& g, const Work& wk, uint16_t* xs, float* wt,
                               int tid) {
  const int32_t n_head = p.n_head, S = g.splits;
  for (int32_t h = tid; h < n_head; h += kConsumerThreads) {
    float ms[kMaxSplits], ls[kMaxSplits];
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      ms[s] = s < S ? __ldcg(wk.m + s * n_head + h) : -INFINITY;
      ls[s] = s < S ? __ldcg(wk.l + s * n_head + h) : 0.0f;
    }
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) M = fmaxf(M, ms[s]);
    float e[kMaxSplits], Lsum = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      e[s] = ms[s] == -INFINITY ? 0.0f : expf(ms[s] - M);
      Lsum = fmaf(e[s], ls[s], Lsum);
    }
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) wt[h * kMaxSplits + s] = e[s] / Lsum;
  }
  consumers_sync();
  const int32_t n = p.n_embd;
  for (int32_t j = tid * 4; j < n; j += kConsumerThreads * 4) {
    const int32_t h = j / p.head_dim;  // the 4 elements are of one head (head_dim % 32 == 0)
    float4 a[kMaxSplits];
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      a[s] = s < S ? __ldcg(reinterpret_cast<const float4*>(wk.acc + int64_t{s} * n + j)) : make_float4(0, 0, 0, 0);
    }
    float4 r = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      const float w = wt[h * kMaxSplits + s];
      r.x = fmaf(w, a[s].x, r.x), r.y = fmaf(w, a[s].y, r.y), r.z = fmaf(w, a[s].z, r.z), r.w = fmaf(w, a[s].w, r.w);
    }
    store4<kBf16>(xs, g.xl_off, j, r);
  }
  consumers_sync();
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 1) fused_decode_kernel(const FusedDecodeParams p, const Geom g) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* ring = smem;
  auto* full = reinterpret_cast<uint64_t*>(smem + g.slots * kFusedSlotBytes);
  uint64_t* empty = full + g.slots;
  float* fbase = reinterpret_cast<float*>(empty + g.slots);
  float* red = fbase + g.red_off;
  float* wt = fbase + g.wt_off;
  float* fx = fbase + g.xs_off;  // the vector's halves, or attention's scratch
  auto* xh = reinterpret_cast<uint16_t*>(fx);
  const int tid0 = threadIdx.x;
  if (tid0 == 0) {
    for (int i = 0; i < g.slots; ++i) {
      mbar_init(full + i, 1);
      mbar_init(empty + i, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int64_t stamps = int64_t{gridDim.x} * p.n_layer * 10;
  if (tid0 < 32) {  // the producer
    if (tid0 != 0) return;
    uint64_t pwait = 0;
    const uint64_t policy = evict_first_policy();
    int64_t t = 0;
    for (int32_t l = 0; l < p.n_layer; ++l) {
      const FusedLayerDev& L = p.layers[l];
      for (int ph = 0; ph < 4; ++ph) {
        int32_t u0, u1;
        unit_range(g.groups[ph], &u0, &u1);
        for (int32_t u = u0; u < u1; ++u) {
          const Group gr = group_at(p, g, L, ph, u);
          for (int32_t kb = 0; kb < g.nkb[ph]; ++kb, ++t) {
            const int32_t slot = static_cast<int32_t>(t % g.slots);
            const int64_t round = t / g.slots;
            if (round > 0) {
              const uint64_t w0 = p.trace ? now_ns() : 0;
              mbar_wait(empty + slot, static_cast<uint32_t>((round - 1) & 1));
              if (p.trace) pwait += now_ns() - w0;
            }
            copy_tile(p, g, ph, gr, kb, ring + int64_t{slot} * kFusedSlotBytes, full + slot, (p.exp & 2) != 0, policy);
          }
        }
      }
    }
    if (p.trace) p.trace[stamps + blockIdx.x * (W + 1)] = pwait;
    return;
  }

  // The consumers.
  const int tid = tid0 - 32;
  const int warp = tid >> 5, lane = tid & 31;
  // RoPE's (cos, sin) of the token's position, the same for every layer (in double, as rope.cuh).
  auto* rope_cs = reinterpret_cast<double*>(fbase + g.cs_off);
  if (blockIdx.x < g.splits * p.n_head) {
    const int32_t pos = p.pos[0];
    for (int32_t i = tid; i < p.rope.n_rot / 2; i += kConsumerThreads) {
      double c, sn;
      rope_angle(p.rope, pos, i, &c, &sn);
      rope_cs[2 * i] = c;
      rope_cs[2 * i + 1] = sn;
    }
  }
  float* res = fbase + g.res_off + warp * 16;
  const Work wk = work_of(p);
  unsigned barriers = 0;
  uint64_t cwait = 0;
  int64_t t = 0;   // tiles of the step so far (the producer's count)
  int64_t gc = 0;  // groups of the step so far: group gc goes to warp gc % W
  // Trace: stamps of phase ph of layer l (0 start, 1 end) by the block's first consumer thread.
  auto stamp = [&](int32_t l, int ph, int e) {
    if (p.trace == nullptr) return;
    if (e == 1) consumers_sync();  // the block's end: its last warp's
    if (tid == 0) p.trace[(int64_t{blockIdx.x} * p.n_layer + l) * 10 + ph * 2 + e] = stamp_ns();
  };
  // Runs phase ph's groups of this block; out(group) takes each group's row results in res[] (in
  // every lane).
  auto run_phase = [&](const FusedLayerDev& L, int ph, auto&& out) {
    int32_t u0, u1;
    unit_range(g.groups[ph], &u0, &u1);
    const int32_t nkb = g.nkb[ph], kb = g.kb[ph], ns = 16 / g.tr[ph];
    for (int32_t u = u0; u < u1; ++u, ++gc) {
      if (static_cast<int>(gc % W) != warp) {
        t += nkb;
        continue;
      }
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int32_t k = 0; k < nkb; ++k, ++t) {
        const int32_t slot = static_cast<int32_t>(t % g.slots);
        const uint64_t w0 = p.trace ? now_ns() : 0;
        mbar_wait(full + slot, static_cast<uint32_t>((t / g.slots) & 1));
        if (p.trace) cwait += now_ns() - w0;
        if (!(p.exp & 1)) mma_tile<kBf16>(ring + int64_t{slot} * kFusedSlotBytes, kb, ns, k * kb, xh, g.xl_off, lane, c);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + slot);
      }
      mma_result(c, ns, lane, res);
      out(group_at(p, g, L, ph, u));
      __syncwarp();  // res is rewritten by the next group
    }
  };
  const int32_t kvd = p.n_kv * p.head_dim;
  for (int32_t l = 0; l < p.n_layer; ++l) {
    const FusedLayerDev& L = p.layers[l];
    // 0. QKV
    stamp(l, 0, 0);
    load_normed<kBf16>(p.x, L.attn_norm, p.n_embd, p.eps, xh, g.xl_off, red, tid);
    run_phase(L, 0, [&](const Group& gr) {
      const float* bias = gr.mat == 0 ? L.bq : (gr.mat == 1 ? L.bk : L.bv);
      float* out = wk.qkv + (gr.mat == 0 ? 0 : (gr.mat == 1 ? p.n_embd : p.n_embd + kvd)) + gr.row0;
      if (lane < gr.nrows) out[lane] = res[lane] + (bias != nullptr ? bias[gr.row0 + lane] : 0.0f);
    });
    stamp(l, 0, 1);
    grid_sync(p.barrier, ++barriers);
    // 1. attention
    stamp(l, 1, 0);
    if (blockIdx.x < g.splits * p.n_head) {
      unsigned long long* ts =
          p.trace ? p.trace + stamps + gridDim.x * (W + 1) + (int64_t{blockIdx.x} * p.n_layer + l) * 6 : nullptr;
      switch (L.kv.dtype) {
        case KvDtype::kF32: attention<0>(p, g, L, wk, fx, rope_cs, ts, tid); break;
        case KvDtype::kF16: attention<1>(p, g, L, wk, fx, rope_cs, ts, tid); break;
        default: attention<2>(p, g, L, wk, fx, rope_cs, ts, tid); break;
      }
    }
    stamp(l, 1, 1);
    grid_sync(p.barrier, ++barriers);
    // 2. O
    stamp(l, 2, 0);
    load_attention<kBf16>(p, g, wk, xh, wt, tid);
    run_phase(L, 1, [&](const Group& gr) {
      if (lane < gr.nrows) atomicAdd(p.x + gr.row0 + lane, res[lane]);
    });
    stamp(l, 2, 1);
    grid_sync(p.barrier, ++barriers);
    // 3. gate/up
    stamp(l, 3, 0);
    load_normed<kBf16>(p.x, L.ffn_norm, p.n_embd, p.eps, xh, g.xl_off, red, tid);
    const int32_t half_rows = g.tr[2] / 2;
    run_phase(L, 2, [&](const Group& gr) {
      if (lane < gr.nrows) {
        const float gv = res[lane];
        wk.act[gr.row0 + lane] = gv / (1.0f + expf(-gv)) * res[half_rows + lane];
      }
    });
    stamp(l, 3, 1);
    grid_sync(p.barrier, ++barriers);
    // 4. down
    stamp(l, 4, 0);
    load_plain<kBf16>(wk.act, p.n_ff, xh, g.xl_off, tid);
    run_phase(L, 3, [&](const Group& gr) {
      if (lane < gr.nrows) atomicAdd(p.x + gr.row0 + lane, res[lane]);
    });
    stamp(l, 4, 1);
    grid_sync(p.barrier, ++barriers);
  }
  if (p.trace && lane == 0) p.trace[stamps + blockIdx.x * (W + 1) + 1 + warp] = cwait;
}

struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;
};
DeviceInfo device_info() {
  int dev = 0;
  STRATA_CUDA(cudaGetDevice(&dev));
  static std::mutex mu;
  static DeviceInfo cache[64];
  std::lock_guard<std::mutex> lock(mu);
  DeviceInfo& d = cache[dev & 63];
  if (d.sms == 0) {
    STRATA_CUDA(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  }
  return d;
}

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Tiles of a matrix of C columns (see Geom): TR rows in {16, 8, 4} (the most that fit a slot with
// C a multiple of 16 * NS), else, unless `pair`, 4 rows of KB columns, KB the largest multiple of
// 64 dividing C with 4 KB halves in a slot. False when neither fits.
bool pick_tiles(int64_t C, bool pair, int32_t* tr, int32_t* kb, int32_t* nkb) {
  for (int32_t r : {16, 8, 4}) {
    const int32_t ns = 16 / r;
    if (int64_t{r} * C * 2 <= kFusedSlotBytes && C % (16 * ns) == 0) {
      *tr = r, *kb = static_cast<int32_t>(C), *nkb = 1;
      return true;
    }
  }
  if (pair) return false;
  for (int64_t k = kFusedSlotBytes / 8 / 64 * 64; k >= 64; k -= 64) {
    if (C % k == 0) {
      *tr = 4, *kb = static_cast<int32_t>(k), *nkb = static_cast<int32_t>(C / k);
      return true;
    }
  }
  return false;
}

// The geometry for a shape, or slots == 0 when it does not fit.
Geom make_geom(int32_t n_embd, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t n_ff, const DeviceInfo& dev) {
  Geom g;
  for (int ph = 0; ph < 4; ++ph) {
    if (!pick_tiles(ph == 3 ? n_ff : n_embd, ph == 2, &g.tr[ph], &g.kb[ph], &g.nkb[ph])) return g;
  }
  const int32_t kvd = n_kv * head_dim;
  g.qkv_groups[0] = ceil_div(n_embd, g.tr[0]);
  g.qkv_groups[1] = g.qkv_groups[2] = ceil_div(kvd, g.tr[0]);
  g.groups[0] = g.qkv_groups[0] + 2 * g.qkv_groups[1];
  g.groups[1] = ceil_div(n_embd, g.tr[1]);
  g.groups[2] = ceil_div(n_ff, g.tr[2] / 2);
  g.groups[3] = ceil_div(n_embd, g.tr[3]);
  g.splits = std::clamp(dev.sms / n_head, 1, kMaxSplits);
  g.red_off = 0;
  g.wt_off = 32;
  g.res_off = g.wt_off + (n_head * kMaxSplits + 31) / 32 * 32;
  g.cs_off = g.res_off + W * 16;                    // n_rot / 2 <= 64 (cos, sin) doubles
  g.xs_off = g.cs_off + 256;
  // The vector's halves: xh[n], then xl 16 bytes past a 128-byte boundary (the B loads of the two
  // halves fall in different banks).
  const int32_t n = std::max(n_embd, n_ff);
  g.xl_off = (n + 63) / 64 * 64 + 8;
  const int32_t vec_floats = (g.xl_off + n + 1) / 2;
  const int32_t att = 3 * head_dim + 2 * W + W * head_dim;
  const int64_t fixed = int64_t{g.xs_off + std::max(vec_floats, att)} * 4;
  const int64_t per_slot = kFusedSlotBytes + 16;  // the slot and its two mbarriers
  const int64_t slots = std::min<int64_t>(kMaxSlots, (dev.smem_optin - fixed) / per_slot);
  if (slots < 4) return g;
  g.slots = static_cast<int32_t>(slots);
  g.smem = static_cast<int32_t>(slots * per_slot + fixed);
  return g;
}

}  // namespace

bool fused_decode_fits(int32_t n_embd, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t n_ff, int32_t n_rot) {
  if (n_embd <= 0 || n_head <= 0 || n_kv <= 0 || n_ff <= 0) return false;
  if (n_embd % 8 != 0 || n_ff % 8 != 0) return false;
  if (n_embd > kConsumerThreads * 4 * kLoadBatch || n_ff > kConsumerThreads * 4 * kLoadBatch) return false;  // one load batch
  if (head_dim % 32 != 0 || head_dim > 128) return false;
  if (n_head % n_kv != 0 || n_head * head_dim != n_embd) return false;
  if (n_rot % 2 != 0 || n_rot > head_dim) return false;
  return make_geom(n_embd, n_head, n_kv, head_dim, n_ff, device_info()).slots > 0;  // a tile shape, and room for it
}

int64_t fused_decode_work_floats(int32_t n_embd, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t n_ff) {
  return int64_t{n_embd} + 2 * n_kv * head_dim + kMaxSplits * (int64_t{n_embd} + 2 * n_head) + n_ff;
}

int64_t fused_decode_trace_words(int32_t n_layer) {
  const int64_t blocks = device_info().sms;
  return blocks * n_layer * 10 + blocks * (W + 1) + blocks * n_layer * 6;
}

std::string fused_decode_trace_report(const unsigned long long* tr, int32_t n_layer) {
  const int64_t G = device_info().sms;
  const int64_t stamps = G * n_layer * 10;
  unsigned long long t0 = ~0ull, t1 = 0;
  for (int64_t i = 0; i < stamps; ++i) t0 = std::min(t0, tr[i]), t1 = std::max(t1, tr[i]);
  // Per phase: mean over layers of the median block's work (start -> end), and of the wait from the
  // last block's end to this block's next start (the barrier).
  static const char* names[5] = {"qkv", "attention", "o", "gate/up", "down"};
  std::string out = "fused decode trace: " + std::to_string((t1 - t0) / 1000.0) + " us in all, " +
                    std::to_string(G) + " blocks\n";
  for (int ph = 0; ph < 5; ++ph) {
    double work = 0, wmax = 0, bar = 0;
    for (int32_t l = 0; l < n_layer; ++l) {
      std::vector<double> d(static_cast<size_t>(G));
      unsigned long long last_end = 0, first_next = ~0ull;
      for (int64_t b = 0; b < G; ++b) {
        const unsigned long long* s = tr + (b * n_layer + l) * 10 + ph * 2;
        d[static_cast<size_t>(b)] = static_cast<double>(s[1] - s[0]);
        last_end = std::max(last_end, s[1]);
        const bool end = ph == 4 && l + 1 == n_layer;
        if (!end) {
          const unsigned long long* n = ph == 4 ? tr + (b * n_layer + l + 1) * 10 : s + 2;
          first_next = std::min(first_next, n[0]);
        }
      }
      std::sort(d.begin(), d.end());
      work += d[d.size() / 2];
      wmax += d.back();
      if (first_next != ~0ull) bar += static_cast<double>(first_next) - static_cast<double>(last_end);
    }
    out += "  " + std::string(names[ph]) + ": median block " + std::to_string(work / n_layer / 1000.0) +
           " us, slowest " + std::to_string(wmax / n_layer / 1000.0) + " us, last end -> first next start " +
           std::to_string(bar / n_layer / 1000.0) + " us\n";
  }
  double pw = 0, cw = 0;
  for (int64_t b = 0; b < G; ++b) {
    pw += static_cast<double>(tr[stamps + b * (W + 1)]);
    for (int w = 0; w < W; ++w) cw += static_cast<double>(tr[stamps + b * (W + 1) + 1 + w]);
  }
  // The attention phase's steps (blocks that attend): median over blocks, mean over layers.
  static const char* steps[5] = {"q/k/v loads", "RoPE", "keys (warp 0)", "other warps' keys", "merge"};
  const unsigned long long* at = tr + stamps + G * (W + 1);
  out += "  attention steps:";
  for (int i = 0; i < 5; ++i) {
    double sum = 0;
    for (int32_t l = 0; l < n_layer; ++l) {
      std::vector<double> d;
      for (int64_t b = 0; b < G; ++b) {
        const unsigned long long* a = at + (b * n_layer + l) * 6;
        if (a[0] != 0 && a[5] != 0) d.push_back(static_cast<double>(a[i + 1] - a[i]));
      }
      if (d.empty()) continue;
      std::sort(d.begin(), d.end());
      sum += d[d.size() / 2];
    }
    out += std::string(" ") + steps[i] + " " + std::to_string(sum / n_layer / 1000.0) + " us;";
  }
  out += "\n";
  out += "  producer waiting for free slots: " + std::to_string(pw / G / 1000.0) +
         " us per block; a consumer warp waiting for its tiles: " + std::to_string(cw / G / W / 1000.0) + " us\n";
  return out;
}

void fused_decode(const FusedDecodeParams& p, cudaStream_t s) {
  const DeviceInfo dev = device_info();
  const Geom g = make_geom(p.n_embd, p.n_head, p.n_kv, p.head_dim, p.n_ff, dev);
  if (g.slots == 0) throw std::logic_error("fused decode: the shape does not fit (fused_decode_fits)");
  auto kernel = p.bf16 ? fused_decode_kernel<true> : fused_decode_kernel<false>;
  static std::once_flag once[2];
  std::call_once(once[p.bf16 ? 1 : 0], [&] {
    STRATA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dev.smem_optin));
  });
  STRATA_CUDA(cudaMemsetAsync(p.barrier, 0, sizeof(unsigned), s));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(dev.sms));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(g.smem);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;  // cooperative: every block resident at once, which the grid barriers need
  STRATA_CUDA(cudaLaunchKernelEx(&cfg, kernel, p, g));
}

}  // namespace strata::cuda
