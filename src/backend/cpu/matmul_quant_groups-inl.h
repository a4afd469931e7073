// Q4_K over rows in groups of 16 (quant_groups.h): one vector lane per weight row, for every
// Highway target. Included once per target by matmul_quant.cpp, which sends every grouped matrix
// here (WeightMatrix::row_group == kQuantGroup), whatever the target or STRATA_QUANT_HWY.
//
// Why: a row-major Q4_K kernel unpacks each row's 6-bit scales, applies them per sub-block in
// int16 and sums its lanes at the end: ~55 vector operations per 256 weights, which made one-token
// decode arithmetic-bound on a 2-core Xeon (74% of the bandwidth limit). With 16 rows in the lanes,
// a 64-byte line holds the same 4 bytes of 16 rows, so each load feeds one 4-byte dot product per
// row against 4 activations broadcast to every lane (vpdpbusd with VNNI), the scales of 16 rows
// unpack in a few whole-vector operations, and no lane sum is left at the end: ~4 operations per
// 64 weights on AVX-512.
//
// Arithmetic per output (the same sequence for any tile, token count, thread count, vector width
// or x86 target, so results are the same bits whatever the batch): per super-block, for each
// sub-block j = 0..7 in order, the exact integer dot of its 32 nibbles with the int8 activations
// (i_j), then A = fma(float(i_j), float(sc_j), A) and M = fma(float(m_j), float(bsum_j), M) from 0;
// then acc = fma(A, d_w · d_x, acc) and acc = -fma(M, dmin_w · d_x) + acc, both per row (lane).
// The integer dot: vpdpbusd (AVX3_DL), maddubs + madd (AVX2, AVX3), byte products in int32 lanes
// elsewhere; all exact. Thread-safety: pure functions over caller memory.

#if defined(STRATA_BACKEND_CPU_MATMUL_QUANT_GROUPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_BACKEND_CPU_MATMUL_QUANT_GROUPS_INL_H_
#undef STRATA_BACKEND_CPU_MATMUL_QUANT_GROUPS_INL_H_
#else
#define STRATA_BACKEND_CPU_MATMUL_QUANT_GROUPS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/quant_groups.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#endif
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace qg {

using DI = hn::CappedTag<int32_t, kQuantGroupRows>;  // one lane per row of a group (16, 8, 4 or 1 lanes)
using DU = hn::RebindToUnsigned<DI>;
using DF = hn::Rebind<float, DI>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using VI = hn::Vec<DI>;
using VU = hn::Vec<DU>;
using VF = hn::Vec<DF>;

// Tokens per tile: accumulators for RN tokens stay in registers (32 vector registers on AVX-512).
#if HWY_TARGET <= HWY_AVX3
constexpr int kMaxRN = 4;
#else
constexpr int kMaxRN = 2;
#endif

// acc + Σ_{b<4} w_b · x_b per 32-bit lane, w four unsigned bytes (nibbles here: 0..15), x four
// signed bytes (|x| <= 127). Exact.
HWY_INLINE VI DotQuads(VI acc, VU w, VI x) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI{_mm512_dpbusd_epi32(acc.raw, w.raw, x.raw)};
#elif HWY_TARGET == HWY_AVX3
  return hn::Add(acc, VI{_mm512_madd_epi16(_mm512_maddubs_epi16(w.raw, x.raw), _mm512_set1_epi16(1))});
#elif HWY_TARGET == HWY_AVX2
  return hn::Add(acc, VI{_mm256_madd_epi16(_mm256_maddubs_epi16(w.raw, x.raw), _mm256_set1_epi16(1))});
#else
  const DI di;
  const VI wi = hn::BitCast(di, w);
  const VI b0 = hn::And(wi, hn::Set(di, 0xFF));
  const VI b1 = hn::And(hn::ShiftRight<8>(wi), hn::Set(di, 0xFF));
  const VI b2 = hn::And(hn::ShiftRight<16>(wi), hn::Set(di, 0xFF));
  const VI b3 = hn::BitCast(di, hn::ShiftRight<24>(w));
  const VI x0 = hn::ShiftRight<24>(hn::ShiftLeft<24>(x)), x1 = hn::ShiftRight<24>(hn::ShiftLeft<16>(x));
  const VI x2 = hn::ShiftRight<24>(hn::ShiftLeft<8>(x)), x3 = hn::ShiftRight<24>(x);
  acc = hn::Add(acc, hn::Mul(b0, x0));
  acc = hn::Add(acc, hn::Mul(b1, x1));
  acc = hn::Add(acc, hn::Mul(b2, x2));
  return hn::Add(acc, hn::Mul(b3, x3));
#endif
}

// Byte k of every 32-bit lane, as an integer 0..255.
template <int k>
HWY_INLINE VU Byte(VU v) {
  const DU du;
  if constexpr (k == 3) {
    return hn::ShiftRight<24>(v);
  } else {
    return hn::And(hn::ShiftRight<8 * k>(v), hn::Set(du, 0xFFu));
  }
}

constexpr size_t kPrefetchAhead = 8192;  // 4, 8 and 16 KiB measured level

HWY_INLINE int32_t Word(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Sub-block pair c (sub-blocks 2c: low nibbles, 2c + 1: high nibbles) of one super-block: the
// integer dots of RN tokens into A and the mins into M (quant_groups.h: word 8c + q of the qs);
// pf (or null): where to prefetch the same lines of a later super-block.
template <int c, int RN>
HWY_INLINE void Pair(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0, const int8_t* const* xq, const int16_t* const* xs,
                     VU sc, VU mn, VF* A, VF* M) {
  const DI di;
  const DU du;
  const DF df;
  const VU low4 = hn::Set(du, 0x0F0F0F0Fu);
  VI lo[RN], hi[RN];
  for (int t = 0; t < RN; ++t) {
    lo[t] = hn::Zero(di);
    hi[t] = hn::Zero(di);
  }
  HWY_UNROLL(8)
  for (int q = 0; q < 8; ++q) {
    if (pf != nullptr) __builtin_prefetch(pf + 64 * (8 * c + q), 0, 2);
    const VU v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(blk + 64 * (8 * c + q)) + lane0);
    const VU vl = hn::And(v, low4), vh = hn::And(hn::ShiftRight<4>(v), low4);
    for (int t = 0; t < RN; ++t) {
      lo[t] = DotQuads(lo[t], vl, hn::Set(di, Word(xq[t] + 64 * c + 4 * q)));
      hi[t] = DotQuads(hi[t], vh, hn::Set(di, Word(xq[t] + 64 * c + 32 + 4 * q)));
    }
  }
  // Sub-block 2c's scale and min are byte (2c) % 4 of sc / mn, 2c + 1's the next byte.
  constexpr int k = (2 * c) % 4;
  const VF sl = hn::ConvertTo(df, hn::BitCast(di, Byte<k>(sc))), sh = hn::ConvertTo(df, hn::BitCast(di, Byte<k + 1>(sc)));
  const VF ml = hn::ConvertTo(df, hn::BitCast(di, Byte<k>(mn))), mh = hn::ConvertTo(df, hn::BitCast(di, Byte<k + 1>(mn)));
  for (int t = 0; t < RN; ++t) {
    A[t] = hn::MulAdd(hn::ConvertTo(df, lo[t]), sl, A[t]);
    A[t] = hn::MulAdd(hn::ConvertTo(df, hi[t]), sh, A[t]);
    const int16_t* s = xs[t] + 4 * c;  // 16-sums: sub-block 2c is sums 4c, 4c + 1
    M[t] = hn::MulAdd(ml, hn::Set(df, static_cast<float>(s[0] + s[1])), M[t]);
    M[t] = hn::MulAdd(mh, hn::Set(df, static_cast<float>(s[2] + s[3])), M[t]);
  }
}

// Group rows [lane0, lane0 + Lanes) of one group (`group`: its first super-block) against tokens
// t .. t + RN - 1; y[u · ys + i] for lane i < rows_out (rows of the group that exist and are asked).
template <int RN>
HWY_NOINLINE void Tile(const uint8_t* HWY_RESTRICT group, int64_t nsb, const QuantActs& a, int64_t t, size_t lane0,
                       float* HWY_RESTRICT y, size_t ys, size_t rows_out) {
  const DU du;
  const DF df;
  const DH dh;
  const int64_t K = a.cols;
  VF acc[RN];
  for (int u = 0; u < RN; ++u) acc[u] = hn::Zero(df);
  const int8_t* xq[RN];
  const int16_t* xs[RN];
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* blk = group + static_cast<size_t>(s) * kQ4KGroupBlock;
    // The first lane block streams the group from memory (the others find it in cache): one L2
    // prefetch kPrefetchAhead bytes ahead per line, spread between the loads (Pair) rather than 36
    // at once, which filled the core's miss buffers and kept the arithmetic from overlapping the
    // stream (llama-1b Q4_K on the Xeon VM: 37-39 tok/s in bursts, 47 spread; into L1 29).
    const uint8_t* pf = lane0 == 0 ? blk + kPrefetchAhead : nullptr;
    if (pf != nullptr) {
      for (size_t line = kQ4KGroupScales; line < kQ4KGroupBlock; line += 64) __builtin_prefetch(pf + line, 0, 2);
    }
    for (int u = 0; u < RN; ++u) {
      xq[u] = a.qs + (t + u) * K + 256 * s;
      xs[u] = a.sums + (t + u) * (K / 16) + 16 * s;
    }
    const uint32_t* words = reinterpret_cast<const uint32_t*>(blk + kQ4KGroupScales) + lane0;
    const VU u0 = hn::LoadU(du, words), u1 = hn::LoadU(du, words + 16), u2 = hn::LoadU(du, words + 32);
    // Scales and mins of sub-blocks 0..3 (bytes of sc03 / mn03) and 4..7 (sc47 / mn47): k4_scale_min.
    const VU m6 = hn::Set(du, 0x3F3F3F3Fu), m4 = hn::Set(du, 0x0F0F0F0Fu), top = hn::Set(du, 0x30303030u);
    const VU sc03 = hn::And(u0, m6), mn03 = hn::And(u1, m6);
    const VU sc47 = hn::Or(hn::And(u2, m4), hn::And(hn::ShiftRight<2>(u0), top));
    const VU mn47 = hn::Or(hn::And(hn::ShiftRight<4>(u2), m4), hn::And(hn::ShiftRight<2>(u1), top));
    VF A[RN], M[RN];
    for (int u = 0; u < RN; ++u) {
      A[u] = hn::Zero(df);
      M[u] = hn::Zero(df);
    }
    Pair<0, RN>(blk, pf, lane0, xq, xs, sc03, mn03, A, M);
    Pair<1, RN>(blk, pf, lane0, xq, xs, sc03, mn03, A, M);
    Pair<2, RN>(blk, pf, lane0, xq, xs, sc47, mn47, A, M);
    Pair<3, RN>(blk, pf, lane0, xq, xs, sc47, mn47, A, M);
    const VF d = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kQ4KGroupD) + lane0));
    const VF dmin = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kQ4KGroupDmin) + lane0));
    for (int u = 0; u < RN; ++u) {
      const VF dx = hn::Set(df, a.d[(t + u) * (K / 256) + s]);
      acc[u] = hn::MulAdd(A[u], hn::Mul(d, dx), acc[u]);
      acc[u] = hn::NegMulAdd(M[u], hn::Mul(dmin, dx), acc[u]);
    }
  }
  const size_t N = hn::Lanes(df);
  for (int u = 0; u < RN; ++u) {
    float* out = y + static_cast<size_t>(u) * ys;
    if (rows_out >= N) {
      hn::StoreU(acc[u], df, out);
    } else {
      HWY_ALIGN float tmp[kQuantGroupRows];
      hn::Store(acc[u], df, tmp);
      std::copy(tmp, tmp + rows_out, out);
    }
  }
}

}  // namespace qg

// y[t][r] for t < n, r0 <= r < r1 over a Q4_K matrix in groups (r0 a multiple of the group).
HWY_NOINLINE void MatmulQuantGroups(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0,
                                    int64_t r1) {
  using Fn = void (*)(const uint8_t*, int64_t, const QuantActs&, int64_t, size_t, float*, size_t, size_t);
  static constexpr Fn kTiles[] = {&qg::Tile<1>, &qg::Tile<2>,
#if HWY_TARGET <= HWY_AVX3
                                  &qg::Tile<3>, &qg::Tile<4>
#endif
  };
  static_assert(sizeof(kTiles) / sizeof(kTiles[0]) == qg::kMaxRN);
  const int64_t G = kQuantGroupRows;
  const int64_t nsb = w.cols / 256;
  const size_t ys = static_cast<size_t>(w.rows);
  const auto N = static_cast<int64_t>(hn::Lanes(qg::DF()));
  // Tokens per block: their activations stay in L1/L2 while the groups go by.
  const int64_t tb = std::max<int64_t>(qg::kMaxRN, (128 * 1024) / w.cols / qg::kMaxRN * qg::kMaxRN);
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    const int64_t t1 = std::min(n, t0 + tb);
    for (int64_t g0 = r0; g0 < r1; g0 += G) {
      const uint8_t* group = w.data + static_cast<uint64_t>(g0) * w.row_bytes;
      for (int64_t l = 0; l < G && g0 + l < r1; l += N) {
        const auto rows_out = static_cast<size_t>(std::min<int64_t>(N, r1 - g0 - l));
        for (int64_t t = t0; t < t1; t += qg::kMaxRN) {
          const int rn = static_cast<int>(std::min<int64_t>(qg::kMaxRN, t1 - t));
          kTiles[rn - 1](group, nsb, a, t, static_cast<size_t>(l), y + t * w.rows + g0 + l, ys, rows_out);
        }
      }
    }
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
