// Paged attention on the tensor cores (FlashAttention-2 style) for prompt chunks over f16/bf16 KV
// with or without a warm tier (int8 / fp8 / int4 sub-blocks) and blocks in host slots, head_dim 64
// or 128 (attention_mma.cuh says when attention.cu takes this path).
//
// A block of 4 warps takes one sequence, one kv head, one split of the keys and 64 consecutive
// "query vectors" of the sequence (vector v = query row v / group, head v % group of the kv head's
// GQA group, as attention.cu's kernels), warp w the 16 vectors 16 w.. (the M of mma.m16n8k16).
// Per tile of 64 keys (double-buffered: cp.async of the next tile's K and V rows, their block ids
// read from the table one tile earlier, while the warps compute on this one):
//   S = Q K^T   on the tensor cores, K fragments by ldmatrix from shared memory;
//   online softmax in FP32 on the S fragments in registers (row max over the 4 lanes of a quad);
//   O += P V    with P taken straight from the S fragments (their layout is the A operand's), V
//               fragments by ldmatrix.trans.
// Accuracy (split precision): K and V are exact in their 16-bit type, so the MMAs are exact
// products of 16-bit operands summed in FP32; Q is split into 16-bit parts (f16: hi + lo, 22
// bits; bf16: hi + mid + lo, 24 bits) and P into hi + lo, one MMA per part. On the op suite's
// inputs (q in [-2, 2], K and V in [-1, 1]) that is within 2e-7 of a double reference with f16 KV
// (FP32 rounding) and 3e-6 with bf16 KV (P's two bf16 parts hold 16 bits); the suite allows 2e-5.
//
// Warm tiles. A tile whose keys include a warm sub-block (block-uniform: __syncthreads_or of the
// threads' rows; tiles of hot rows only run exactly as above, same bits) is decoded by all threads
// after its hot rows have landed: each warm element x, in f32 exactly as kv_rows.cuh's row_elem
// (warm_decode_row) computes it, is split into hi = round16(x) in the tile and lo = round16(x - hi)
// in one more K and V buffer (lo = 0 for the tile's hot rows), and the tile takes two more MMAs
// per fragment: Q hi times K lo, and P hi times V lo (Q lo times K lo and P lo times V lo are
// below 2^-22 of a product, under Q's and P's own splits). Precision of hi + lo:
//   f16 KV: 22 bits. int8 elements (7-bit code times an f16 scale: 18 bits) and int4 (|q - zero|
//     <= 143 times an f16 scale: 19 bits) are exact, except where lo falls below f16's normal range
//     (absolute error <= 2^-25 per element); fp8 (an f32 scale times a 4-bit e4m3 value, rounded in
//     f32) within 2^-23 relative. Warm tiles keep the hot bound (~2e-7 on the suite's inputs).
//   bf16 KV: 16 bits, relative error <= 2^-17 per warm element. Values: each output moves by at
//     most 2^-17 max|v| (7.6e-6 for |v| <= 1), added to P's 3e-6. Keys: a score moves by at most
//     2^-17 * scale * sum |q_d k_d| (worst case 1.7e-4 for D = 128 on the suite's inputs, but the
//     rounding errors have random signs), an output by less than the spread of its scores' errors
//     times the spread of its values. A host model of this arithmetic on the suite's inputs (bf16
//     values in [-1, 1] encoded int8 / int4 / fp8, q in [-2, 2]) stays within 8e-6 of the double
//     reference (contexts of 1..8 keys: values barely averaged) and 3e-6 for contexts up to 1,100;
//     the suite holds the bf16 warm cases to its 2e-5. (A third part would need 2 more buffers:
//     one block per SM at D = 128.)
// Cost: the lo buffers (only for views with a warm tier: see MmaCfg), the two MMAs, and the decode,
// which runs between two barriers rather than behind the previous tile's MMAs as the cp.async
// copies of hot rows do; its code bytes are prefetched into L1 when the tile's ids are read, one
// tile ahead, and its loads are free to run ahead of its stores.
//
// Scratch (nsplit > 1): the partials {m, l, acc[hd]} of attention.cu's combine kernel.
#include "backend/cuda/attention_mma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/attention_mma_stats.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_rows.cuh"
#include "backend/cuda/seq_slots.cuh"

namespace strata::cuda::attn {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16;                // query vectors per warp
constexpr int kVecs = kWarps * kRows;    // query vectors per block
constexpr int kKeys = 64;                // keys per tile
constexpr int kThreads = kWarps * 32;

std::atomic<int64_t> g_launches{0};

// Shared memory: K [2][kKeys][STRIDE] then V [2][kKeys][STRIDE], 16-bit elements; rows padded by
// 16 bytes so that the 8 row addresses of an ldmatrix phase fall in distinct banks. A view with a
// warm tier adds the low parts of a warm tile, K lo [kKeys][STRIDE] then V lo [kKeys][STRIDE]
// (one buffer: a warm tile is decoded after the barrier that ends the copies of its hot rows).
// D = 128: 68 KiB hot only, 102 KiB with a warm tier, both two blocks per SM (227 KiB).
template <int D>
struct MmaCfg {
  static constexpr int STRIDE = D + 8;
  static constexpr int TILE_BYTES = kKeys * STRIDE * 2;
  static constexpr int SMEM = 4 * TILE_BYTES;
  static constexpr int SMEM_WARM = 6 * TILE_BYTES;
};

template <bool BF>
struct Elem;
template <>
struct Elem<false> {
  static constexpr int kQParts = 2;
  __device__ static uint16_t round(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ static float widen(uint16_t h) { return __half2float(__ushort_as_half(h)); }
};
template <>
struct Elem<true> {
  static constexpr int kQParts = 3;
  __device__ static uint16_t round(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
  __device__ static float widen(uint16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }
};

// (x, y) as N 16-bit parts, packed pairwise (x in the low half: the lower column of a fragment).
// Each remainder x - widen(part) is exact in f32, so the parts sum to x within the last part's
// rounding.
template <bool BF, int N>
__device__ __forceinline__ void split_pack(float x, float y, uint32_t (&parts)[N]) {
  using E = Elem<BF>;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint16_t a = E::round(x), c = E::round(y);
    parts[i] = static_cast<uint32_t>(a) | (static_cast<uint32_t>(c) << 16);
    x -= E::widen(a);
    y -= E::widen(c);
  }
}

template <bool BF>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// 16 bytes global -> shared, asynchronously; bytes = 0 writes zeros (reads nothing).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// 16 bytes to shared memory. No "memory" clobber: the compiler may move global loads (the next
// rows' warm codes) above it; the barrier after stage_warm orders it before the ldmatrix reads.
__device__ __forceinline__ void st_shared16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_wait_1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// Rows of a tile that thread tid copies: chunk tid % (D / 8) (16 bytes) of rows tid / (D / 8) +
// i * kRpp<D>, i < kKeys / kRpp<D>.
template <int D>
constexpr int kRpp = kThreads / (D / 8);

// The block ids of the thread's rows of the tile at k0 (-1 for keys >= ke), read one tile ahead so
// that the table's latency is not paid between two tiles.
template <int D>
__device__ __forceinline__ void tile_ids(const int32_t* table, int32_t bs, int32_t k0, int32_t ke, int tid,
                                         int32_t (&ids)[kKeys / kRpp<D>]) {
#pragma unroll
  for (int i = 0; i < kKeys / kRpp<D>; ++i) {
    const int32_t key = k0 + tid / (D / 8) + i * kRpp<D>;
    ids[i] = key < ke ? table[key / bs] : -1;
  }
}

// Whether block id `id` of a table is a warm sub-block (not hot, not in a host slot).
__device__ __forceinline__ bool is_warm(const KvLayerView& kv, int32_t id) {
  return kv.warm_format != WarmFormat::kNone && id >= kv.n_hot_blocks && id < kv.host_base;
}

__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.L1 [%0];" ::"l"(p)); }

// The code bytes stage_warm will read for elements [d, d + 8) of the K and V rows of warm
// sub-block `id` (token `slot`, kv head `head`; the addresses of row_src). Issued a tile ahead, so
// that the decode after the barrier finds them in L1 (or L2) rather than waiting on HBM. Scales
// and zero points are left out: a few lines per slot, shared by many rows.
__device__ __forceinline__ void prefetch_warm(const KvLayerView& kv, int32_t id, int32_t slot, int32_t head, int d) {
  const int32_t w = id - kv.n_hot_blocks;
  const int64_t t = int64_t{w % kv.warm_span} * kv.block_size + slot;
  const int64_t row = t * kv.n_kv_heads + head;
  const int sh = kv.warm_format == WarmFormat::kInt4 ? 1 : 0;  // int4: two elements a byte
  const int64_t off = ((row * kv.head_dim) >> sh) + (d >> sh);
  prefetch_l1(kv.warm_k + (w / kv.warm_span) * kv.warm_k_slot_bytes + off);
  prefetch_l1(kv.warm_v + (w / kv.warm_span) * kv.warm_v_slot_bytes + off);
}

// The thread's part of the tile at k0 (block ids from tile_ids): K and V rows to the tile buffers
// at shared addresses ks and vs, zeros for keys past the range (so that masked products stay
// finite) and for warm rows (stage_warm writes them; with `prefetch` their code bytes are
// prefetched). Returns whether one of the thread's rows is warm (never without WARM: a view with no
// warm tier compiles the check away).
template <int D, bool WARM>
__device__ __forceinline__ bool load_tile(const KvLayerView& kv, const int32_t (&ids)[kKeys / kRpp<D>], int32_t kvh,
                                          int32_t k0, uint32_t ks, uint32_t vs, int tid, bool prefetch) {
  const int c = tid % (D / 8);
  const int32_t bs = kv.block_size;
  bool warm = false;
#pragma unroll
  for (int i = 0; i < kKeys / kRpp<D>; ++i) {
    const int j = tid / (D / 8) + i * kRpp<D>;
    const int32_t key = k0 + j;
    const uint8_t* kp = kv.k;
    const uint8_t* vp = kv.v;
    int bytes = 0;
    if (WARM && is_warm(kv, ids[i])) {
      warm = true;
      if (prefetch) prefetch_warm(kv, ids[i], key % bs, kvh, c * 8);
    } else if (ids[i] >= 0) {  // a hot block, or one in a host slot (hot_row: --kv-offload)
      kp = hot_row(kv, false, ids[i], key % bs, kvh, 2) + c * 16;
      vp = hot_row(kv, true, ids[i], key % bs, kvh, 2) + c * 16;
      bytes = 16;
    }
    const uint32_t o = static_cast<uint32_t>((j * MmaCfg<D>::STRIDE + c * 8) * 2);
    cp_async16(ks + o, kp, bytes);
    cp_async16(vs + o, vp, bytes);
  }
  return warm;
}

__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Elements [d, d + 8) of the K (value = false) or V row of warm sub-block `id` (token `slot`, kv
// head `head`), each as kv_rows.cuh's row_elem (kv/warm_format.cpp's warm_decode_row) computes it.
// Code bytes (and int4 keys' scales and zeros) by 4-byte loads: slots and their sections start at
// multiples of 4 bytes and d is a multiple of 8.
__device__ __forceinline__ void warm_chunk(const KvLayerView& kv, bool value, int32_t id, int32_t slot, int32_t head,
                                           int d, float (&x)[8]) {
  const RowSrc r = row_src(kv, value, id, slot, head);
  if (r.kind == 3 || r.kind == 4) {  // int8 / fp8: byte e of the chunk is element d + e
    const uint32_t w[2] = {ld_u32(r.data + d), ld_u32(r.data + d + 4)};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint8_t b = static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4)));
      x[e] = r.kind == 3 ? r.scale * static_cast<float>(static_cast<int8_t>(b)) : r.scale * e4m3_decode(b);
    }
  } else if (r.kind == 5) {  // int4 K: element d + e is nibble e of the chunk's 4 bytes (low nibble
                             // first), with its channel's f16 scale and int8 zero (4-byte aligned)
    const uint32_t w = ld_u32(r.data + d / 2);
    const uint8_t* sc = r.sc + 2 * d;
    const uint8_t* zr = reinterpret_cast<const uint8_t*>(r.zr) + d;
    const uint32_t scw[4] = {ld_u32(sc), ld_u32(sc + 4), ld_u32(sc + 8), ld_u32(sc + 12)};
    const uint32_t zrw[2] = {ld_u32(zr), ld_u32(zr + 4)};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int nib = static_cast<int>((w >> (4 * e)) & 0xfu);
      const float scale = half_bits_to_f32(static_cast<uint16_t>(scw[e / 2] >> (16 * (e % 2))));
      const int zero = static_cast<int8_t>(static_cast<uint8_t>(zrw[e / 4] >> (8 * (e % 4))));
      x[e] = scale * static_cast<float>(nib - zero);
    }
  } else {  // int4 V: the chunk lies in one group of r.gv channels (8 divides gv)
    const uint32_t w = ld_u32(r.data + d / 2);
    const float scale = ld_f16(r.sc + 2 * (d / r.gv));
    const int zero = r.zr[d / r.gv];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = scale * static_cast<float>(static_cast<int>((w >> (4 * e)) & 0xfu) - zero);
  }
}

// The warm rows of the tile at k0 (keys < ke), the thread's chunks of them as load_tile's: each
// element x decoded to f32 and split into hi = round16(x) (to the tile buffers at byte offsets khi
// and vhi of shared memory, where load_tile left zeros) and lo = round16(x - hi) (to the lo
// buffers at klo and vlo); lo = 0 for the tile's other rows, so that the extra MMAs of a warm tile
// add exact zeros for them.
template <int D, bool BF>
__device__ __forceinline__ void stage_warm(const KvLayerView& kv, const int32_t* table, int32_t kvh, int32_t k0,
                                           int32_t ke, uint32_t khi, uint32_t vhi, uint32_t klo, uint32_t vlo,
                                           int tid) {
  constexpr int R = kKeys / kRpp<D>;
  const int c = tid % (D / 8);
  const int32_t bs = kv.block_size;
  // All rows' loads in flight together at D = 64; at D = 128 two rows at a time, one with bf16
  // (registers: the kernel holds O and Q's parts across this; bf16 has three).
  constexpr int U = D == 64 ? R : (BF ? 1 : 2);
#pragma unroll U
  for (int i = 0; i < R; ++i) {
    const int j = tid / (D / 8) + i * kRpp<D>;
    const int32_t key = k0 + j;
    const int32_t id = key < ke ? table[key / bs] : -1;
    const uint32_t o = static_cast<uint32_t>((j * MmaCfg<D>::STRIDE + c * 8) * 2);
    uint4 lo[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
    if (is_warm(kv, id)) {
#pragma unroll
      for (int w = 0; w < 2; ++w) {  // K, V
        float x[8];
        warm_chunk(kv, w == 1, id, key % bs, kvh, c * 8, x);
        uint32_t hi[4], lw[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint32_t parts[2];
          split_pack<BF, 2>(x[2 * e], x[2 * e + 1], parts);
          hi[e] = parts[0];
          lw[e] = parts[1];
        }
        st_shared16((w == 1 ? vhi : khi) + o, make_uint4(hi[0], hi[1], hi[2], hi[3]));
        lo[w] = make_uint4(lw[0], lw[1], lw[2], lw[3]);
      }
    }
    st_shared16(klo + o, lo[0]);
    st_shared16(vlo + o, lo[1]);
  }
}

// WARM: the view has a warm tier (int8 / fp8 / int4 sub-blocks). Without it the warm checks, the
// staging and the extra MMAs are compiled out, so hot-only views (and host slots) run the kernel
// they ran before warm tiles were read here (device call 1 of 2026-12-03: the runtime checks cost
// hot prefill ~16%).
template <int D, bool BF, bool WARM>
__global__ void __launch_bounds__(kThreads, 2)
    attention_mma_kernel(const float* __restrict__ q, KvLayerView kv, AttnBatch b, int32_t n_head, int32_t group,
                         float scale, float* __restrict__ out, int32_t nsplit, int64_t group_slots,
                         bool warm_prefetch) {
  using C = MmaCfg<D>;
  constexpr int NQ = Elem<BF>::kQParts;
  constexpr int KSTEPS = D / 16;    // k-steps of S = Q K^T
  constexpr int NT_S = kKeys / 8;   // n-tiles of S
  constexpr int NT_O = D / 8;       // n-tiles of O
  constexpr int STRIDE = C::STRIDE;
  extern __shared__ float4 smem4[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem4));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  // fragment row (and row + 8), column pair 2 tig

  const int64_t n_kv = kv.n_kv_heads;
  const int64_t blk = blockIdx.x;
  const int64_t gslot = blk % group_slots;
  const int64_t rest = blk / group_slots;
  const int32_t kvh = static_cast<int32_t>(rest % n_kv);
  const int32_t split = static_cast<int32_t>(rest / n_kv);

  // Which sequence holds block slot gslot: prefix sums of its blocks ceil(n_q * group / kVecs)
  // over the sequences (every warp computes the same).
  int32_t seq;
  int64_t local;
  find_seq_slot(
      b.n_seqs, [&](int32_t si) { return (int64_t{b.seqs[si].n_q} * group + kVecs - 1) / kVecs; }, gslot, lane, &seq,
      &local);
  if (seq < 0) return;  // block-uniform
  const AttnSeqDev sd = b.seqs[seq];
  const int32_t* table = b.tables + sd.table_offset;
  const int32_t nvec = sd.n_q * group;
  const int64_t ngr = (int64_t{nvec} + kVecs - 1) / kVecs;
  const int32_t vbase = static_cast<int32_t>((ngr - 1 - local) * kVecs);  // longest key ranges first
  const int32_t vlast = min(nvec, vbase + kVecs) - 1;
  const int32_t kend = sd.start_pos + vlast / group + 1;  // the block's causal key range
  const int32_t v0 = vbase + warp * kRows;
  const int32_t rcount = max(0, min(nvec - v0, kRows));
  const int32_t kend_w = rcount > 0 ? sd.start_pos + (v0 + rcount - 1) / group + 1 : 0;
  int32_t chunk = (kend + nsplit - 1) / nsplit;
  chunk = (chunk + kKeys - 1) / kKeys * kKeys;
  const int32_t kb = split * chunk;
  const int32_t ke = min(kend, kb + chunk);

  // The thread's two vectors (fragment rows g and g + 8): output rows and key limits (keys <
  // start_pos + row + 1 and < ke; 0 for vectors past the sequence).
  const int32_t va = v0 + g, vb = v0 + g + 8;
  const bool oka = va < nvec, okb = vb < nvec;
  const int64_t rowa = (int64_t{sd.q_begin} + va / group) * n_head + int64_t{kvh} * group + va % group;
  const int64_t rowb = (int64_t{sd.q_begin} + vb / group) * n_head + int64_t{kvh} * group + vb % group;
  const int32_t lima = oka ? min(sd.start_pos + va / group + 1, ke) : 0;
  const int32_t limb = okb ? min(sd.start_pos + vb / group + 1, ke) : 0;

  // Q fragments (A operand, row-major 16 x 16 per k-step), split into NQ 16-bit parts.
  uint32_t qf[NQ][KSTEPS][4];
  {
    const float2 zero = make_float2(0.0f, 0.0f);
    const float* qa = q + rowa * D + 2 * tig;
    const float* qb = q + rowb * D + 2 * tig;
#pragma unroll
    for (int t = 0; t < KSTEPS; ++t) {
      const float2 x[4] = {oka ? *reinterpret_cast<const float2*>(qa + 16 * t) : zero,
                           okb ? *reinterpret_cast<const float2*>(qb + 16 * t) : zero,
                           oka ? *reinterpret_cast<const float2*>(qa + 16 * t + 8) : zero,
                           okb ? *reinterpret_cast<const float2*>(qb + 16 * t + 8) : zero};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t parts[NQ];
        split_pack<BF, NQ>(x[i].x, x[i].y, parts);
#pragma unroll
        for (int p = 0; p < NQ; ++p) qf[p][t][i] = parts[p];
      }
    }
  }

  float o[NT_O][4];
#pragma unroll
  for (int n = 0; n < NT_O; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int32_t ntiles = kb < ke ? (ke - kb + kKeys - 1) / kKeys : 0;
  int32_t ids[kKeys / kRpp<D>];
  bool warm_cur = false;  // whether one of the thread's rows of the current tile is warm
  if (ntiles > 0) {
    tile_ids<D>(table, kv.block_size, kb, ke, tid, ids);
    warm_cur = load_tile<D, WARM>(kv, ids, kvh, kb, sbase, sbase + 2 * C::TILE_BYTES, tid, warm_prefetch);
    tile_ids<D>(table, kv.block_size, kb + kKeys, ke, tid, ids);
  }
  cp_commit();
  for (int32_t it = 0; it < ntiles; ++it) {
    const int32_t k0 = kb + it * kKeys;
    bool warm_next = false;
    if (it + 1 < ntiles) {
      const uint32_t nb = static_cast<uint32_t>((it + 1) & 1) * C::TILE_BYTES;
      warm_next =
          load_tile<D, WARM>(kv, ids, kvh, k0 + kKeys, sbase + nb, sbase + 2 * C::TILE_BYTES + nb, tid, warm_prefetch);
      tile_ids<D>(table, kv.block_size, k0 + 2 * kKeys, ke, tid, ids);  // used by the next iteration
    }
    cp_commit();
    cp_wait_1();  // this tile's copies (all but the group just committed) are done
    // ... for every thread's copies; and whether the tile has a warm row (block-uniform).
    bool warm = false;
    if constexpr (WARM) {
      warm = __syncthreads_or(warm_cur) != 0;
    } else {
      __syncthreads();
    }
    warm_cur = warm_next;
    const int cur = (it & 1) * C::TILE_BYTES;
    if constexpr (WARM) {
      if (warm) {  // its warm rows decoded into the tile (hi) and the lo buffers, by every thread
        stage_warm<D, BF>(kv, table, kvh, k0, ke, sbase + cur, sbase + 2 * C::TILE_BYTES + cur,
                          sbase + 4 * C::TILE_BYTES, sbase + 5 * C::TILE_BYTES, tid);
        __syncthreads();
      }
    }
    if (k0 < kend_w) {  // warp-uniform
      const uint32_t kt = sbase + static_cast<uint32_t>(cur);
      const uint32_t vt = kt + 2 * C::TILE_BYTES;
      const uint32_t klo = sbase + 4 * C::TILE_BYTES, vlo = sbase + 5 * C::TILE_BYTES;
      // S = Q K^T: one ldmatrix.x4 gives the B fragments of n-tile n for k-steps t and t + 1.
      float s[NT_S][4];
#pragma unroll
      for (int n = 0; n < NT_S; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int t = 0; t < KSTEPS; t += 2) {
#pragma unroll
        for (int n = 0; n < NT_S; ++n) {
          uint32_t kf[4];
          const uint32_t ko = static_cast<uint32_t>(((n * 8 + (lane & 7)) * STRIDE + t * 16 + (lane >> 3) * 8) * 2);
          ldsm_x4(kf, kt + ko);
          if (WARM && warm) {  // Q hi times K lo (Q lo times K lo is below Q's own precision)
            uint32_t kl[4];
            ldsm_x4(kl, klo + ko);
            mma<BF>(s[n], qf[0][t], kl[0], kl[1]);
            mma<BF>(s[n], qf[0][t + 1], kl[2], kl[3]);
          }
#pragma unroll
          for (int p = NQ - 1; p >= 0; --p) {
            mma<BF>(s[n], qf[p][t], kf[0], kf[1]);
            mma<BF>(s[n], qf[p][t + 1], kf[2], kf[3]);
          }
        }
      }
      // Online softmax: s[n][e] (row g) and s[n][2 + e] (row g + 8) hold key k0 + 8 n + 2 tig + e.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < NT_S; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int32_t key = k0 + 8 * n + 2 * tig + e;
          s[n][e] = key < lima ? s[n][e] * scale : -INFINITY;
          s[n][2 + e] = key < limb ? s[n][2 + e] * scale : -INFINITY;
          mx[0] = fmaxf(mx[0], s[n][e]);
          mx[1] = fmaxf(mx[1], s[n][2 + e]);
        }
      }
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mn = fmaxf(m[r], mx[r]);
        corr[r] = mn == -INFINITY ? 1.0f : expf(m[r] - mn);
        m[r] = mn;
        l[r] *= corr[r];
      }
#pragma unroll
      for (int n = 0; n < NT_S; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const float p = m[r] == -INFINITY ? 0.0f : expf(s[n][e] - m[r]);
          l[r] += p;
          s[n][e] = p;
        }
      }
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
      }
      // O += P V: the A fragment of keys 16 kk.. is S n-tiles 2 kk and 2 kk + 1; one
      // ldmatrix.x4.trans gives the B fragments of output n-tiles 2 dt and 2 dt + 1.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t pf[2][4];
        {
          uint32_t parts[2];
          split_pack<BF, 2>(s[2 * kk][0], s[2 * kk][1], parts);
          pf[0][0] = parts[0];
          pf[1][0] = parts[1];
          split_pack<BF, 2>(s[2 * kk][2], s[2 * kk][3], parts);
          pf[0][1] = parts[0];
          pf[1][1] = parts[1];
          split_pack<BF, 2>(s[2 * kk + 1][0], s[2 * kk + 1][1], parts);
          pf[0][2] = parts[0];
          pf[1][2] = parts[1];
          split_pack<BF, 2>(s[2 * kk + 1][2], s[2 * kk + 1][3], parts);
          pf[0][3] = parts[0];
          pf[1][3] = parts[1];
        }
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t vf[4];
          const uint32_t vo = static_cast<uint32_t>(
              ((kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + dt * 16 + (lane >> 4) * 8) * 2);
          ldsm_x4_trans(vf, vt + vo);
          if (WARM && warm) {  // P hi times V lo
            uint32_t vl[4];
            ldsm_x4_trans(vl, vlo + vo);
            mma<BF>(o[2 * dt], pf[0], vl[0], vl[1]);
            mma<BF>(o[2 * dt + 1], pf[0], vl[2], vl[3]);
          }
          mma<BF>(o[2 * dt], pf[1], vf[0], vf[1]);
          mma<BF>(o[2 * dt], pf[0], vf[0], vf[1]);
          mma<BF>(o[2 * dt + 1], pf[1], vf[2], vf[3]);
          mma<BF>(o[2 * dt + 1], pf[0], vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

  float L[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    L[r] = l[r] + __shfl_xor_sync(0xffffffffu, l[r], 1);
    L[r] += __shfl_xor_sync(0xffffffffu, L[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!(r == 0 ? oka : okb)) continue;
    const int64_t row = r == 0 ? rowa : rowb;
    if (b.imp_ml != nullptr && tig == 0) {  // importance asked: this split's (max, sum) of the row
      b.imp_ml[(row * nsplit + split) * 2] = m[r];
      b.imp_ml[(row * nsplit + split) * 2 + 1] = L[r];
    }
    if (nsplit == 1) {
      const float inv = 1.0f / L[r];
      float* dst = out + row * D + 2 * tig;
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      }
    } else {
      float* part = b.scratch + (row * nsplit + split) * (D + 2);
      if (tig == 0) {
        part[0] = m[r];
        part[1] = L[r];
      }
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        *reinterpret_cast<float2*>(part + 2 + 8 * n + 2 * tig) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
      }
    }
  }
}

// STRATA_CUDA_MMA_WARM_PREFETCH=0: no prefetch of warm lines a tile ahead (for comparisons; read
// once).
bool warm_prefetch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_MMA_WARM_PREFETCH");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

template <int D, bool BF, bool WARM>
int32_t launch_warm_t(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                      float* out, cudaStream_t s) {
  const int32_t group = n_head / kv.n_kv_heads;
  const int32_t nsplit = mma_splits(b.n_tokens, n_head, b.max_ctx);
  const int64_t group_slots = (int64_t{b.n_tokens} * group + kVecs - 1) / kVecs + b.n_seqs;
  const int64_t blocks = group_slots * kv.n_kv_heads * nsplit;
  static bool configured = false;  // one flag per instantiation; launchers run on the engine thread only
  if (!configured) {
    STRATA_CUDA(cudaFuncSetAttribute(attention_mma_kernel<D, BF, WARM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     MmaCfg<D>::SMEM_WARM));
    configured = true;
  }
  // The lo buffers only where a tile can be warm (hot-only views keep their occupancy).
  const int smem = kv.warm_format != WarmFormat::kNone ? MmaCfg<D>::SMEM_WARM : MmaCfg<D>::SMEM;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  attention_mma_kernel<D, BF, WARM><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
      q, kv, b, n_head, group, scale, out, nsplit, group_slots, warm_prefetch_enabled());
  STRATA_CUDA_LAUNCH_CHECK();
  return nsplit;
}

// STRATA_CUDA_MMA_HOT_AS_WARM=1 runs hot-only views through the warm instantiation too (to measure
// what its runtime checks cost; read once).
bool hot_as_warm() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_MMA_HOT_AS_WARM");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

template <int D, bool BF>
int32_t launch_t(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
                 cudaStream_t s) {
  if (kv.warm_format != WarmFormat::kNone || hot_as_warm()) {
    return launch_warm_t<D, BF, true>(q, kv, b, n_head, scale, out, s);
  }
  return launch_warm_t<D, BF, false>(q, kv, b, n_head, scale, out, s);
}

}  // namespace

// STRATA_CUDA_MMA_ATTN=0 sends every batch to the FP32 kernels (for comparisons; read once).
bool mma_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_MMA_ATTN");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

int64_t mma_launches() { return g_launches.load(std::memory_order_relaxed); }

// STRATA_CUDA_MMA_WARM=0 sends views with a warm tier to the FP32 kernels, as before this kernel
// read warm tiles (for comparisons; read once).
bool mma_warm_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_MMA_WARM");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

bool mma_eligible(const KvLayerView& kv) {
  if (!mma_enabled()) return false;
  if (kv.warm_format != WarmFormat::kNone && !mma_warm_enabled()) return false;
  const bool aligned = (reinterpret_cast<uintptr_t>(kv.k) | reinterpret_cast<uintptr_t>(kv.v)) % 16 == 0;
  return (kv.dtype == KvDtype::kF16 || kv.dtype == KvDtype::kBF16) && (kv.head_dim == 64 || kv.head_dim == 128) &&
         aligned;
}

// Enough blocks for one per SM of an H200 (132) when the batch alone does not give them
// (n_tokens * n_head / kVecs is a lower bound of its blocks), each split at least one tile.
int32_t mma_splits(int32_t n_tokens, int32_t n_head, int32_t max_ctx) {
  const int64_t base = std::max<int64_t>(1, int64_t{n_tokens} * n_head / kVecs);
  int64_t s = (132 + base - 1) / base;
  s = std::min<int64_t>(s, std::max<int32_t>(1, max_ctx / kKeys));
  s = std::min<int64_t>(s, 128);
  return static_cast<int32_t>(std::max<int64_t>(s, 1));
}

int32_t launch_mma(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
                   cudaStream_t s) {
  const bool bf = kv.dtype == KvDtype::kBF16;
  if (kv.head_dim == 64) return bf ? launch_t<64, true>(q, kv, b, n_head, scale, out, s)
                                   : launch_t<64, false>(q, kv, b, n_head, scale, out, s);
  return bf ? launch_t<128, true>(q, kv, b, n_head, scale, out, s)
            : launch_t<128, false>(q, kv, b, n_head, scale, out, s);
}

}  // namespace strata::cuda::attn
