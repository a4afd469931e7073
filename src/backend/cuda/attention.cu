// Paged attention of the CUDA backend over block tables (hot f32/f16/bf16 rows and warm
// int8/fp8/int4 rows, decoded in the inner loop exactly as kv/warm_format.cpp's warm_decode_row).
//
// Batches with a sequence of n_q > 1 over f16/bf16 KV of head_dim 64 or 128 (hot, warm and host-slot
// blocks alike) take the tensor-core kernel of attention_mma.cu (its partials merged by the combine
// kernel below).
// Batches whose sequences all have n_q <= 1 (decode) take attention_decode_kernel (below: block per
// sequence, kv head, split; its warps split the keys and merge in shared memory; no combine kernel
// when the contexts are short). Everything else takes attention_kernel:
// A thread block of WQ warps (WQ = 4 when some sequence has
// >= 4 query tiles, i.e. prefill; else 1) takes one sequence, one kv head, one split of the keys and
// WQ consecutive tiles of kR "query vectors" (vector v of a sequence = query row v / group, head
// v % group of the kv head's GQA group; warp w owns tile w). The block's key range is the causal
// range of its last tile (split `split` of it). Per tile of kKT keys:
//   phase A (warp 0, lane per key; table entries prefetched during the previous tile's math): the
//     K and V row sources (RowSrc) of the tile's keys into shared memory;
//   phase B (all threads): K rows to Ks [kKT][D + 4] and V rows to Vs [kKT][D], decoded to f32, hot
//     rows by independent 16-byte loads all in flight together, warm rows likewise (below);
//   each warp (skipping tiles past its own causal end, but keeping every barrier): scores
//     lane-per-key, online softmax per vector (max by warp shuffles, lane-partial sums), P.V
//     lane-per-channel (d = lane + 32 i) from Vs.
// With one split the warp writes out[]; with nsplit > 1 (flash-decoding, chosen from the batch shape;
// splits down to one tile of keys) each split writes a partial (max, sum, acc[hd]) to scratch and a
// combine kernel merges (splits that got no keys write m = -INF and are skipped).
//
// Warm rows (both kernels) are decoded in registers right after their code's wide load: a row's
// scale (int8, fp8) or group scale and zero point (int4 V) once per chunk of 4 or 8 elements, int4
// K's per-channel ones once per group through a per-thread cache. The general kernel stages the
// values of row_elem (warm_decode_row's, bit for bit). The decode kernel (fused or not, the same
// code: the fused kernel stays bit-identical to the two ops) folds the per-token int8 and per-block
// fp8 scales instead: K rows are staged as the code's value and the key's score is scale_t * (q .
// code_t); V rows likewise and the softmax weight in P.V is p_t * scale_t (the sum l takes p_t).
// This rounds differently from scaling each element first (one product per key instead of one per
// element; a few ulps of the score and of the output), well within the op suite's 2e-5 of the CPU
// reference (PagedAttentionWarmDecode). int4 rows are staged as row_elem's values.
//
// Scratch layout (nsplit > 1, either kernel): float [n_tokens][n_head][nsplit][head_dim + 2] = {m, l, acc...}.
// Assumption: the batch's sequences cover rows [0, n_tokens) of q/out (the combine kernel reads
// every row's partials).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_mma_stats.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/seq_slots.cuh"
#include "backend/cuda/xq.cuh"

namespace strata::cuda {
namespace attn {

#define ATT_HD __host__ __device__ __forceinline__

// --- row decoding (as kv.cu; the element values of kv/warm_format.cpp's warm_decode_row) -------

// --- kernels -------------------------------------------------------------------------------------

constexpr int kR = 8;    // query vectors per warp
constexpr int kKT = 32;  // keys per tile (one per lane in the score phase)

static_assert((2 * kKT * sizeof(RowSrc)) % 16 == 0, "RowSrc table keeps the float tiles 16-byte aligned");

// Shared memory of a block of WQ warps (floats): RowSrc[2][kKT] (K rows, V rows of the tile), the
// K tile [kKT][D + 4] (stride D + 4: conflict-free float4 reads lane-per-key), the V tile [kKT][D],
// then per warp Qs [kR][D] and Ps [kR][kKT].
template <int VEC, int WQ>
struct Cfg {
  static constexpr int D = VEC * 32;
  static constexpr int NT = WQ * 32;
  static constexpr int KS = D + 4;
  static constexpr int RS_FLOATS = static_cast<int>(2 * kKT * sizeof(RowSrc) / sizeof(float));
  static constexpr int WARP_FLOATS = kR * D + kR * kKT;
  static constexpr int FLOATS = RS_FLOATS + kKT * KS + kKT * D + WQ * WARP_FLOATS;
};

// Phase A of a tile (one lane per key): the K and V row sources of key `key` (block id `id` from
// the table) into rs[lane] and rs[kKT + lane]; kind -1 (zeros) for keys past the range end ke.
ATT_HD void set_rowsrc(const KvLayerView& kv, RowSrc* rs, int lane, int32_t key, int32_t ke, int32_t id, int32_t kvh) {
  if (key < ke) {
    const int32_t slot = key % kv.block_size;
    rs[lane] = row_src(kv, false, id, slot, kvh);
    rs[kKT + lane] = row_src(kv, true, id, slot, kvh);
  } else {
    RowSrc z;
    z.kind = -1;
    rs[lane] = z;
    rs[kKT + lane] = z;
  }
}

// Phase B of a tile, thread `tid` of the block's NT: decoded K rows to Ks [kKT][D + 4] and V rows
// to Vs [kKT][D] (zeros past hd and for keys past the range). Hot rows of kind hot_kind are read
// with 16-byte loads (CE = 16 / ES elements, hd % CE == 0 and 16-byte aligned rows, checked by the
// launcher), all of a batch in flight together; warm rows by chunks of CE elements too (their
// code bytes in one load, decoded in registers: decode_warm_chunk).
// ES = 0: element by element for every row (any hd; row_elem).
// NBX: 16-byte loads in flight per thread (0: the default by VEC).
// The code bytes of warm row r's elements [d, d + CE) (CE = 4 or 8, d a multiple of CE): int8 /
// fp8 one byte per element, int4 one nibble (element d + e is nibble e of the chunk, low first).
// One 4- or 8-byte load where the address allows it, else byte loads.
template <int CE>
ATT_HD void load_warm_code(const RowSrc& r, int d, uint32_t (&code)[CE / 4]) {
  static_assert(CE == 4 || CE == 8, "chunks of 4 or 8 elements");
  const bool nibbles = r.kind == 5 || r.kind == 6;
  const uint8_t* p = r.data + (nibbles ? d / 2 : d);
  const int n = nibbles ? CE / 2 : CE;  // bytes
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (n == 8 && a % 8 == 0) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    code[0] = v.x;
    if constexpr (CE / 4 > 1) code[1] = v.y;
  } else if (n == 4 && a % 4 == 0) {
    code[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    for (int b = 0; b < n; ++b) code[b / 4] |= static_cast<uint32_t>(p[b]) << (8 * (b % 4));
  }
}

// Row r's element d as row_elem computes it, except that with UNSCALED the int8 / fp8 rows (kinds 3
// and 4) give their code's value without the row's scale (the caller applies it: FOLD below).
template <bool UNSCALED>
ATT_HD float row_elem_maybe_unscaled(const RowSrc& r, int d) {
  if constexpr (UNSCALED) {
    if (r.kind == 3) return static_cast<float>(reinterpret_cast<const int8_t*>(r.data)[d]);
    if (r.kind == 4) return e4m3_decode(r.data[d]);
  }
  return row_elem(r, d);
}

// The e4m3 values of the low (x) and high (y) bytes of `two` (exact: every e4m3 value is an f16);
// the hardware conversion on sm_89 and later (e4m3_decode's values; a NaN code, which the encoder
// never writes, gives a NaN without its sign), else e4m3_decode's bits.
__device__ __forceinline__ float2 e4m3x2_to_f32(uint16_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(two));
  return make_float2(half_bits_to_f32(static_cast<uint16_t>(h2 & 0xffffu)), half_bits_to_f32(static_cast<uint16_t>(h2 >> 16)));
#else
  return make_float2(e4m3_decode(static_cast<uint8_t>(two & 0xffu)), e4m3_decode(static_cast<uint8_t>(two >> 8)));
#endif
}

// Per-thread cache of the int4 K per-channel scales and zero points of one chunk ([d, d + CE) of
// one group and head): a thread's chunks keep their channels from row to row (for head dims of 32,
// 64, 128 and 256 always), so they are loaded once per group, not once per element.
template <int CE>
struct Int4KCache {
  const uint8_t* key = nullptr;  // r.sc + 2 d of the cached chunk
  uint32_t sw[CE / 2];           // the CE f16 scales, two a word (low first)
  uint32_t zw[CE / 4];           // the CE int8 zero points, four a word
  __device__ __forceinline__ void load(const RowSrc& r, int d) {
    const uint8_t* ps = r.sc + 2 * d;
    if (ps == key) return;
    key = ps;
    const int8_t* pz = r.zr + d;
    if (((reinterpret_cast<uintptr_t>(ps) | reinterpret_cast<uintptr_t>(pz)) & 3u) == 0) {
#pragma unroll
      for (int i = 0; i < CE / 2; ++i) sw[i] = reinterpret_cast<const uint32_t*>(ps)[i];
#pragma unroll
      for (int i = 0; i < CE / 4; ++i) zw[i] = reinterpret_cast<const uint32_t*>(pz)[i];
    } else {
#pragma unroll
      for (int i = 0; i < CE / 2; ++i) sw[i] = static_cast<uint32_t>(ps[4 * i]) | (static_cast<uint32_t>(ps[4 * i + 1]) << 8) |
                                                (static_cast<uint32_t>(ps[4 * i + 2]) << 16) | (static_cast<uint32_t>(ps[4 * i + 3]) << 24);
#pragma unroll
      for (int i = 0; i < CE / 4; ++i) {
        zw[i] = static_cast<uint32_t>(static_cast<uint8_t>(pz[4 * i])) | (static_cast<uint32_t>(static_cast<uint8_t>(pz[4 * i + 1])) << 8) |
                (static_cast<uint32_t>(static_cast<uint8_t>(pz[4 * i + 2])) << 16) |
                (static_cast<uint32_t>(static_cast<uint8_t>(pz[4 * i + 3])) << 24);
      }
    }
  }
  __device__ __forceinline__ float scale(int e) const { return half_bits_to_f32(static_cast<uint16_t>(sw[e / 2] >> (16 * (e % 2)))); }
  __device__ __forceinline__ int zero(int e) const { return static_cast<int>(static_cast<int8_t>(zw[e / 4] >> (8 * (e % 4)))); }
};

// An int4 V chunk's group scale (f16 bits, low half) and zero point (high half), loaded with its
// code (a chunk never straddles a group: groups of 32 channels or of all head_dim).
__device__ __forceinline__ uint32_t load_int4v_aux(const RowSrc& r, int d) {
  const int m = r.gv == 32 ? d >> 5 : 0;  // d / gv: gv is 32 or head_dim (> d)
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(r.sc + 2 * m)) |
         (static_cast<uint32_t>(static_cast<uint8_t>(r.zr[m])) << 16);
}

// Elements [d, d + CE) of warm row r (kind 3..6) from its code bytes (load_warm_code), in registers:
// the row's scale (int8, fp8) once per chunk, int4 V's group scale and zero point once per chunk
// (chunks of 8: loaded with the code, in code[1], which the 4 bytes of nibbles leave free), int4 K's
// per-channel ones through the thread's cache. Each value is row_elem's (same operations, same
// bits), except that with UNSCALED int8 / fp8 rows give their code's value without the row's scale.
template <int CE, bool UNSCALED>
__device__ __forceinline__ void decode_warm_chunk(const RowSrc& r, int d, const uint32_t (&code)[CE / 4], float* f,
                                                  Int4KCache<CE>& kc) {
  const int kind = r.kind;
  if (kind == 3) {
    const float sc = r.scale;
#pragma unroll
    for (int e = 0; e < CE; ++e) {
      const float x = static_cast<float>(static_cast<int8_t>(code[e / 4] >> (8 * (e % 4))));
      f[e] = UNSCALED ? x : sc * x;
    }
  } else if (kind == 4) {
    const float sc = r.scale;
#pragma unroll
    for (int e = 0; e < CE; e += 2) {
      const float2 x = e4m3x2_to_f32(static_cast<uint16_t>(code[e / 4] >> (8 * (e % 4))));
      f[e] = UNSCALED ? x.x : sc * x.x;
      f[e + 1] = UNSCALED ? x.y : sc * x.y;
    }
  } else if (kind == 6) {
    uint32_t aux;
    if constexpr (CE == 8) {
      aux = code[1];
    } else {
      aux = load_int4v_aux(r, d);
    }
    const float sc = half_bits_to_f32(static_cast<uint16_t>(aux & 0xffffu));
    const int z = static_cast<int>(static_cast<int8_t>(aux >> 16));
#pragma unroll
    for (int e = 0; e < CE; ++e) {
      const int nib = static_cast<int>((code[e / 8] >> (4 * (e % 8))) & 0xfu);
      f[e] = sc * static_cast<float>(nib - z);
    }
  } else {  // 5: int4 K
    kc.load(r, d);
#pragma unroll
    for (int e = 0; e < CE; ++e) {
      const int nib = static_cast<int>((code[e / 8] >> (4 * (e % 8))) & 0xfu);
      f[e] = kc.scale(e) * static_cast<float>(nib - kc.zero(e));
    }
  }
}

// The 16 / ES elements of a 16-byte chunk of a hot row (ES = 4: f32; 2: hot_kind 1 f16, else bf16).
template <int ES>
__device__ __forceinline__ void hot_chunk_to_f32(const uint4& raw, int hot_kind, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (ES == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = bits_f32(w[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint16_t lo = static_cast<uint16_t>(w[e] & 0xffffu), hi = static_cast<uint16_t>(w[e] >> 16);
      f[2 * e] = hot_kind == 1 ? half_bits_to_f32(lo) : bf16_bits_to_f32(lo);
      f[2 * e + 1] = hot_kind == 1 ? half_bits_to_f32(hi) : bf16_bits_to_f32(hi);
    }
  }
}

// FOLD (the decode kernel): int8 / fp8 rows are staged without their per-token (int8) or per-block
// (fp8) scale, which the caller applies to the key's score and to the value's softmax weight
// (row_scale below).
template <int VEC, int WQ, int ES, int NBX = 0, bool FOLD = false>
__device__ __forceinline__ void stage_tile(const RowSrc* rs, float* Ks, float* Vs, int hd, int tid, int hot_kind) {
  constexpr int D = VEC * 32, NT = WQ * 32, KS = D + 4;
  if constexpr (ES == 0) {
    constexpr int RC = kKT * D;
    constexpr int PER = 2 * RC / NT;
    constexpr int NB = 8;
#pragma unroll 1
    for (int b0 = 0; b0 < PER; b0 += NB) {
#pragma unroll
      for (int u = 0; u < NB; ++u) {
        if (b0 + u >= PER) break;
        const int c = tid + NT * (b0 + u);
        const int which = c / RC, rem = c % RC, j = rem / D, d = rem % D;
        const RowSrc& r = rs[which * kKT + j];
        const float v = (r.kind >= 0 && d < hd) ? row_elem_maybe_unscaled<FOLD>(r, d) : 0.0f;
        if (which) {
          Vs[j * D + d] = v;
        } else {
          Ks[j * KS + d] = v;
        }
      }
    }
  } else {
    constexpr int CE = 16 / ES;  // elements per 16-byte chunk
    constexpr int CPR = D / CE;  // chunks per row (capacity)
    constexpr int RC = kKT * CPR;
    constexpr int PER = 2 * RC / NT;
    constexpr int NB = NBX > 0 ? NBX : (VEC <= 4 ? 8 : 4);
    static_assert((2 * RC) % NT == 0, "chunks spread evenly over the block");
    static_assert(kKT == 32, "one warp lane per key of the tile");
    // Chunk u of a batch: its row source (index into rs), its first element d and its destination.
    struct Chunk {
      int ri, d;
      float* dst;
    };
    auto chunk = [&](int u) {
      const int c = tid + NT * u;
      const int which = c / RC, rem = c % RC, j = rem / CPR, d = rem % CPR * CE;
      return Chunk{which * kKT + j, d, which ? Vs + j * D + d : Ks + j * KS + d};
    };
    // Which passes the tile needs (the same answer in every warp: each lane looks at its key's two
    // rows). Warm rows are kinds 3..6; hot rows (hot_kind) and keys past the range (-1) are not.
    // The warm pass runs first and writes the chunks of warm rows with d < hd (parking its codes
    // in any chunk's destination); the hot pass then writes every other chunk (hot rows, zeros past
    // the range or past hd).
    const int lane = tid & 31;
    const bool k_warm = rs[lane].kind >= 3, v_warm = rs[kKT + lane].kind >= 3;
    const bool any_warm = __any_sync(0xffffffffu, k_warm || v_warm);
    const bool need_hot = hd < D || !__all_sync(0xffffffffu, k_warm && v_warm);
    if (any_warm) {
      // NB chunks at a time as the hot rows: the chunks' code bytes (CE of int8/fp8, CE / 2 of
      // int4 nibbles) in one aligned load each (byte loads where the address does not allow it),
      // with chunks of 8 int4 V's group scale and zero point (load_int4v_aux, in code[1]), all in
      // flight before any is decoded; each chunk's code parked in its own destination (the
      // thread's own shared memory), so that the decode is one loop body, not NB unrolled copies
      // of it; the decode loop reads chunk u + 1's parked code before it decodes chunk u in
      // registers (decode_warm_chunk) and stores it.
#pragma unroll 1
      for (int b0 = 0; b0 < PER; b0 += NB) {
        uint32_t code[NB][CE / 4];  // the chunk's code bytes, little-endian
#pragma unroll
        for (int u = 0; u < NB; ++u) {
#pragma unroll
          for (int i = 0; i < CE / 4; ++i) code[u][i] = 0u;
          if (b0 + u < PER) {
            const Chunk ch = chunk(b0 + u);
            const RowSrc& r = rs[ch.ri];
            if (r.kind >= 3 && ch.d < hd) {
              load_warm_code<CE>(r, ch.d, code[u]);
              if constexpr (CE == 8) {
                if (r.kind == 6) code[u][1] = load_int4v_aux(r, ch.d);
              }
            }
          }
        }
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          if (b0 + u >= PER) break;
          auto* dst = reinterpret_cast<uint32_t*>(chunk(b0 + u).dst);
#pragma unroll
          for (int i = 0; i < CE / 4; ++i) dst[i] = code[u][i];
        }
        // The parked inputs of chunk u: kind (-1: not a warm chunk), code, int8/fp8 scale.
        struct In {
          int kind;
          uint32_t cw[CE / 4];
          float scale;
        };
        auto fetch = [&](int u) {
          In in;
          const Chunk ch = chunk(b0 + u);
          const RowSrc& r = rs[ch.ri];
          const int kind = r.kind;
          in.kind = b0 + u < PER && ch.d < hd ? kind : -1;
          in.scale = r.scale;
          const auto* src = reinterpret_cast<const uint32_t*>(ch.dst);
#pragma unroll
          for (int i = 0; i < CE / 4; ++i) in.cw[i] = src[i];
          return in;
        };
        Int4KCache<CE> kc;  // (per batch: not live during the loads)
        In cur = fetch(0);
#pragma unroll 1
        for (int u = 0; u < NB; ++u) {
          if (b0 + u >= PER) break;
          In nxt = cur;
          if (u + 1 < NB && b0 + u + 1 < PER) nxt = fetch(u + 1);  // before this chunk's stores
          if (cur.kind >= 3) {
            const Chunk ch = chunk(b0 + u);
            RowSrc r;
            r.kind = cur.kind;
            r.scale = cur.scale;
            if (cur.kind == 5 || (CE == 4 && cur.kind == 6)) {
              r.sc = rs[ch.ri].sc;
              r.zr = rs[ch.ri].zr;
              r.gv = rs[ch.ri].gv;
            }
            float f[CE];
            decode_warm_chunk<CE, FOLD>(r, ch.d, cur.cw, f, kc);
#pragma unroll
            for (int e = 0; e < CE; e += 4) {
              *reinterpret_cast<float4*>(ch.dst + e) = make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
            }
          }
          cur = nxt;
        }
      }
    }
    if (need_hot) {
#pragma unroll 1
      for (int b0 = 0; b0 < PER; b0 += NB) {
        uint4 raw[NB];
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          raw[u] = make_uint4(0u, 0u, 0u, 0u);
          if (b0 + u < PER) {
            const Chunk ch = chunk(b0 + u);
            const RowSrc& r = rs[ch.ri];
            if (r.kind == hot_kind && ch.d < hd) raw[u] = *reinterpret_cast<const uint4*>(r.data + ch.d * ES);
          }
        }
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          if (b0 + u >= PER) break;
          const Chunk ch = chunk(b0 + u);
          const int kind = rs[ch.ri].kind;
          if (kind >= 3 && ch.d < hd) continue;  // the warm pass's
          float f[CE];
          if (kind == hot_kind && ch.d < hd) {
            hot_chunk_to_f32<ES>(raw[u], hot_kind, f);
          } else {
#pragma unroll
            for (int e = 0; e < CE; ++e) f[e] = 0.0f;  // past the range or hd
          }
#pragma unroll
          for (int e = 0; e < CE; e += 4) {
            *reinterpret_cast<float4*>(ch.dst + e) = make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
          }
        }
      }
    }
  }
}

// FOLD's factor of a staged row: the scale of an int8 / fp8 row (staged without it), else 1.
__device__ __forceinline__ float row_scale(const RowSrc& r) { return r.kind == 3 || r.kind == 4 ? r.scale : 1.0f; }

// Number of tiles (kR vectors) of a sequence of n_q rows and of its groups of WQ tiles.
ATT_HD int64_t seq_tiles(int32_t n_q, int32_t group) { return (int64_t{n_q} * group + kR - 1) / kR; }

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One block = one sequence, one kv head, one split of the keys and a group of WQ consecutive query
// tiles (warp w: tile WQ * g + w). The block's key range is the causal range of its last tile (split
// `split` of it); every K/V tile is staged once in shared memory for all WQ warps. Warps whose own
// causal range ends earlier (or that have no tile) keep taking part in the staging and the barriers.
// stage_mode: 0 element-wise, 2 hot 16-bit rows by 16-byte loads, 4 hot f32 rows by 16-byte loads.
template <int VEC, int WQ>
__global__ void __launch_bounds__(WQ * 32, (VEC <= 3 ? 12 : 8) / WQ)
    attention_kernel(const float* __restrict__ q, KvLayerView kv, AttnBatch b, int32_t n_head, int32_t group,
                     float scale, float* __restrict__ out, int32_t nsplit, int64_t group_slots, int32_t stage_mode) {
  using C = Cfg<VEC, WQ>;
  constexpr int D = C::D, KS = C::KS;
  const int hd = kv.head_dim;
  extern __shared__ float4 smem4[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* sm = reinterpret_cast<float*>(smem4);
  RowSrc* rs = reinterpret_cast<RowSrc*>(sm);
  float* Ks = sm + C::RS_FLOATS;                    // [kKT][KS]
  float* Vs = Ks + kKT * KS;                        // [kKT][D]
  float* Qs = Vs + kKT * D + warp * C::WARP_FLOATS;  // [kR][D]
  float* Ps = Qs + kR * D;                          // [kR][kKT]

  const int64_t n_kv = kv.n_kv_heads;
  const int64_t blk = blockIdx.x;
  if (blk >= group_slots * n_kv * nsplit) return;  // block-uniform
  const int64_t gslot = blk % group_slots;
  const int64_t rest = blk / group_slots;
  const int32_t kvh = static_cast<int32_t>(rest % n_kv);
  const int32_t split = static_cast<int32_t>(rest / n_kv);

  // Which sequence holds this tile group: prefix sums of ceil(tiles / WQ) over the sequences (every
  // warp computes the same, no barrier needed).
  int32_t seq;
  int64_t local_group;
  find_seq_slot(
      b.n_seqs, [&](int32_t si) { return (seq_tiles(b.seqs[si].n_q, group) + WQ - 1) / WQ; }, gslot, lane, &seq,
      &local_group);
  if (seq < 0) return;  // block-uniform
  const AttnSeqDev sd = b.seqs[seq];
  const int32_t* table = b.tables + sd.table_offset;
  const int32_t nvec = sd.n_q * group;
  const int64_t nt = seq_tiles(sd.n_q, group);
  const int64_t ngr = (nt + WQ - 1) / WQ;
  const int32_t t0 = static_cast<int32_t>((ngr - 1 - local_group) * WQ);  // longest key ranges first
  const int32_t tiles_here = nt - t0 < WQ ? static_cast<int32_t>(nt - t0) : WQ;
  const int32_t vlast = (nvec < (t0 + tiles_here) * kR ? nvec : (t0 + tiles_here) * kR) - 1;
  const int32_t kend = sd.start_pos + vlast / group + 1;  // the block's causal key range

  const int32_t v0 = (t0 + warp) * kR;
  const int rcount = warp < tiles_here ? (nvec - v0 < kR ? nvec - v0 : kR) : 0;

  // Query vector r of the warp's tile: row v / group (token q_begin + that), head kvh * group + v %
  // group, causal limit: keys < start_pos + row + 1 (0 for vectors past the sequence's end).
  auto vec_out = [&](int r) {
    const int32_t v = v0 + r;
    return (int64_t{sd.q_begin} + v / group) * n_head + kvh * group + v % group;
  };
  int32_t lim[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) lim[r] = r < rcount ? sd.start_pos + (v0 + r) / group + 1 : 0;
  const int32_t kend_w = rcount > 0 ? sd.start_pos + (v0 + rcount - 1) / group + 1 : 0;
  int32_t chunk = (kend + nsplit - 1) / nsplit;
  chunk = (chunk + kKT - 1) / kKT * kKT;
  const int32_t kb = split * chunk;
  const int32_t ke = kend < kb + chunk ? kend : kb + chunk;

#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int d = lane + 32 * i;
      Qs[r * D + d] = r < rcount && d < hd ? q[vec_out(r) * hd + d] : 0.0f;
    }
  }

  float m[kR], l[kR], acc[kR][VEC];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[r][i] = 0.0f;
  }

  const int32_t bs = kv.block_size;
  const int hot_kind = kv.dtype == KvDtype::kF32 ? 0 : (kv.dtype == KvDtype::kF16 ? 1 : 2);
  const int hd4 = (hd + 3) & ~3;
  if (warp == 0 && kb < ke) {
    const int32_t key = kb + lane;
    set_rowsrc(kv, rs, lane, key, ke, key < ke ? table[key / bs] : 0, kvh);
  }
  for (int32_t k0 = kb; k0 < ke; k0 += kKT) {
    const int nk = ke - k0 < kKT ? ke - k0 : kKT;
    __syncthreads();  // row sources of this tile written; the previous tile's K/V no longer read
    if (stage_mode == 2) {
      stage_tile<VEC, WQ, 2>(rs, Ks, Vs, hd, tid, hot_kind);
    } else if (stage_mode == 4) {
      stage_tile<VEC, WQ, 4>(rs, Ks, Vs, hd, tid, hot_kind);
    } else {
      stage_tile<VEC, WQ, 0>(rs, Ks, Vs, hd, tid, hot_kind);
    }
    __syncthreads();  // K/V tile ready; row sources free
    // Prefetch the next tile's table entries (used after this tile's math).
    const int32_t kn = k0 + kKT;
    int32_t nid = 0;
    if (warp == 0 && kn + lane < ke) nid = table[(kn + lane) / bs];

    if (k0 < kend_w) {  // warp-uniform
      // Scores: lane = key.
      float s[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) s[r] = 0.0f;
      if (lane < nk) {
        const float* kr = Ks + lane * KS;
#pragma unroll 1
        for (int d = 0; d < hd4; d += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(kr + d);
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            const float4 qq = *reinterpret_cast<const float4*>(Qs + r * D + d);
            s[r] = fmaf(qq.x, k4.x, s[r]);
            s[r] = fmaf(qq.y, k4.y, s[r]);
            s[r] = fmaf(qq.z, k4.z, s[r]);
            s[r] = fmaf(qq.w, k4.w, s[r]);
          }
        }
      }
      const int32_t key = k0 + lane;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float sc = (lane < nk && key < lim[r]) ? s[r] * scale : -INFINITY;
        const float m_new = fmaxf(m[r], warp_max(sc));
        float p = 0.0f, corr = 1.0f;
        if (m_new != -INFINITY) {
          p = expf(sc - m_new);
          corr = expf(m[r] - m_new);
        }
        m[r] = m_new;
        l[r] = l[r] * corr + p;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[r][i] *= corr;
        Ps[r * kKT + lane] = p;
      }
      __syncwarp();

      // acc += P . V (lane = channels lane + 32 i; V rows past nk are zeros, their p is 0).
#pragma unroll 1
      for (int j0 = 0; j0 < nk; j0 += 4) {
        float vals[4][VEC];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) vals[u][i] = Vs[(j0 + u) * D + lane + 32 * i];
        }
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const float4 p4 = *reinterpret_cast<const float4*>(Ps + r * kKT + j0);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            float a = acc[r][i];
            a = fmaf(p4.x, vals[0][i], a);
            a = fmaf(p4.y, vals[1][i], a);
            a = fmaf(p4.z, vals[2][i], a);
            a = fmaf(p4.w, vals[3][i], a);
            acc[r][i] = a;
          }
        }
      }
    }
    if (warp == 0 && kn < ke) set_rowsrc(kv, rs, lane, kn + lane, ke, nid, kvh);
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float L = warp_sum(l[r]);
    if (r >= rcount) continue;
    const int64_t row = vec_out(r);
    if (b.imp_ml != nullptr && lane == 0) {  // importance asked: this split's (max, sum) of the row
      b.imp_ml[(row * nsplit + split) * 2] = m[r];
      b.imp_ml[(row * nsplit + split) * 2 + 1] = L;
    }
    if (nsplit == 1) {
      const float inv = 1.0f / L;
      float* o = out + row * hd;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) o[lane + 32 * i] = acc[r][i] * inv;
      }
    } else {
      float* part = b.scratch + (row * nsplit + split) * (hd + 2);
      if (lane == 0) {
        part[0] = m[r];
        part[1] = L;
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) part[2 + lane + 32 * i] = acc[r][i];
      }
    }
  }
}

// The 8-bit form of a warp's output row (acc[i] * inv at lane + 32 i, the values it stored in out)
// for the O projection's GEMV (kernels.h GemvXq): row `row` of hd values is at row * hd of the
// [tokens][n_head * hd] output, so with hd % 32 == 0 (the launcher passes xq only then) each i is
// one group of 32 (xq.cuh), the bytes quantize_xq_kernel would write. xq null: nothing.
template <int VEC>
__device__ __forceinline__ void store_xq_row(const float (&acc)[VEC], float inv, int64_t row, int32_t hd, int lane,
                                             int8_t* __restrict__ xq, float2* __restrict__ xds) {
  if (xq == nullptr) return;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (32 * i < hd) {
      const int64_t e = row * hd + 32 * i;
      xq_store_warp(acc[i] * inv, lane, xq + e, xds + e / 16);
    }
  }
}

// Merges the nsplit partials ({m, l, acc[hd]}, stride hd + 2) of each (token, head) row: one warp
// per row; partials with m = -INF (splits that got no keys) are skipped.
template <int VEC>
__global__ void __launch_bounds__(128) attention_combine_kernel(const float* __restrict__ scratch, int64_t rows,
                                                                int32_t nsplit, int32_t hd, float* __restrict__ out,
                                                                int8_t* __restrict__ xq, float2* __restrict__ xds,
                                                                int early) {
  if (early != 0) pdl_trigger();  // decode: as attention_decode_hot_kernel's trigger at its top
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  if (row >= rows) return;
  const int64_t stride = hd + 2;
  const float* part = scratch + row * nsplit * stride;
  // The partials are loaded kB splits at a time, all before any is used (a split past nsplit reads
  // split s0 again and is skipped), so a batch costs one round trip, not two per split; the first
  // batch is in flight while the warp finds M. The merge's arithmetic and order are unchanged.
  constexpr int kB = 4;
  float ms[kB], ls[kB], pv[kB][VEC];
  auto load = [&](int s0) {
#pragma unroll
    for (int k = 0; k < kB; ++k) {
      const float* p = part + (s0 + k < nsplit ? s0 + k : s0) * stride;
      ms[k] = __ldca(p);
      ls[k] = __ldca(p + 1);
#pragma unroll
      for (int i = 0; i < VEC; ++i) pv[k][i] = lane + 32 * i < hd ? __ldca(p + 2 + lane + 32 * i) : 0.0f;
    }
  };
  load(0);
  float M = -INFINITY;
  for (int s = lane; s < nsplit; s += 32) M = fmaxf(M, __ldca(part + s * stride));
  M = warp_max(M);
  float acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
  float L = 0.0f;
  for (int s0 = 0; s0 < nsplit; s0 += kB) {
    if (s0 > 0) load(s0);
#pragma unroll
    for (int k = 0; k < kB; ++k) {
      if (s0 + k >= nsplit || ms[k] == -INFINITY) continue;
      const float w = expf(ms[k] - M);
      L += w * ls[k];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) acc[i] += w * pv[k][i];
      }
    }
  }
  const float inv = 1.0f / L;
  float* o = out + row * hd;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (lane + 32 * i < hd) o[lane + 32 * i] = acc[i] * inv;
  }
  store_xq_row<VEC>(acc, inv, row, hd, lane, xq, xds);
}

// --- decode (every sequence of the batch has n_q <= 1) --------------------------------------------
//
// One block per (split, kv head, sequence, tile of R of the kv head's group vectors), no sequence
// search (block index -> sequence directly). The block's nw warps (1..4, runtime) take the split's
// key tiles round-robin (warp w: tiles w, w + nw, ...), each staging its own tiles in its own shared
// memory (row sources, K, V, P) with warp barriers only; one block barrier after the Q load and one
// before the warps' partials (m, l, acc) are merged by warp 0, which writes out[] (nsplit == 1) or
// the split's partial (merged by attention_combine_kernel).
template <int VEC, int R>
struct DecCfg {
  static constexpr int D = VEC * 32;
  static constexpr int KS = D + 4;
  static constexpr int RS_FLOATS = static_cast<int>(2 * kKT * sizeof(RowSrc) / sizeof(float));
  static constexpr int WARP_FLOATS = RS_FLOATS + kKT * KS + kKT * D + R * kKT;  // rs, Ks, Vs, Ps
  static constexpr int Q_FLOATS = R * D;
  static_assert(2 * R + R * D <= kKT * KS, "merge area fits the K tile");
  static_assert(WARP_FLOATS % 4 == 0 && Q_FLOATS % 4 == 0, "16-byte aligned areas");
};

constexpr int kDecMaxWarps = 4;
ATT_HD int dec_max_warps(int vec) { return vec <= 4 ? kDecMaxWarps : 2; }

// What the fused decode kernel (rope_kv_store_attention) reads besides the unfused kernel's inputs.
struct DecFuse {
  const float* k = nullptr;        // [n_tokens][n_kv * head_dim] new keys before RoPE
  const float* v = nullptr;        // [n_tokens][n_kv * head_dim] new values
  const int32_t* pos = nullptr;    // [n_tokens] positions
  const int32_t* slots = nullptr;  // [n_tokens] KV slots (block * block_size + offset; < 0: not stored)
  RopeArgs rope{};
};

// The value a K or V element has once stored in the hot arena and read back (store_kv_elem, then
// stage_tile's conversion).
__device__ __forceinline__ float as_stored(KvDtype t, float x) {
  if (t == KvDtype::kF16) return half_bits_to_f32(f32_to_half_bits(x));
  if (t == KvDtype::kBF16) return bf16_bits_to_f32(f32_to_bf16_bits(x));
  return x;
}

// kFused: RoPE and the KV store of the step's new token happen here (DecFuse: q, k, v are the raw
// QKV projections, the new token of a sequence is its q row q_begin, at position pos[q_begin] and
// KV slot slots[q_begin]); the kernel rotates its own query vectors and the new key exactly as
// rope_kv_store_kernel does, rounds the new K/V row to the arena's element type, and the block of
// the last split and first vector tile of each (sequence, kv head) stores it. Everything else the
// block reads (descriptors, block tables, the keys and values of earlier steps) is written before
// the previous kernel (the QKV projection) started, so the block looks up its first tile's rows and
// stages them BEFORE the PDL wait, overlapped with that projection; the row of the new key, which
// memory may not hold yet, is replaced in shared memory by the value computed here (the same bits
// the arena gets). Results: bit-identical to rope_kv_store() followed by the unfused kernel.
template <int VEC, int R, bool kFused>
__global__ void __launch_bounds__(kDecMaxWarps * 32, 1)
    attention_decode_kernel(const float* __restrict__ q, KvLayerView kv, AttnBatch b, int32_t n_head, int32_t group,
                            float scale, float* __restrict__ out, int32_t nsplit, int32_t tps, int32_t stage_mode,
                            DecFuse f) {
  if constexpr (!kFused) {
    pdl_wait();  // q is the previous kernel's output
    pdl_trigger();
  }
  using C = DecCfg<VEC, R>;
  constexpr int D = C::D, KS = C::KS;
  const int hd = kv.head_dim;
  extern __shared__ float4 smem4[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
  float* Qs = reinterpret_cast<float*>(smem4);  // [R][D]
  float* wb = Qs + C::Q_FLOATS + warp * C::WARP_FLOATS;
  RowSrc* rs = reinterpret_cast<RowSrc*>(wb);
  float* Ks = wb + C::RS_FLOATS;  // [kKT][KS]
  float* Vs = Ks + kKT * KS;      // [kKT][D]
  float* Ps = Vs + kKT * D;       // [R][kKT]

  int64_t blk = blockIdx.x;
  const int32_t t = static_cast<int32_t>(blk % tps);
  blk /= tps;
  const int32_t seq = static_cast<int32_t>(blk % b.n_seqs);
  blk /= b.n_seqs;
  const int32_t kvh = static_cast<int32_t>(blk % kv.n_kv_heads);
  const int32_t split = static_cast<int32_t>(blk / kv.n_kv_heads);
  const AttnSeqDev sd = b.seqs[seq];
  if (sd.n_q <= 0) {  // block-uniform
    if constexpr (kFused) pdl_wait();  // (launch.cuh: every block waits before it exits)
    return;
  }
  const int32_t v0 = t * R;
  const int rcount = group - v0 < R ? group - v0 : R;
  const int64_t row0 = int64_t{sd.q_begin} * n_head + int64_t{kvh} * group + v0;  // vector r: row0 + r
  const int32_t kend = sd.start_pos + 1;  // causal range of the one query row
  int32_t chunk = (kend + nsplit - 1) / nsplit;
  chunk = (chunk + kKT - 1) / kKT * kKT;
  const int32_t kb = split * chunk;
  const int32_t ke = kend < kb + chunk ? kend : kb + chunk;
  const int32_t* table = b.tables + sd.table_offset;
  const int32_t bs = kv.block_size;

  const int hot_kind = kv.dtype == KvDtype::kF32 ? 0 : (kv.dtype == KvDtype::kF16 ? 1 : 2);
  constexpr int NBX = VEC <= 4 ? 16 : 8;
  auto stage = [&] {
    if (stage_mode == 2) {
      stage_tile<VEC, 1, 2, NBX, true>(rs, Ks, Vs, hd, lane, hot_kind);
    } else if (stage_mode == 4) {
      stage_tile<VEC, 1, 4, NBX, true>(rs, Ks, Vs, hd, lane, hot_kind);
    } else {
      stage_tile<VEC, 1, 0, 0, true>(rs, Ks, Vs, hd, lane, hot_kind);
    }
  };
  int32_t k0 = kb + warp * kKT;
  bool prestaged = false;
  float* nkey = Qs + C::Q_FLOATS + nw * C::WARP_FLOATS;  // kFused: the new K and V rows [D] each
  float* nval = nkey + D;
  if constexpr (kFused) {
    double* cs = reinterpret_cast<double*>(nval + D);  // [D / 2] each
    double* sn = cs + D / 2;
    if (k0 < ke) {
      const int32_t key = k0 + lane;
      set_rowsrc(kv, rs, lane, key, ke, key < ke ? table[key / bs] : 0, kvh);
      __syncwarp();
      stage();
      prestaged = true;
    }
    const int32_t half = f.rope.n_rot / 2;
    const int32_t pos = f.pos[sd.q_begin];
    for (int32_t i = tid; i < half; i += nw * 32) rope_angle(f.rope, pos, i, &cs[i], &sn[i]);
    pdl_wait();  // q, k, v are the previous kernel's output
    pdl_trigger();
    const int64_t krow = (int64_t{sd.q_begin} * kv.n_kv_heads + kvh) * hd;
    for (int i = tid; i < R * D; i += nw * 32) {
      const int r = i / D, d = i % D;
      Qs[i] = r < rcount && d < hd ? q[(row0 + r) * hd + d] : 0.0f;
    }
    for (int d = tid; d < D; d += nw * 32) {
      nkey[d] = d < hd ? f.k[krow + d] : 0.0f;
      nval[d] = d < hd ? f.v[krow + d] : 0.0f;
    }
    __syncthreads();
    for (int32_t w = tid; w < (rcount + 1) * half; w += nw * 32) {  // rows 0..rcount-1: q; rcount: the key
      const int32_t r = w / half, i = w % half;
      rope_rotate(r < rcount ? Qs + r * D : nkey, i, half, f.rope.neox, cs[i], sn[i]);
    }
    __syncthreads();
    const int32_t slot = f.slots[sd.q_begin];
    const bool writer = split == nsplit - 1 && t == 0 && slot >= 0;
    for (int d = tid; d < hd; d += nw * 32) {
      if (writer) store_kv_elem(kv, (int64_t{slot} * kv.n_kv_heads + kvh) * hd + d, nkey[d], nval[d]);
      nkey[d] = as_stored(kv.dtype, nkey[d]);
      nval[d] = as_stored(kv.dtype, nval[d]);
    }
    __syncthreads();  // Qs and the new row ready
  } else {
    for (int i = tid; i < R * D; i += nw * 32) {
      const int r = i / D, d = i % D;
      Qs[i] = r < rcount && d < hd ? q[(row0 + r) * hd + d] : 0.0f;
    }
    if (k0 < ke) {
      const int32_t key = k0 + lane;
      set_rowsrc(kv, rs, lane, key, ke, key < ke ? table[key / bs] : 0, kvh);
    }
    __syncthreads();  // Qs ready
  }

  float m[R], l[R], acc[R][VEC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[r][i] = 0.0f;
  }
  const int hd4 = (hd + 3) & ~3;
  const int32_t stride = nw * kKT;
  for (; k0 < ke; k0 += stride) {
    const int nk = ke - k0 < kKT ? ke - k0 : kKT;
    if (!prestaged) {
      __syncwarp();  // row sources written; the previous tile's K/V/P no longer read
      stage();
    }
    prestaged = false;
    if constexpr (kFused) {
      const int32_t j = kend - 1 - k0;  // the new key's row in this tile, if there
      if (j >= 0 && j < nk) {
        __syncwarp();
        for (int d = lane; d < D; d += 32) {
          Ks[j * KS + d] = d < hd ? nkey[d] : 0.0f;
          Vs[j * D + d] = d < hd ? nval[d] : 0.0f;
        }
      }
    }
    __syncwarp();  // K/V tile ready (the row sources are read again for their scales, then replaced)
    const int32_t kn = k0 + stride;
    const int32_t nid = kn + lane < ke ? table[(kn + lane) / bs] : 0;  // next tile's entries

    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = 0.0f;
    if (lane < nk) {
      const float* kr = Ks + lane * KS;
#pragma unroll 1
      for (int d = 0; d < hd4; d += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(kr + d);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float4 qq = *reinterpret_cast<const float4*>(Qs + r * D + d);
          s[r] = fmaf(qq.x, k4.x, s[r]);
          s[r] = fmaf(qq.y, k4.y, s[r]);
          s[r] = fmaf(qq.z, k4.z, s[r]);
          s[r] = fmaf(qq.w, k4.w, s[r]);
        }
      }
    }
    // The staged K/V rows of int8 / fp8 keys lack their scale (stage_tile's FOLD): the key's
    // score and the value's softmax weight take it (the row sources are still this tile's).
    const float kf = row_scale(rs[lane]), vf = row_scale(rs[kKT + lane]);
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] *= kf;
    if (b.imp_scores != nullptr && lane < nk) {  // importance asked: the scores, for importance_decode_mass
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < rcount) b.imp_scores[(row0 + r) * b.imp_stride + k0 + lane] = s[r] * scale;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float sc = lane < nk ? s[r] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(sc));
      float p = 0.0f, corr = 1.0f;
      if (m_new != -INFINITY) {
        p = expf(sc - m_new);
        corr = expf(m[r] - m_new);
      }
      m[r] = m_new;
      l[r] = l[r] * corr + p;
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[r][i] *= corr;
      Ps[r * kKT + lane] = p * vf;
    }
    __syncwarp();

#pragma unroll 1
    for (int j0 = 0; j0 < nk; j0 += 4) {
      float vals[4][VEC];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) vals[u][i] = Vs[(j0 + u) * D + lane + 32 * i];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 p4 = *reinterpret_cast<const float4*>(Ps + r * kKT + j0);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float a = acc[r][i];
          a = fmaf(p4.x, vals[0][i], a);
          a = fmaf(p4.y, vals[1][i], a);
          a = fmaf(p4.z, vals[2][i], a);
          a = fmaf(p4.w, vals[3][i], a);
          acc[r][i] = a;
        }
      }
    }
    if (kn < ke) set_rowsrc(kv, rs, lane, kn + lane, ke, nid, kvh);
  }

  float L[R];
#pragma unroll
  for (int r = 0; r < R; ++r) L[r] = warp_sum(l[r]);
  if (nw > 1) {  // block-uniform
    // Each warp's (m, L, acc) to its K tile area (merge area: m[R], L[R], acc[R][D]); warp 0 merges.
    __syncwarp();
    float* mg = Ks;
    if (warp > 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (lane == 0) {
          mg[r] = m[r];
          mg[R + r] = L[r];
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) mg[2 * R + r * D + lane + 32 * i] = acc[r][i];
      }
    }
    __syncthreads();
    if (warp > 0) return;
    for (int w = 1; w < nw; ++w) {
      const float* o = Qs + C::Q_FLOATS + w * C::WARP_FLOATS + C::RS_FLOATS;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float mo = o[r];
        if (mo == -INFINITY) continue;  // that warp got no keys
        const float M = fmaxf(m[r], mo);
        const float a = expf(m[r] - M), c = expf(mo - M);
        m[r] = M;
        L[r] = L[r] * a + o[R + r] * c;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[r][i] = acc[r][i] * a + o[2 * R + r * D + lane + 32 * i] * c;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rcount) break;
    const int64_t row = row0 + r;
    if (b.imp_ml != nullptr && lane == 0) {
      b.imp_ml[(row * nsplit + split) * 2] = m[r];
      b.imp_ml[(row * nsplit + split) * 2 + 1] = L[r];
    }
    if (nsplit == 1) {
      const float inv = 1.0f / L[r];
      float* o = out + row * hd;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) o[lane + 32 * i] = acc[r][i] * inv;
      }
    } else {
      float* part = b.scratch + (row * nsplit + split) * (hd + 2);
      if (lane == 0) {
        part[0] = m[r];
        part[1] = L[r];
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) part[2 + lane + 32 * i] = acc[r][i];
      }
    }
  }
}

// Splits of the context per query tile (flash-decoding): enough warps for ~4 per SM of an H200
// (132 SMs) when the batch alone does not give them, each split at least one tile (kKT keys).
// n_tokens * n_head / kR is a lower bound of the batch's tiles (over all kv heads), whatever the GQA
// group; max_ctx may be an upper bound of the batch's contexts (it only sizes the split count).
inline int32_t choose_splits(int32_t n_tokens, int32_t n_head, int32_t max_ctx) {
  const int64_t base = std::max<int64_t>(1, int64_t{n_tokens} * n_head / kR);
  const int64_t target = 132 * 4;
  int64_t s = (target + base - 1) / base;
  s = std::min<int64_t>(s, std::max<int32_t>(1, max_ctx / kKT));
  s = std::min<int64_t>(s, 128);
  return static_cast<int32_t>(std::max<int64_t>(s, 1));
}

// Decode: warps per block (enough for the longest context's tiles, up to dec_max_warps) and splits
// (blocks per split >= n_tokens * n_head / kR; ~2 blocks per SM of an H200 when the batch alone does
// not give them, each split at least nw tiles; 1 for contexts up to 2 nw tiles). max_ctx may be an
// upper bound of the batch's contexts.
inline int dec_warps(int32_t max_ctx, int32_t head_dim) {
  const int64_t tiles = (int64_t{max_ctx} + kKT - 1) / kKT;
  return static_cast<int>(std::clamp<int64_t>(tiles, 1, dec_max_warps((head_dim + 31) / 32)));
}
inline int32_t dec_splits(int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t max_ctx) {
  const int64_t base = std::max<int64_t>(1, int64_t{n_tokens} * n_head / kR);
  int64_t s = std::max<int64_t>(1, 264 / base);
  s = std::min<int64_t>(s, std::max<int64_t>(1, max_ctx / (int64_t{kKT} * dec_warps(max_ctx, head_dim))));
  s = std::min<int64_t>(s, 128);
  return static_cast<int32_t>(s);
}

// The context the decode plan is made for (AttnBatch::plan_ctx).
inline int32_t plan_ctx(const AttnBatch& b) { return b.plan_ctx > 0 ? std::min(b.plan_ctx, b.max_ctx) : b.max_ctx; }

// Query tiles per block: 4 (K/V tiles shared by 4 warps) when some sequence has >= 4 tiles
// (prefill), else 1 (decode: one warp per block, parallelism from the splits).
inline int choose_wq(int32_t max_n_q, int32_t group) { return seq_tiles(max_n_q, group) >= 4 ? 4 : 1; }

// Staging mode: 16-byte loads of hot rows when every hot row is 16-byte aligned.
inline int32_t choose_stage_mode(const KvLayerView& kv) {
  const int es = kv.dtype == KvDtype::kF32 ? 4 : 2;
  const int ce = 16 / es;
  const bool aligned = (reinterpret_cast<uintptr_t>(kv.k) | reinterpret_cast<uintptr_t>(kv.v)) % 16 == 0;
  return kv.head_dim % ce == 0 && aligned ? es : 0;
}

// Upper bound of the tile groups (blocks per kv head and split) of a batch.
inline int64_t group_slots_bound(const AttnBatch& b, int32_t group, int wq) {
  const int64_t tiles = (int64_t{b.n_tokens} * group + kR - 1) / kR + b.n_seqs;
  return (tiles + wq - 1) / wq + b.n_seqs;
}

// Merges the partials of every (token, head) row of the batch into out. early: the next kernel may
// launch at once (the latency decode kernel's merge: H100, llama-1b, GPU per step at depth 1,024 /
// 3,072: F16 -1.8% / -2.1%, Q4_K -0.5% / -2.3%).
template <int VEC>
void launch_combine(const AttnBatch& b, int32_t n_head, int32_t hd, int32_t nsplit, float* out, cudaStream_t s,
                    int8_t* xq = nullptr, float2* xds = nullptr, bool early = false) {
  const int64_t rows = int64_t{b.n_tokens} * n_head;
  const int64_t cblocks = (rows * 32 + 127) / 128;
  launch_pdl(attention_combine_kernel<VEC>, dim3(static_cast<unsigned>(cblocks)), dim3(128), 0, s, b.scratch, rows, nsplit,
             hd, out, xq, xds, early ? 1 : 0);
}

template <int VEC, int WQ>
void launch_wq(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
               cudaStream_t s) {
  const int32_t group = n_head / kv.n_kv_heads;
  const int32_t nsplit = choose_splits(b.n_tokens, n_head, b.max_ctx);
  const int64_t group_slots = group_slots_bound(b, group, WQ);
  const int64_t blocks = group_slots * kv.n_kv_heads * nsplit;
  const size_t smem = static_cast<size_t>(Cfg<VEC, WQ>::FLOATS) * sizeof(float);
  static bool configured = false;  // one flag per instantiation; launchers run on the engine thread only
  if (!configured) {
    STRATA_CUDA(cudaFuncSetAttribute(attention_kernel<VEC, WQ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    configured = true;
  }
  attention_kernel<VEC, WQ><<<static_cast<unsigned>(blocks), WQ * 32, smem, s>>>(
      q, kv, b, n_head, group, scale, out, nsplit, group_slots, choose_stage_mode(kv));
  STRATA_CUDA_LAUNCH_CHECK();
  if (nsplit > 1) launch_combine<VEC>(b, n_head, kv.head_dim, nsplit, out, s);
}

// --- decode over hot rows only: a kernel made for latency ----------------------------------------
//
// attention_decode_kernel gives each warp R query vectors and its own key tiles, staged by that
// warp alone: at short contexts a block is one warp running ~3,400 dependent instructions (Nsight
// Compute, llama-1b: 8 blocks of 1 warp, ~4.9 cycles per instruction, ~8.5 us), while the rest of
// the GPU idles. When the layer has no warm tier (every row a hot f32/f16/bf16 row, read by 16-byte
// loads) and the batch is small (hot_decode_eligible), this kernel takes the decode batch instead:
//   block = (split, kv head, sequence); warps = G x KW (G = the GQA group: warp w attends for query
//   head w % G of the kv head; KW warps per head split the block's key tiles, w / G);
//   every thread of the block stages the keys' K and V rows (f32, shared memory) for all heads at
//   once, up to kHotSpanTiles tiles per round (the first round before the PDL wait, overlapped
//   with the QKV projection; a split longer than a round takes its keys in several);
//   each warp: its query row (and, kFused, the new key's K and V rows) loaded by its own lanes into
//   its own shared-memory slot; scores lane-per-key, online softmax, P.V lane-per-channel, over its
//   tiles; the KW partials of a head merged in shared memory; out[] (one split) or the split's
//   partial (merged by attention_combine_kernel).
// kFused: RoPE of q and the new key and the KV store, as attention_decode_kernel does (the same
// rope_rotate, the same stored bits), so the fused and unfused launches give identical results.
// Each warp rotates its own copies (angles computed in registers before the PDL wait), so that
// between the wait and the merge no step needs the whole block: one round trip for q, k and v, and
// one block-wide barrier, before the merge. (It had eight steps separated by barriers or round trips:
// docs/PERFORMANCE.md, "one step as a timeline of PDL waits".) The new key's row in the tiles is
// read from the warp's slot, not from the staged rows (memory may not hold it yet).
// Importance (AttnBatch::imp_scores / imp_ml): the same scaled scores and per-split (max, sum) as
// attention_decode_kernel writes.
constexpr int kHotSpanTiles = 4;   // key tiles per round (head_dim <= 128; 2 above)
constexpr int kHotMaxWarps = 16;   // G x KW

ATT_HD int hot_span_tiles(int vec) { return vec <= 4 ? kHotSpanTiles : 2; }
// A warp's slot (floats): q [D], then the new key's K [D] and V [D] (kFused), 4 to keep 16-byte
// alignment; after the warp's tiles, its partial (max, sum, P.V [D]) from offset D.
ATT_HD constexpr int64_t hot_warp_floats(int vec) { return int64_t{3} * vec * 32 + 4; }

// Shared memory (floats) of a block: Ks [span][KS], Vs [span][D], slots [warps][hot_warp_floats],
// Ps [warps][32]; ids [span] ints.
ATT_HD int64_t hot_smem_floats(int vec, int32_t warps) {
  const int64_t D = vec * 32, span = int64_t{hot_span_tiles(vec)} * kKT;
  return span * (D + 4) + span * D + warps * hot_warp_floats(vec) + warps * 32 + span;
}

template <int VEC, int KIND, bool kFused>
__global__ void __launch_bounds__(kHotMaxWarps * 32)
    attention_decode_hot_kernel(const float* __restrict__ q, KvLayerView kv, AttnBatch b, int32_t n_head, int32_t G,
                                int32_t KW, float scale, float* __restrict__ out, int32_t nsplit, DecFuse f,
                                int8_t* __restrict__ xq, float2* __restrict__ xds) {
  constexpr int D = VEC * 32, KS = D + 4;
  constexpr int ES = KIND == 0 ? 4 : 2;
  constexpr int CE = 16 / ES;  // elements per 16-byte load
  constexpr int span = (VEC <= 4 ? kHotSpanTiles : 2) * kKT;
  constexpr int WF = static_cast<int>(hot_warp_floats(VEC));
  constexpr int kRotT = (VEC + 1) / 2;  // rotation pairs per lane: n_rot / 2 <= D / 2
  // The kernel after this one (the O projection, or the split merge) may launch at once and load
  // its weights while this one runs; it waits for this kernel's end before it reads out. (H100,
  // llama-1b, GPU per step: F16 977.2 -> 960.0 us, Q4_K 618.3 -> 615.7; on the H200 in 2026-12-03's
  // call 5: F16 +1.5%, Q4_K -0.9%, with the kernels of then.)
  pdl_trigger();
  if constexpr (!kFused) pdl_wait();  // q, and the new token's K/V row in the arena, are earlier kernels' output
  const int hd = kv.head_dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nt = blockDim.x;
  const int nw = nt >> 5;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);
  float* Vs = Ks + span * KS;
  float* slots = Vs + span * D;
  float* Ps = slots + nw * WF;
  int32_t* ids = reinterpret_cast<int32_t*>(Ps + nw * 32);
  float* qw = slots + warp * WF;  // this warp's q, new K, new V
  float* knew = qw + D;
  float* vnew = knew + D;

  int64_t blk = blockIdx.x;
  const int32_t seq = static_cast<int32_t>(blk % b.n_seqs);
  blk /= b.n_seqs;
  const int32_t kvh = static_cast<int32_t>(blk % kv.n_kv_heads);
  const int32_t split = static_cast<int32_t>(blk / kv.n_kv_heads);
  const AttnSeqDev sd = b.seqs[seq];
  if (sd.n_q <= 0) {  // block-uniform
    if constexpr (kFused) pdl_wait();  // (launch.cuh: every block waits before it exits)
    return;
  }
  const int32_t kend = sd.start_pos + 1;
  int32_t chunk = (kend + nsplit - 1) / nsplit;
  chunk = (chunk + kKT - 1) / kKT * kKT;
  const int32_t kb = split * chunk;
  const int32_t ke = kend < kb + chunk ? kend : kb + chunk;
  const int32_t* table = b.tables + sd.table_offset;
  const int32_t bs = kv.block_size;
  const int64_t row0 = int64_t{sd.q_begin} * n_head + int64_t{kvh} * G;  // query head g: row0 + g
  const int g = warp % G, kw = warp / G;
  // kFused: the new key (kend - 1) falls in this block's keys (one split of the sequence's): every
  // warp of the block loads it (from L2, with its q), rotates it and reads it from its slot; warp 0
  // stores it.
  const bool has_new = kFused && kend - 1 >= kb && kend - 1 < ke;

  // Keys [r0, r1) to Ks / Vs (f32), in whole tiles (rows past r1 and elements past hd: zeros).
  // Chunk c: 16 bytes of row c / cpr, K and V, 2 NB loads in flight per thread.
  constexpr int cpr = D / CE;  // 16-byte chunks per row (capacity)
  auto stage = [&](int32_t r0, int32_t r1) {
    const int rows = (r1 - r0 + kKT - 1) / kKT * kKT;
    for (int j = tid; j < rows; j += nt) ids[j] = r0 + j < r1 ? table[(r0 + j) / bs] : -1;
    __syncthreads();
    const int total = rows * cpr;
    constexpr int NB = 4;
    for (int c0 = tid; c0 < total; c0 += NB * nt) {
      uint4 raw[2 * NB];
#pragma unroll
      for (int u = 0; u < NB; ++u) {
        const int c = c0 + u * nt;
        const int j = c / cpr, d = c % cpr * CE;
        raw[2 * u] = raw[2 * u + 1] = make_uint4(0u, 0u, 0u, 0u);
        if (c < total && ids[j] >= 0 && d < hd) {
          raw[2 * u] = *reinterpret_cast<const uint4*>(hot_row(kv, false, ids[j], (r0 + j) % bs, kvh, ES) + d * ES);
          raw[2 * u + 1] = *reinterpret_cast<const uint4*>(hot_row(kv, true, ids[j], (r0 + j) % bs, kvh, ES) + d * ES);
        }
      }
#pragma unroll
      for (int x = 0; x < 2 * NB; ++x) {
        const int u = x / 2, which = x % 2;
        const int c = c0 + u * nt;
        if (c >= total) break;
        const int j = c / cpr, d = c % cpr * CE;
        float fv[CE];
        hot_chunk_to_f32<ES>(raw[x], KIND, fv);
        float* dst = which ? Vs + j * D + d : Ks + j * KS + d;
#pragma unroll
        for (int e = 0; e < CE; e += 4) *reinterpret_cast<float4*>(dst + e) = make_float4(fv[e], fv[e + 1], fv[e + 2], fv[e + 3]);
      }
    }
  };

  int32_t r0 = kb;
  int32_t r1 = ke < r0 + span ? ke : r0 + span;
  if (r0 < r1) stage(r0, r1);  // kFused: keys written by earlier steps, before the wait
  double cs[kRotT], sn[kRotT];  // kFused: the angles of pairs lane, lane + 32, ...
  int32_t half = 0, slot = -1;
  if constexpr (kFused) {
    half = f.rope.n_rot / 2;
    const int32_t pos = f.pos[sd.q_begin];
    if (has_new) slot = f.slots[sd.q_begin];  // (host arrays, as pos: loaded before the wait)
#pragma unroll
    for (int t = 0; t < kRotT; ++t) {
      cs[t] = 1.0;
      sn[t] = 0.0;
      if (lane + 32 * t < half) rope_angle(f.rope, pos, lane + 32 * t, &cs[t], &sn[t]);
    }
  }
  __syncthreads();  // the staged rows (kFused: before the wait)
  if constexpr (kFused) pdl_wait();  // q, k, v are the previous kernel's output
  {  // this warp's q (and the new key's K, V): one round trip (ld.global.ca: not the non-coherent path)
    const int64_t krow = (int64_t{sd.q_begin} * kv.n_kv_heads + kvh) * hd;
    float qv[VEC], kv_[VEC], vv[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int d = lane + 32 * i;
      qv[i] = d < hd ? __ldca(q + (row0 + g) * hd + d) : 0.0f;
      kv_[i] = has_new && d < hd ? __ldca(f.k + krow + d) : 0.0f;
      vv[i] = has_new && d < hd ? __ldca(f.v + krow + d) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      qw[lane + 32 * i] = qv[i];
      if (has_new) {
        knew[lane + 32 * i] = kv_[i];
        vnew[lane + 32 * i] = vv[i];
      }
    }
  }
  __syncwarp();
  step_trace_stamp(1);  // the step trace's phases (launch.cuh): 1 q, k, v loaded
  if constexpr (kFused) {
#pragma unroll
    for (int t = 0; t < kRotT; ++t) {
      const int32_t i = lane + 32 * t;
      if (i < half) {
        rope_rotate(qw, i, half, f.rope.neox, cs[t], sn[t]);
        if (has_new) rope_rotate(knew, i, half, f.rope.neox, cs[t], sn[t]);
      }
    }
    __syncwarp();
    step_trace_stamp(2);  // 2 rotated
    if (has_new) {
      const bool writer = warp == 0 && slot >= 0;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) {
          if (writer) store_kv_elem(kv, (int64_t{slot} * kv.n_kv_heads + kvh) * hd + d, knew[d], vnew[d]);
          knew[d] = as_stored(kv.dtype, knew[d]);
          vnew[d] = as_stored(kv.dtype, vnew[d]);
        }
      }
      __syncwarp();
    }
  }
  step_trace_stamp(3);  // 3 stored; the scores start

  const float* qg = qw;
  float* pw = Ps + warp * 32;
  float m = -INFINITY, l = 0.0f, acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
  const int hd4 = (hd + 3) & ~3;
  while (r0 < r1) {
    const int32_t ntile = (r1 - r0 + kKT - 1) / kKT;
    for (int32_t t = kw; t < ntile; t += KW) {
      const int32_t k0 = r0 + t * kKT;
      const int nk = r1 - k0 < kKT ? r1 - k0 : kKT;
      const int jn = has_new ? kend - 1 - k0 : -1;  // the new key's row in this tile, if in [0, nk)
      float s = -INFINITY;
      if (lane < nk) {
        const float* kr = lane == jn ? knew : Ks + (t * kKT + lane) * KS;
        float a0 = 0.0f;
#pragma unroll 4
        for (int d = 0; d < hd4; d += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(kr + d);
          const float4 q4 = *reinterpret_cast<const float4*>(qg + d);
          a0 = fmaf(q4.x, k4.x, a0);
          a0 = fmaf(q4.y, k4.y, a0);
          a0 = fmaf(q4.z, k4.z, a0);
          a0 = fmaf(q4.w, k4.w, a0);
        }
        s = a0 * scale;
        if (b.imp_scores != nullptr) b.imp_scores[(row0 + g) * b.imp_stride + k0 + lane] = s;
      }
      const float m_new = fmaxf(m, warp_max(s));
      float p = 0.0f, corr = 1.0f;
      if (m_new != -INFINITY) {
        p = lane < nk ? expf(s - m_new) : 0.0f;
        corr = expf(m - m_new);
      }
      m = m_new;
      l = l * corr + p;
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] *= corr;
      pw[lane] = p;
      __syncwarp();
      const float* vt = Vs + t * kKT * D;
#pragma unroll 1
      for (int j0 = 0; j0 < nk; j0 += 4) {
        const float4 p4 = *reinterpret_cast<const float4*>(pw + j0);  // zeros past nk
        const float* v0 = j0 == jn ? vnew : vt + (j0 + 0) * D;
        const float* v1 = j0 + 1 == jn ? vnew : vt + (j0 + 1) * D;
        const float* v2 = j0 + 2 == jn ? vnew : vt + (j0 + 2) * D;
        const float* v3 = j0 + 3 == jn ? vnew : vt + (j0 + 3) * D;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float a = acc[i];
          a = fmaf(p4.x, v0[lane + 32 * i], a);
          a = fmaf(p4.y, v1[lane + 32 * i], a);
          a = fmaf(p4.z, v2[lane + 32 * i], a);
          a = fmaf(p4.w, v3[lane + 32 * i], a);
          acc[i] = a;
        }
      }
      __syncwarp();
    }
    r0 = r1;
    r1 = ke < r0 + span ? ke : r0 + span;
    if (r0 < r1) {  // a context longer than the plan: another round
      __syncthreads();
      stage(r0, r1);
      __syncthreads();
    }
  }
  step_trace_stamp(4);  // 4 warp 0's tiles done
  const float L = warp_sum(l);
  // The KW partials of each head: warp w's in its slot from offset D (its q, new K and V are no
  // longer read); warp kw == 0 of the head merges.
  float* my = qw + D;
  __syncwarp();  // every lane done with the slot's new K
  if (lane == 0) {
    my[0] = m;
    my[1] = L;
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) my[2 + lane + 32 * i] = acc[i];
  __syncthreads();
  step_trace_stamp(5);  // 5 every warp's partial in shared memory
  if (kw != 0) return;
  float M = m, Lt = L;
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = my[2 + lane + 32 * i];
  for (int w2 = 1; w2 < KW; ++w2) {
    const float* o = slots + (w2 * G + g) * WF + D;
    const float mo = o[0];
    if (mo == -INFINITY) continue;  // that warp got no keys
    const float Mn = fmaxf(M, mo);
    const float a = M == -INFINITY ? 0.0f : expf(M - Mn), c = expf(mo - Mn);
    M = Mn;
    Lt = Lt * a + o[1] * c;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = acc[i] * a + o[2 + lane + 32 * i] * c;
  }
  const int64_t row = row0 + g;
  if (b.imp_ml != nullptr && lane == 0) {
    b.imp_ml[(row * nsplit + split) * 2] = M;
    b.imp_ml[(row * nsplit + split) * 2 + 1] = Lt;
  }
  if (nsplit == 1) {
    const float inv = 1.0f / Lt;
    float* o = out + row * hd;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if (lane + 32 * i < hd) o[lane + 32 * i] = acc[i] * inv;
    }
    step_trace_stamp(6);  // 6 merged, out written
    store_xq_row<VEC>(acc, inv, row, hd, lane, xq, xds);
    step_trace_stamp(7);  // 7 the 8-bit x written
  } else {
    float* part = b.scratch + (row * nsplit + split) * (hd + 2);
    if (lane == 0) {
      part[0] = M;
      part[1] = Lt;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if (lane + 32 * i < hd) part[2 + lane + 32 * i] = acc[i];
    }
  }
}

// The hot kernel's launch plan: splits of the planned context (one round of span keys each, at
// most 128) and key warps per head (KW: G x KW <= kHotMaxWarps, no more than the span's tiles).
// Fewer splits as the batch gives blocks of its own (a split then takes its keys in several rounds).
inline int32_t hot_splits(int32_t n_tokens, int32_t n_head, int32_t plan, int vec) {
  const int32_t span = hot_span_tiles(vec) * kKT;
  const int64_t base = std::max<int64_t>(1, int64_t{n_tokens} * n_head / kR);
  const int64_t cap = std::clamp<int64_t>(264 / base, 1, 128);
  return static_cast<int32_t>(std::clamp<int64_t>((int64_t{plan} + span - 1) / span, 1, cap));
}
inline int32_t hot_key_warps(int32_t plan, int32_t nsplit, int32_t group) {
  const int32_t per = (plan + nsplit - 1) / nsplit;
  const int32_t tiles = std::max<int32_t>(1, (per + kKT - 1) / kKT);
  return std::max<int32_t>(1, std::min<int32_t>(tiles, kHotMaxWarps / group));
}

// STRATA_CUDA_HOT_DECODE=0: attention_decode_kernel for every decode batch (an A/B switch).
bool hot_decode_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("STRATA_CUDA_HOT_DECODE");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
std::atomic<int64_t> g_hot_launches{0};
int64_t hot_decode_launches() { return g_hot_launches.load(std::memory_order_relaxed); }

// Whether a decode batch takes attention_decode_hot_kernel: no warm tier, 16-byte loads of the hot
// rows, a GQA group of at most kHotMaxWarps heads, and a batch too small to fill the GPU with
// blocks of its own (n_seqs x n_kv <= 264, ~2 per SM of an H200: the kernel is made for latency; on
// the H200, bench offline's 256 sequences ran 15% slower with it, B = 64 level, B <= 8 faster). Not
// whether importance is asked: the choice, and so the outputs and the splits of AttnBatch::imp_ml,
// must not change with it.
inline bool hot_decode_eligible(const KvLayerView& kv, const AttnBatch& b, int32_t n_head) {
  if (!hot_decode_enabled()) return false;
  if (int64_t{b.n_seqs} * kv.n_kv_heads > 264) return false;
  if (kv.warm_format != WarmFormat::kNone || choose_stage_mode(kv) == 0) return false;
  const int32_t group = n_head / kv.n_kv_heads;
  return group >= 1 && group <= kHotMaxWarps;
}

// xq: where the output's 8-bit form goes (xq_bytes(n_tokens, n_head * head_dim) bytes), or null; it
// is written only where head_dim % 32 == 0 (returns whether).
template <int VEC, bool kFused>
bool launch_decode_hot(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                       float* out, cudaStream_t s, const DecFuse& f, void* xq) {
  const int32_t G = n_head / kv.n_kv_heads;
  const int32_t plan = plan_ctx(b);
  const int32_t nsplit = hot_splits(b.n_tokens, n_head, plan, VEC);
  const int32_t KW = hot_key_warps(plan, nsplit, G);
  const int64_t blocks = int64_t{b.n_seqs} * kv.n_kv_heads * nsplit;
  const size_t smem = static_cast<size_t>(hot_smem_floats(VEC, G * KW)) * sizeof(float);
  int8_t* xb = kv.head_dim % 32 == 0 ? static_cast<int8_t*>(xq) : nullptr;
  float2* xds = xb != nullptr ? reinterpret_cast<float2*>(xb + int64_t{b.n_tokens} * n_head * kv.head_dim) : nullptr;
  static bool configured[3] = {false, false, false};  // per kernel (launchers run on the engine thread only)
  auto run = [&](auto kernel, int kind) {
    if (!configured[kind]) {
      const size_t max_smem = static_cast<size_t>(hot_smem_floats(VEC, kHotMaxWarps)) * sizeof(float);
      STRATA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_smem)));
      configured[kind] = true;
    }
    launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(G * KW * 32)), smem, s, q, kv, b,
               n_head, G, KW, scale, out, nsplit, f, nsplit == 1 ? xb : nullptr, nsplit == 1 ? xds : nullptr);
  };
  switch (kv.dtype) {
    case KvDtype::kF32: run(attention_decode_hot_kernel<VEC, 0, kFused>, 0); break;
    case KvDtype::kF16: run(attention_decode_hot_kernel<VEC, 1, kFused>, 1); break;
    default: run(attention_decode_hot_kernel<VEC, 2, kFused>, 2); break;
  }
  g_hot_launches.fetch_add(1, std::memory_order_relaxed);
  if (nsplit > 1) launch_combine<VEC>(b, n_head, kv.head_dim, nsplit, out, s, xb, xds, true);
  return xb != nullptr;
}

template <int VEC, int R, bool kFused>
void launch_decode(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
                   cudaStream_t s, const DecFuse& f) {
  using C = DecCfg<VEC, R>;
  const int32_t group = n_head / kv.n_kv_heads;
  const int32_t tps = (group + R - 1) / R;
  const int32_t ctx = plan_ctx(b);
  const int nw = dec_warps(ctx, kv.head_dim);
  const int32_t nsplit = dec_splits(b.n_tokens, n_head, kv.head_dim, ctx);
  const int64_t blocks = int64_t{b.n_seqs} * kv.n_kv_heads * tps * nsplit;
  constexpr int kExtra = kFused ? 4 * C::D : 0;  // new K and V rows, RoPE cos and sin (doubles)
  static bool configured = false;  // one flag per instantiation; launchers run on the engine thread only
  if (!configured) {
    const size_t max_smem =
        static_cast<size_t>(C::Q_FLOATS + dec_max_warps(VEC) * C::WARP_FLOATS + kExtra) * sizeof(float);
    STRATA_CUDA(cudaFuncSetAttribute(attention_decode_kernel<VEC, R, kFused>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_smem)));
    configured = true;
  }
  const size_t smem = static_cast<size_t>(C::Q_FLOATS + nw * C::WARP_FLOATS + kExtra) * sizeof(float);
  launch_pdl(attention_decode_kernel<VEC, R, kFused>, dim3(static_cast<unsigned>(blocks)), dim3(nw * 32), smem, s, q,
             kv, b, n_head, group, scale, out, nsplit, tps, choose_stage_mode(kv), f);
  if (nsplit > 1) launch_combine<VEC>(b, n_head, kv.head_dim, nsplit, out, s);
}

// Returns whether it wrote the output's 8-bit form into xq (the latency kernel only).
template <int VEC, bool kFused>
bool launch_decode_group(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                         float* out, cudaStream_t s, const DecFuse& f, void* xq) {
  const int32_t group = n_head / kv.n_kv_heads;
  if (hot_decode_eligible(kv, b, n_head)) return launch_decode_hot<VEC, kFused>(q, kv, b, n_head, scale, out, s, f, xq);
  if (group <= 1) {
    launch_decode<VEC, 1, kFused>(q, kv, b, n_head, scale, out, s, f);
  } else if (group <= 2) {
    launch_decode<VEC, 2, kFused>(q, kv, b, n_head, scale, out, s, f);
  } else if (group <= 4) {
    launch_decode<VEC, 4, kFused>(q, kv, b, n_head, scale, out, s, f);
  } else {
    launch_decode<VEC, 8, kFused>(q, kv, b, n_head, scale, out, s, f);
  }
  return false;
}

template <int VEC>
bool launch(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
            cudaStream_t s, void* xq) {
  if (b.max_n_q > 1 && mma_eligible(kv)) {
    const int32_t nsplit = launch_mma(q, kv, b, n_head, scale, out, s);
    if (nsplit > 1) launch_combine<VEC>(b, n_head, kv.head_dim, nsplit, out, s);
    return false;
  }
  if (b.max_n_q == 1) return launch_decode_group<VEC, false>(q, kv, b, n_head, scale, out, s, DecFuse{}, xq);
  if (choose_wq(b.max_n_q, n_head / kv.n_kv_heads) == 4) {
    launch_wq<VEC, 4>(q, kv, b, n_head, scale, out, s);
  } else {
    launch_wq<VEC, 1>(q, kv, b, n_head, scale, out, s);
  }
  return false;
}

#undef ATT_HD

}  // namespace attn

int64_t attention_scratch_floats(int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t max_ctx) {
  // Any path (tensor-core, general or decode, see launch) may take the batch.
  const int32_t nsplit =
      std::max({attn::choose_splits(n_tokens, n_head, max_ctx), attn::dec_splits(n_tokens, n_head, head_dim, max_ctx),
                attn::mma_splits(n_tokens, n_head, max_ctx), attn::hot_splits(n_tokens, n_head, max_ctx, (head_dim + 31) / 32)});
  if (nsplit <= 1) return 0;
  return int64_t{n_tokens} * n_head * nsplit * (head_dim + 2);
}

int32_t attention_splits(const KvLayerView& kv, const AttnBatch& b, int32_t n_head) {
  if (b.max_n_q > 1 && attn::mma_eligible(kv)) return attn::mma_splits(b.n_tokens, n_head, b.max_ctx);
  if (b.max_n_q == 1) {
    if (attn::hot_decode_eligible(kv, b, n_head)) return attn::hot_splits(b.n_tokens, n_head, attn::plan_ctx(b), (kv.head_dim + 31) / 32);
    return attn::dec_splits(b.n_tokens, n_head, kv.head_dim, attn::plan_ctx(b));
  }
  return attn::choose_splits(b.n_tokens, n_head, b.max_ctx);
}

bool rope_attention_fusable(const KvLayerView& kv, const AttnBatch& b, int32_t n_rot) {
  return b.n_seqs > 0 && b.max_n_q == 1 && b.n_tokens == b.n_seqs && kv.head_dim >= 1 && kv.head_dim <= 256 &&
         n_rot >= 0 && n_rot % 2 == 0 && n_rot <= kv.head_dim;
}

bool rope_kv_store_attention(const float* q, const float* k, const float* v, const int32_t* pos,
                             const int32_t* slots, const RopeParams& p, const double* inv_freq, const KvLayerView& kv,
                             const AttnBatch& b, int32_t n_head, float scale, float* out, cudaStream_t s, void* xq) {
  if (!rope_attention_fusable(kv, b, p.n_rot)) {
    throw std::invalid_argument("rope_kv_store_attention: not a decode batch of head_dim <= 256 and n_rot <= head_dim");
  }
  const attn::DecFuse f{k, v, pos, slots, RopeArgs{inv_freq, p.freq_factors, p.freq_scale, p.n_rot, p.neox}};
  switch ((kv.head_dim + 31) / 32) {
    case 1: return attn::launch_decode_group<1, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 2: return attn::launch_decode_group<2, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 3: return attn::launch_decode_group<3, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 4: return attn::launch_decode_group<4, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 5: return attn::launch_decode_group<5, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 6: return attn::launch_decode_group<6, true>(q, kv, b, n_head, scale, out, s, f, xq);
    case 7: return attn::launch_decode_group<7, true>(q, kv, b, n_head, scale, out, s, f, xq);
    default: return attn::launch_decode_group<8, true>(q, kv, b, n_head, scale, out, s, f, xq);
  }
}

bool paged_attention(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                     float* out, cudaStream_t s, void* xq) {
  if (b.n_seqs <= 0 || b.n_tokens <= 0) return false;
  switch ((kv.head_dim + 31) / 32) {
    case 1: return attn::launch<1>(q, kv, b, n_head, scale, out, s, xq);
    case 2: return attn::launch<2>(q, kv, b, n_head, scale, out, s, xq);
    case 3: return attn::launch<3>(q, kv, b, n_head, scale, out, s, xq);
    case 4: return attn::launch<4>(q, kv, b, n_head, scale, out, s, xq);
    case 5: return attn::launch<5>(q, kv, b, n_head, scale, out, s, xq);
    case 6: return attn::launch<6>(q, kv, b, n_head, scale, out, s, xq);
    case 7: return attn::launch<7>(q, kv, b, n_head, scale, out, s, xq);
    case 8: return attn::launch<8>(q, kv, b, n_head, scale, out, s, xq);
    default:
      throw std::invalid_argument("paged_attention: head_dim " + std::to_string(kv.head_dim) +
                                  " (the CUDA kernels take up to 256)");
  }
}

#if defined(STRATA_CUDA_STEP_TRACE)
void step_trace_set_attention(const StepTraceDev& t, cudaStream_t s) { step_trace_set_local(t, s); }
#else
void step_trace_set_attention(const StepTraceDev&, cudaStream_t) {}
#endif

}  // namespace strata::cuda
