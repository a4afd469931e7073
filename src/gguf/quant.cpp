#include "gguf/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/fp16.h"
#include "gguf/quant_blocks.h"

// Bit compatibility with ggml. Dequantization is exact by construction: every product and sum
// below is written in the order ggml's dequantize_row_* evaluates it, so the floats are the same
// bits. Quantization follows ggml's reference quantizers (quantize_row_*_ref, which llama.cpp's
// quantize tool uses when no importance matrix is given) operation for operation, including their
// scale searches, so the same input gives the same bytes. Both rely on IEEE single precision
// without contraction into fused multiply-adds, which is what ISO C++ mode (no GNU extensions)
// compiles to.

namespace strata {
namespace {

// Rows in a mapped file need not be aligned for the block's fields: copy blocks in and out.
template <typename Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

template <typename Block>
void store_block(uint8_t* dst, int64_t i, const Block& b) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

uint32_t load_u32_le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

void store_u32_le(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
}

// Groups whose largest magnitude is below this are stored as zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves round(v) in the low mantissa
// bits. Exact for |v| < 2^22, the only range the callers produce from finite input; outside it the
// result is meaningless but defined (callers clamp it).
int nearest_int(float v) {
  const float t = v + 12582912.f;
  return static_cast<int>(std::bit_cast<uint32_t>(t) & 0x007fffffu) - 0x00400000;
}

// (int)v for v in [lo, hi] as ggml's (int8_t) casts of values that the format keeps in range;
// clamping first keeps the conversion defined even for out-of-contract input (NaN gives lo).
int trunc_clamped(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// roundf (half away from zero) for Q8_0/Q8_1, clamped the same way.
int round_clamped(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::round(v));
}

// ===================================== legacy types =====================================

// Q4_0, Q4_1, Q5_0 and Q5_1 share one layout: 32 quants, element e in the low nibble of qs[e] for
// e < 16 and the high nibble of qs[e - 16] otherwise, Q5's fifth bit e in qh. Types with a min
// decode q * d + m, the others (q - offset) * d, each in ggml's order of operations.
template <typename Block>
constexpr bool kHasMin = requires(Block b) { b.m; };
template <typename Block>
constexpr bool kFiveBit = requires(Block b) { b.qh; };

template <typename Block>
void dequantize_legacy(const uint8_t* src, float* y, int64_t nb) {
  constexpr int kOffset = kHasMin<Block> ? 0 : (kFiveBit<Block> ? 16 : 8);
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const auto b = load_block<Block>(src, i);
    const float d = fp16_to_f32(b.d);
    float m = 0.0f;
    if constexpr (kHasMin<Block>) m = fp16_to_f32(b.m);
    uint32_t qh = 0;
    if constexpr (kFiveBit<Block>) qh = load_u32_le(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (b.qs[j] & 0xF) | static_cast<int>((qh >> j) & 1u) << 4;
      const int q1 = (b.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      if constexpr (kHasMin<Block>) {
        y[j] = static_cast<float>(q0) * d + m;
        y[j + 16] = static_cast<float>(q1) * d + m;
      } else {
        y[j] = static_cast<float>(q0 - kOffset) * d;
        y[j + 16] = static_cast<float>(q1 - kOffset) * d;
      }
    }
  }
}

// Stores 32 quants in the layout above.
template <typename Block>
void pack_legacy(const int* q, Block& b) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b.qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  if constexpr (kFiveBit<Block>) store_u32_le(b.qh, qh);
}

// Value of largest magnitude, keeping its sign: symmetric types map it to the most negative
// level, which would otherwise go unused.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_0 (kHalf 8) and Q5_0 (kHalf 16): d = max / -kHalf, q = x / d + kHalf truncated after + 0.5.
template <typename Block, int kHalf>
void quantize_symmetric(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    const float d = signed_absmax(x, 32) / -kHalf;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = trunc_clamped(x[j] * id + (kHalf + 0.5f), 0, 2 * kHalf - 1);
    Block b{};
    b.d = f32_to_fp16(d);
    pack_legacy(q, b);
    store_block(dst, i, b);
  }
}

// Q4_1 (kMax 15) and Q5_1 (kMax 31): m = min, d = (max - min) / kMax, q = (x - min) / d rounded.
template <typename Block, int kMax>
void quantize_affine(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float min = std::numeric_limits<float>::max();
    float max = -std::numeric_limits<float>::max();
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / kMax;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = trunc_clamped((x[j] - min) * id + 0.5f, 0, kMax);
    Block b{};
    b.d = f32_to_fp16(d);
    b.m = f32_to_fp16(min);
    pack_legacy(q, b);
    store_block(dst, i, b);
  }
}

// Q8_0 and Q8_1 decode alike (Q8_1's s is only a cache for dot products).
template <typename Block>
void dequantize_q8(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const auto b = load_block<Block>(src, i);
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

template <typename Block>
void quantize_q8(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    Block b{};
    b.d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      b.qs[j] = static_cast<int8_t>(round_clamped(x[j] * id, -127, 127));
      sum += b.qs[j];
    }
    if constexpr (std::is_same_v<Block, BlockQ8_1>) b.s = f32_to_fp16(static_cast<float>(sum) * d);
    store_block(dst, i, b);
  }
}

// ================================ K-quant scale searches ================================

// Symmetric quantization of n values to l in [-nmax, nmax - 1] (stored as l + nmax in L) with the
// scale that minimises sum(x^2 (x - scale l)^2), weighting big values most. Starts from the
// scale that puts the largest magnitude on -nmax and tries 18 nearby inverse scales, keeping the
// best least-squares fit (ggml's make_qx_quants, rmse_type 1, no importance weights). The returned
// scale is negative when the largest-magnitude value is positive.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const auto quant = [&](float iscale, int i) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = quant(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = quant(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + quant(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's search (ggml's make_q3_quants with do_rmse): the same objective as make_qx_quants, but
// instead of trying other inverse scales it moves single values to the level that the fit of the
// others asks for, up to five passes, accepting a move only when the fit improves.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx > 0.0f) {
        float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ~ scale * l - the_min with l in [0, nmax] and the_min >= 0, minimising
// the weighted error (absolute when use_mad, squared otherwise). Tries nstep + 1 inverse scales
// (rmin + rdelta * is + nmax) / (max - min) and, for each, the weighted least-squares scale and
// min of its levels (ggml's make_qkx2_quants). Laux is scratch of n bytes.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  const auto err = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
    best_error += weights[i] * err(scale * static_cast<float>(L[i]) + min - x[i]);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.0f) {  // the min is subtracted, so it may not be positive: refit the scale alone
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (int i = 0; i < n; ++i) {
        cur_error += weights[i] * err(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 256 two-bit values: byte l of each 32-byte half h holds elements 128 h + l + 32 k at bits 2 k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* l4 = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      qs[32 * h + l] = static_cast<uint8_t>(l4[l] | (l4[l + 32] << 2) | (l4[l + 64] << 4) | (l4[l + 96] << 6));
    }
  }
}

// Stores the 6-bit scale ls and min lm of Q4_K/Q5_K sub-block j (inverse of k4_scale_min). Bytes
// must start zeroed and j must go up from 0 (later sub-blocks OR into earlier bytes).
void pack_k4_scale_min(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// The Q4_K/Q5_K quantizer up to the packing of the quants: 8 sub-blocks of 32 searched with
// make_qkx2_quants, scales and mins quantized to 6 bits against the largest of each, then every
// value requantized against the scale and min it will really be decoded with.
void quantize_k4_levels(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L, uint16_t* d_out,
                        uint16_t* dmin_out, uint8_t* scales_out) {
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float weights[32];
  uint8_t Laux[32];
  float max_scale = 0.0f;  // scales are positive as the min is taken out
  float max_min = 0.0f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.f / max_min : 0.0f;
  std::fill(scales_out, scales_out + kKScaleSize, uint8_t{0});
  for (int j = 0; j < kQK_K / 32; ++j) {
    // ggml stores nearest_int into a uint8_t before clamping: keep the same wrap-around.
    const auto ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const auto lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    pack_k4_scale_min(j, ls, lm, scales_out);
  }
  *d_out = f32_to_fp16(max_scale / 63.f);
  *dmin_out = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, scales_out, &sc, &m);
    const float d = fp16_to_f32(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = fp16_to_f32(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + ii] + dm) / d))));
    }
  }
}

// ======================================= K-quants =======================================

void dequantize_q2_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = fp16_to_f32(b.d);
    const float min = fp16_to_f32(b.dmin);
    for (int e = 0; e < kQK_K; e += 16) {
      const uint8_t sc = b.scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = min * static_cast<float>(sc >> 4);
      const uint8_t* q = b.qs + 32 * (e / 128) + (e % 32);
      const int shift = 2 * ((e % 128) / 32);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

void quantize_q2_k(const float* x, uint8_t* dst, int64_t nb) {
  constexpr float kQ4Scale = 15.f;
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ2_K b{};
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0.0f) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      b.d = f32_to_fp16(max_scale / kQ4Scale);
    }
    if (max_min > 0.0f) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        b.scales[j] |= static_cast<uint8_t>(static_cast<unsigned>(nearest_int(iscale * mins[j])) << 4);
      }
      b.dmin = f32_to_fp16(max_min / kQ4Scale);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(b.d) * static_cast<float>(b.scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16_to_f32(b.dmin) * static_cast<float>(b.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * j + ii] + dm) / d))));
      }
    }
    pack_2bit(L, b.qs);
    store_block(dst, i, b);
  }
}

void dequantize_q3_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d_all = fp16_to_f32(b.d);
    for (int e = 0; e < kQK_K; e += 16) {
      const float dl = d_all * static_cast<float>(q3_k_scale(e / 16, b.scales) - 32);
      const uint8_t* q = b.qs + 32 * (e / 128) + (e % 32);
      const uint8_t* hm = b.hmask + (e % 32);
      const int shift = 2 * ((e % 128) / 32);
      const int hbit = e / 32;
      for (int l = 0; l < 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
        *y++ = dl * static_cast<float>(v);
      }
    }
  }
}

void quantize_q3_k(const float* x, uint8_t* dst, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ3_K b{};
    float max_scale = 0.0f;
    float amax = 0.0f;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = std::max(-32, std::min(31, nearest_int(iscale * scales[j]))) + 32;
        if (j < 8) {
          b.scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          b.scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        b.scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      b.d = f32_to_fp16(1 / iscale);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(b.d) * static_cast<float>(q3_k_scale(j, b.scales) - 32);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * j + ii] / d))) + 4);
      }
    }
    // Third bits go to hmask (element e at bit e / 32 of byte e % 32), low two bits to qs.
    uint8_t low[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 3) b.hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
      low[e] = static_cast<uint8_t>(L[e] & 3);
    }
    pack_2bit(low, b.qs);
    store_block(dst, i, b);
  }
}

// Q4_K and Q5_K decode alike but for Q5_K's fifth bits.
template <typename Block>
void dequantize_k4(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<Block>(src, i);
    const float d = fp16_to_f32(b.d);
    const float min = fp16_to_f32(b.dmin);
    for (int j = 0; j < kQK_K / 32; ++j) {  // sub-block j: low (j even) or high nibbles of qs[32 (j / 2) ..]
      uint8_t sc, m;
      k4_scale_min(j, b.scales, &sc, &m);
      const float dj = d * static_cast<float>(sc);
      const float mj = min * static_cast<float>(m);
      const uint8_t* q = b.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 0xF;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) v += ((b.qh[l] >> j) & 1) ? 16 : 0;
        *y++ = dj * static_cast<float>(v) - mj;
      }
    }
  }
}

void quantize_q4_k(const float* x, uint8_t* dst, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ4_K b{};
    quantize_k4_levels(x, 15, -1.f, 0.1f, 20, L, &b.d, &b.dmin, b.scales);
    for (int c = 0; c < kQK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    }
    store_block(dst, i, b);
  }
}

void quantize_q5_k(const float* x, uint8_t* dst, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ5_K b{};
    quantize_k4_levels(x, 31, -0.5f, 0.1f, 15, L, &b.d, &b.dmin, b.scales);
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 15) b.qh[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
    }
    for (int c = 0; c < kQK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l] & 0xF;
        const int hi = L[64 * c + l + 32] & 0xF;
        b.qs[32 * c + l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
    store_block(dst, i, b);
  }
}

void dequantize_q6_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = fp16_to_f32(b.d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* dst, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ6_K b{};
    float max_scale = 0.0f;
    float max_abs_scale = 0.0f;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {  // an all-zero block
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -128.f / max_scale;
    b.d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(b.d) * static_cast<float>(b.scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d))) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = b.ql + 64 * h;
      uint8_t* qh = b.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                     ((Lh[l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

void dequantize_q8_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int j = 0; j < kQK_K; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
  }
}

void quantize_q8_k(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ8_K b{};  // an all-zero block has d = 0, qs = 0 and bsums = 0
    const float max = signed_absmax(x, kQK_K);
    if (max != 0.0f) {
      // -127 rather than -128 keeps every product of two quants in int16 for the AVX dot products.
      const float iscale = -127.f / max;
      for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
      for (int j = 0; j < kQK_K / 16; ++j) {
        int sum = 0;
        for (int ii = 0; ii < 16; ++ii) sum += b.qs[16 * j + ii];
        b.bsums[j] = static_cast<int16_t>(sum);
      }
      b.d = 1 / iscale;
    }
    store_block(dst, i, b);
  }
}

// ==================================== float types ====================================

// Templates rather than function pointers so that the element conversion inlines into the loop.
template <float (*Decode)(uint16_t)>
void dequantize_16bit(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    y[i] = Decode(h);
  }
}

template <uint16_t (*Encode)(float)>
void quantize_16bit(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Encode(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

using DequantizeFn = void (*)(const uint8_t*, float*, int64_t);
using QuantizeFn = void (*)(const float*, uint8_t*, int64_t);

struct BlockCodec {
  DequantizeFn dequantize;  // over a count of blocks
  QuantizeFn quantize;
};

// The block codec of a quantized type; both null for the float types and unsupported types.
BlockCodec block_codec(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return {dequantize_legacy<BlockQ4_0>, quantize_symmetric<BlockQ4_0, 8>};
    case GgmlType::kQ4_1: return {dequantize_legacy<BlockQ4_1>, quantize_affine<BlockQ4_1, 15>};
    case GgmlType::kQ5_0: return {dequantize_legacy<BlockQ5_0>, quantize_symmetric<BlockQ5_0, 16>};
    case GgmlType::kQ5_1: return {dequantize_legacy<BlockQ5_1>, quantize_affine<BlockQ5_1, 31>};
    case GgmlType::kQ8_0: return {dequantize_q8<BlockQ8_0>, quantize_q8<BlockQ8_0>};
    case GgmlType::kQ8_1: return {dequantize_q8<BlockQ8_1>, quantize_q8<BlockQ8_1>};
    case GgmlType::kQ2_K: return {dequantize_q2_k, quantize_q2_k};
    case GgmlType::kQ3_K: return {dequantize_q3_k, quantize_q3_k};
    case GgmlType::kQ4_K: return {dequantize_k4<BlockQ4_K>, quantize_q4_k};
    case GgmlType::kQ5_K: return {dequantize_k4<BlockQ5_K>, quantize_q5_k};
    case GgmlType::kQ6_K: return {dequantize_q6_k, quantize_q6_k};
    case GgmlType::kQ8_K: return {dequantize_q8_k, quantize_q8_k};
    default: return {nullptr, nullptr};
  }
}

bool is_float_type(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
}

// Number of blocks in a row of n elements, checking the preconditions shared by both directions.
int64_t block_count(GgmlType type, int64_t n) {
  const auto traits = ggml_type_traits(type);
  STRATA_CHECK(n >= 0 && n % traits.block_size == 0, "row of {} elements is not a multiple of {}'s block size {}", n,
               traits.name, traits.block_size);
  return n / traits.block_size;
}

}  // namespace

bool can_dequantize(GgmlType type) { return is_float_type(type) || block_codec(type).dequantize != nullptr; }

bool can_quantize(GgmlType type) { return is_float_type(type) || block_codec(type).quantize != nullptr; }

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  STRATA_CHECK(can_dequantize(type), "cannot dequantize {}", ggml_type_name(type));
  const int64_t nb = block_count(type, n);
  if (n == 0) return;  // src and dst may be null then
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::kF16: dequantize_16bit<fp16_to_f32>(bytes, dst, n); return;
    case GgmlType::kBF16: dequantize_16bit<bf16_to_f32>(bytes, dst, n); return;
    default: block_codec(type).dequantize(bytes, dst, nb);
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  STRATA_CHECK(can_quantize(type), "cannot quantize to {}", ggml_type_name(type));
  const int64_t nb = block_count(type, n);
  if (n == 0) return;  // src and dst may be null then
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::kF16: quantize_16bit<f32_to_fp16>(src, bytes, n); return;
    case GgmlType::kBF16: quantize_16bit<f32_to_bf16>(src, bytes, n); return;
    default: block_codec(type).quantize(src, bytes, nb);
  }
}

}  // namespace strata
