// Paged attention of the CUDA backend over block tables (hot f32/f16/bf16 rows and warm
// int8/fp8/int4 rows, decoded in the inner loop exactly as kv/warm_format.cpp's warm_decode_row).
//
// One kernel serves decode and prefill. Its unit of work is a warp: one sequence, one kv head, a
// tile of kR "query vectors" (vector v of a sequence = query row v / group, head v % group of the
// kv head's GQA group, so a group's heads share every K/V row the warp reads) and one split of the
// keys the tile sees (causally). Per tile of kKT keys the warp
//   stages the K rows (decoded to f32) in its shared memory, row stride head_dim + 1 (conflict-free),
//   computes scores lane-per-key (lane j: key j, all kR vectors, q broadcast from shared memory),
//   updates an online softmax per vector (max by warp shuffles, lane-partial sums),
//   accumulates P.V with lane-per-channel (d = lane + 32 i), reading V rows straight from memory.
// Warps of a block are independent (no block barrier). With one split the warp writes out[]; with
// nsplit > 1 (flash-decoding, chosen from the batch shape so short contexts and large batches get
// one) each split writes a partial (max, sum, acc[head_dim]) to scratch and a combine kernel merges.
//
// Scratch layout (nsplit > 1): float [n_tokens][n_head][nsplit][head_dim + 2] = {m, l, acc...}.
// Assumption: the batch's sequences cover rows [0, n_tokens) of q/out (the combine kernel reads
// every row's partials).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace strata::cuda {
namespace attn {

#define ATT_HD __host__ __device__ __forceinline__

// --- row decoding (as kv.cu; the element values of kv/warm_format.cpp's warm_decode_row) -------

ATT_HD int64_t align4(int64_t n) { return (n + 3) / 4 * 4; }

ATT_HD uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
ATT_HD float bits_f32(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(x);
#else
  return std::bit_cast<float>(x);
#endif
}

ATT_HD float half_bits_to_f32(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
ATT_HD float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
ATT_HD float ld_f16(const uint8_t* p) { return half_bits_to_f32(*reinterpret_cast<const uint16_t*>(p)); }

ATT_HD float e4m3_decode(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t exp = (v >> 3) & 0xf;
  const uint32_t mant = v & 7;
  if (exp == 0xf && mant == 7) return bits_f32(sign | 0x7fc00000u);
  if (exp == 0) return bits_f32(sign | f32_bits(static_cast<float>(mant) * 0.001953125f));  // mant * 2^-9
  return bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}

struct RowSrc {
  int kind = 0;  // 0 f32, 1 f16, 2 bf16, 3 int8, 4 fp8, 5 int4 keys, 6 int4 values
  const uint8_t* data = nullptr;
  const uint8_t* sc = nullptr;  // int4: f16 scales of the row's group(s)
  const int8_t* zr = nullptr;   // int4: zero points
  float scale = 0;              // int8 / fp8
  int gv = 32;                  // int4 values: channels per group
};

// Row (token `slot` of block `id`, kv head `head`) of K (value = false) or V.
ATT_HD RowSrc row_src(const KvLayerView& kv, bool value, int32_t id, int32_t slot, int32_t head) {
  RowSrc r;
  const int64_t H = kv.n_kv_heads, D = kv.head_dim;
  if (id < kv.n_hot_blocks) {
    const int es = kv.dtype == KvDtype::kF32 ? 4 : 2;
    r.kind = kv.dtype == KvDtype::kF32 ? 0 : (kv.dtype == KvDtype::kF16 ? 1 : 2);
    r.data = (value ? kv.v : kv.k) + ((int64_t{id} * kv.block_size + slot) * H + head) * D * es;
    return r;
  }
  const int32_t w = id - kv.n_hot_blocks;
  const int32_t ws = w / kv.warm_span, sub = w % kv.warm_span;
  const uint8_t* base = value ? kv.warm_v + ws * kv.warm_v_slot_bytes : kv.warm_k + ws * kv.warm_k_slot_bytes;
  const int64_t T = int64_t{kv.warm_span} * kv.block_size;
  const int64_t t = int64_t{sub} * kv.block_size + slot;
  const int64_t row = t * H + head;
  switch (kv.warm_format) {
    case WarmFormat::kInt8:
      r.kind = 3;
      r.data = base + row * D;
      r.scale = ld_f16(base + align4(T * H * D) + 2 * row);
      break;
    case WarmFormat::kFp8:
      r.kind = 4;
      r.data = base + row * D;
      r.scale = *reinterpret_cast<const float*>(base + align4(T * H * D) + 4 * head);
      break;
    case WarmFormat::kInt4: {
      r.data = base + row * D / 2;
      const uint8_t* scales = base + align4(T * H * D / 2);
      if (!value) {
        r.kind = 5;
        const int64_t gk = T % 32 == 0 ? 32 : T;
        const int64_t G = T / gk, g = t / gk;
        r.sc = scales + 2 * (g * H + head) * D;
        r.zr = reinterpret_cast<const int8_t*>(scales + align4(2 * G * H * D)) + (g * H + head) * D;
      } else {
        r.kind = 6;
        const int64_t gv = D % 32 == 0 ? 32 : D;
        const int64_t NG = D / gv;
        r.gv = static_cast<int>(gv);
        r.sc = scales + 2 * row * NG;
        r.zr = reinterpret_cast<const int8_t*>(scales + align4(2 * T * H * NG)) + row * NG;
      }
      break;
    }
    default: break;
  }
  return r;
}

ATT_HD float row_elem(const RowSrc& r, int d) {
  switch (r.kind) {
    case 0: return reinterpret_cast<const float*>(r.data)[d];
    case 1: return half_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]);
    case 2: return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]);
    case 3: return r.scale * static_cast<float>(reinterpret_cast<const int8_t*>(r.data)[d]);
    case 4: return r.scale * e4m3_decode(r.data[d]);
    case 5:
    case 6: {
      const uint8_t b = r.data[d >> 1];
      const int nib = (d & 1) ? (b >> 4) : (b & 0xf);
      const int m = r.kind == 5 ? d : d / r.gv;
      return ld_f16(r.sc + 2 * m) * static_cast<float>(nib - r.zr[m]);
    }
    default: return 0.0f;
  }
}

// Elements d = lane + 32 i (i < VEC) of a row of hd elements (0 past its end: head sizes that are
// not a multiple of 32 run in the next larger instantiation).
template <int VEC>
__device__ __forceinline__ void load_row(const RowSrc& r, int lane, int hd, float (&o)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const int d = lane + 32 * i;
    if (d >= hd) {
      o[i] = 0.0f;
      continue;
    }
    switch (r.kind) {
      case 0: o[i] = reinterpret_cast<const float*>(r.data)[d]; break;
      case 1: o[i] = half_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]); break;
      case 2: o[i] = bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]); break;
      default: o[i] = row_elem(r, d); break;
    }
  }
}

// --- kernels -------------------------------------------------------------------------------------

constexpr int kR = 8;       // query vectors per warp
constexpr int kKT = 32;     // keys per tile (one per lane)
constexpr int kWarps = 2;   // warps per thread block (independent)

ATT_HD int64_t warp_smem_floats(int D) { return int64_t{kKT} * (D + 1) + int64_t{kR} * D + int64_t{kR} * kKT; }

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

template <int VEC>
__global__ void __launch_bounds__(kWarps * 32, 4) attention_kernel(const float* __restrict__ q, KvLayerView kv, AttnBatch b,
                                                                 int32_t n_head, int32_t group, float scale,
                                                                 float* __restrict__ out, int32_t nsplit,
                                                                 int64_t tile_slots) {
  constexpr int D = VEC * 32;  // capacity; the head has hd <= D elements
  const int hd = kv.head_dim;
  extern __shared__ float4 smem4[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* Ks = reinterpret_cast<float*>(smem4) + warp * warp_smem_floats(D);  // [kKT][D + 1]
  float* Qs = Ks + kKT * (D + 1);                                             // [kR][D]
  float* Ps = Qs + kR * D;                                                    // [kR][kKT]

  const int64_t n_kv = kv.n_kv_heads;
  const int64_t gw = int64_t{blockIdx.x} * kWarps + warp;
  if (gw >= tile_slots * n_kv * nsplit) return;
  const int64_t tile = gw % tile_slots;
  const int64_t rest = gw / tile_slots;
  const int32_t kvh = static_cast<int32_t>(rest % n_kv);
  const int32_t split = static_cast<int32_t>(rest / n_kv);

  // Which sequence holds this tile: prefix sums of ceil(n_q * group / kR) over the sequences.
  int32_t seq = -1;
  int64_t local_tile = 0;
  {
    int64_t cum = 0;
    for (int32_t base = 0; base < b.n_seqs; base += 32) {
      const int32_t si = base + lane;
      const int64_t nt = si < b.n_seqs ? (int64_t{b.seqs[si].n_q} * group + kR - 1) / kR : 0;
      int64_t inc = nt;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int64_t y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
      }
      const int64_t total = __shfl_sync(0xffffffffu, inc, 31);
      if (tile < cum + total) {
        const unsigned mask = __ballot_sync(0xffffffffu, cum + inc > tile);
        const int L = __ffs(mask) - 1;
        const int64_t excl = __shfl_sync(0xffffffffu, inc - nt, L);
        seq = base + L;
        local_tile = tile - cum - excl;
        break;
      }
      cum += total;
    }
  }
  if (seq < 0) return;
  const AttnSeqDev sd = b.seqs[seq];
  const int32_t* table = b.tables + sd.table_offset;
  const int32_t nvec = sd.n_q * group;
  const int32_t v0 = static_cast<int32_t>(local_tile) * kR;
  const int rcount = nvec - v0 < kR ? nvec - v0 : kR;

  // Query vector r of the tile: row v / group (token q_begin + that), head kvh * group + v % group,
  // causal limit: keys < start_pos + row + 1 (0 for vectors past the sequence's end).
  auto vec_out = [&](int r) {
    const int32_t v = v0 + r;
    return (int64_t{sd.q_begin} + v / group) * n_head + kvh * group + v % group;
  };
  int32_t lim[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) lim[r] = r < rcount ? sd.start_pos + (v0 + r) / group + 1 : 0;
  const int32_t kend = sd.start_pos + (v0 + rcount - 1) / group + 1;
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
  __syncwarp();

  float m[kR], l[kR], acc[kR][VEC];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[r][i] = 0.0f;
  }

  const int32_t bs = kv.block_size;
  for (int32_t k0 = kb; k0 < ke; k0 += kKT) {
    const int nk = ke - k0 < kKT ? ke - k0 : kKT;
    // Stage the tile's K rows.
    for (int j0 = 0; j0 < nk; j0 += 2) {
      float vals[2][VEC];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (j0 + u < nk) {
          const int32_t key = k0 + j0 + u;
          const RowSrc rs = row_src(kv, false, table[key / bs], key % bs, kvh);
          load_row<VEC>(rs, lane, hd, vals[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (j0 + u < nk) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) Ks[(j0 + u) * (D + 1) + lane + 32 * i] = vals[u][i];
        }
      }
    }
    __syncwarp();

    // Scores: lane = key.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = 0.0f;
    if (lane < nk) {
      const float* kr = Ks + lane * (D + 1);
#pragma unroll 1
      for (int d = 0; d < D; d += 4) {
        const float k0v = kr[d], k1v = kr[d + 1], k2v = kr[d + 2], k3v = kr[d + 3];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const float4 qq = *reinterpret_cast<const float4*>(Qs + r * D + d);
          s[r] = fmaf(qq.x, k0v, s[r]);
          s[r] = fmaf(qq.y, k1v, s[r]);
          s[r] = fmaf(qq.z, k2v, s[r]);
          s[r] = fmaf(qq.w, k3v, s[r]);
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

    // acc += P . V (lane = channels lane + 32 i).
    for (int j0 = 0; j0 < nk; j0 += 4) {
      float vals[4][VEC];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (j0 + u < nk) {
          const int32_t kk = k0 + j0 + u;
          const RowSrc rs = row_src(kv, true, table[kk / bs], kk % bs, kvh);
          load_row<VEC>(rs, lane, hd, vals[u]);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) vals[u][i] = 0.0f;
        }
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
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float L = warp_sum(l[r]);
    if (r >= rcount) continue;
    const int64_t row = vec_out(r);
    if (nsplit == 1) {
      const float inv = 1.0f / L;
      float* o = out + row * hd;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (lane + 32 * i < hd) o[lane + 32 * i] = acc[r][i] * inv;
      }
    } else {
      float* part = b.scratch + (row * nsplit + split) * (D + 2);
      if (lane == 0) {
        part[0] = m[r];
        part[1] = L;
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) part[2 + lane + 32 * i] = acc[r][i];
    }
  }
}

// Merges the nsplit partials of each (token, head) row: one warp per row.
template <int VEC>
__global__ void __launch_bounds__(128) attention_combine_kernel(const float* __restrict__ scratch, int64_t rows,
                                                                int32_t nsplit, int32_t hd, float* __restrict__ out) {
  constexpr int D = VEC * 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  if (row >= rows) return;
  const float* part = scratch + row * nsplit * (D + 2);
  float M = -INFINITY;
  for (int s = lane; s < nsplit; s += 32) M = fmaxf(M, part[int64_t{s} * (D + 2)]);
  M = warp_max(M);
  float acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
  float L = 0.0f;
  for (int s = 0; s < nsplit; ++s) {
    const float* p = part + int64_t{s} * (D + 2);
    const float ms = p[0];
    if (ms == -INFINITY) continue;
    const float w = expf(ms - M);
    L += w * p[1];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] += w * p[2 + lane + 32 * i];
  }
  const float inv = 1.0f / L;
  float* o = out + row * hd;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (lane + 32 * i < hd) o[lane + 32 * i] = acc[i] * inv;
  }
}

// Splits of the context per query tile: enough warps for ~2 waves on an H200 (132 SMs, ~8 resident
// warps each) when the batch alone does not fill them, each split at least 64 keys.
inline int32_t choose_splits(int32_t n_tokens, int32_t n_head, int32_t max_ctx) {
  const int64_t base = std::max<int64_t>(1, int64_t{n_tokens} * n_head / kR);
  const int64_t target = 132 * 8 * 2;
  int64_t s = (target + base - 1) / base;
  s = std::min<int64_t>(s, std::max<int32_t>(1, max_ctx / 64));
  s = std::min<int64_t>(s, 64);
  return static_cast<int32_t>(std::max<int64_t>(s, 1));
}

template <int VEC>
void launch(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale, float* out,
            cudaStream_t s) {
  constexpr int D = VEC * 32;
  const int32_t group = n_head / kv.n_kv_heads;
  const int32_t nsplit = choose_splits(b.n_tokens, n_head, b.max_ctx);
  const int64_t tile_slots = (int64_t{b.n_tokens} * group + kR - 1) / kR + b.n_seqs;
  const int64_t warps = tile_slots * kv.n_kv_heads * nsplit;
  const int64_t blocks = (warps + kWarps - 1) / kWarps;
  const size_t smem = static_cast<size_t>(warp_smem_floats(D)) * sizeof(float) * kWarps;
  static bool configured = false;  // launchers run on the engine thread only
  if (!configured) {
    STRATA_CUDA(cudaFuncSetAttribute(attention_kernel<VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    configured = true;
  }
  attention_kernel<VEC><<<static_cast<unsigned>(blocks), kWarps * 32, smem, s>>>(q, kv, b, n_head, group, scale, out,
                                                                                nsplit, tile_slots);
  STRATA_CUDA_LAUNCH_CHECK();
  if (nsplit > 1) {
    const int64_t rows = int64_t{b.n_tokens} * n_head;
    const int64_t cblocks = (rows * 32 + 127) / 128;
    attention_combine_kernel<VEC><<<static_cast<unsigned>(cblocks), 128, 0, s>>>(b.scratch, rows, nsplit,
                                                                                  kv.head_dim, out);
    STRATA_CUDA_LAUNCH_CHECK();
  }
}

#undef ATT_HD

}  // namespace attn

int64_t attention_scratch_floats(int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t max_ctx) {
  const int32_t nsplit = attn::choose_splits(n_tokens, n_head, max_ctx);
  if (nsplit <= 1) return 0;
  return int64_t{n_tokens} * n_head * nsplit * (head_dim + 2);
}

void paged_attention(const float* q, const KvLayerView& kv, const AttnBatch& b, int32_t n_head, float scale,
                     float* out, cudaStream_t s) {
  if (b.n_seqs <= 0 || b.n_tokens <= 0) return;
  switch ((kv.head_dim + 31) / 32) {
    case 1: attn::launch<1>(q, kv, b, n_head, scale, out, s); break;
    case 2: attn::launch<2>(q, kv, b, n_head, scale, out, s); break;
    case 3: attn::launch<3>(q, kv, b, n_head, scale, out, s); break;
    case 4: attn::launch<4>(q, kv, b, n_head, scale, out, s); break;
    case 5: attn::launch<5>(q, kv, b, n_head, scale, out, s); break;
    case 6: attn::launch<6>(q, kv, b, n_head, scale, out, s); break;
    case 7: attn::launch<7>(q, kv, b, n_head, scale, out, s); break;
    case 8: attn::launch<8>(q, kv, b, n_head, scale, out, s); break;
    default:
      throw std::invalid_argument("paged_attention: head_dim " + std::to_string(kv.head_dim) +
                                  " (the CUDA kernels take up to 256)");
  }
}

}  // namespace strata::cuda
