// Every quantized type but F32/F16/BF16's and Q8_1 (Q2_K .. Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) over rows in groups of 16 (quant_groups.h): one vector lane per weight row, for every
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
// Q6_K the same way (4 + 2 bits per weight in each byte before the dot; its zero point 32 through
// the activations' 16-sums), Q2_K (2 bits, mins as Q4_K's), Q3_K (2 + 1 bits, zero point 4), Q8_0
// (signed bytes: SignedDot), Q4_0/Q5_0 (4 or 5 bits, zero point 8 or 16) and Q4_1/Q5_1 (4 or 5 bits
// and a min).
//
// Arithmetic per output (the same sequence for any tile, token count, thread count, vector width
// or x86 target, so results are the same bits whatever the batch): per super-block, the exact
// integer dot of each sub-block with the int8 activations, converted to f32 and multiplied by
// the sub-block's scale into an f32 sum in a fixed sub-block order (Q4K, Q6K below), then that sum
// times d_w · d_x (and Q4_K's mins term) into the row's accumulator. The integer dot: vpdpbusd
// (AVX3_DL), maddubs + madd (AVX2, AVX3), byte products in int32 lanes elsewhere; all exact.
// Thread-safety: pure functions over caller memory.

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
#include <utility>

#include "backend/cpu/decode_order.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/prefetch-inl.h"
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

// acc + Σ_{b<4} w_b · x_b per 32-bit lane, the weights' bytes already widened (w0..w3), x four
// signed bytes: the integer dot of the targets without a byte dot instruction.
HWY_INLINE VI AddByteProducts(VI acc, VI w0, VI w1, VI w2, VI w3, VI x) {
  const VI x0 = hn::ShiftRight<24>(hn::ShiftLeft<24>(x)), x1 = hn::ShiftRight<24>(hn::ShiftLeft<16>(x));
  const VI x2 = hn::ShiftRight<24>(hn::ShiftLeft<8>(x)), x3 = hn::ShiftRight<24>(x);
  acc = hn::Add(acc, hn::Mul(w0, x0));
  acc = hn::Add(acc, hn::Mul(w1, x1));
  acc = hn::Add(acc, hn::Mul(w2, x2));
  return hn::Add(acc, hn::Mul(w3, x3));
}

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
  return AddByteProducts(acc, hn::And(wi, hn::Set(di, 0xFF)), hn::And(hn::ShiftRight<8>(wi), hn::Set(di, 0xFF)),
                         hn::And(hn::ShiftRight<16>(wi), hn::Set(di, 0xFF)), hn::BitCast(di, hn::ShiftRight<24>(w)), x);
#endif
}

// A sum of up to 8 DotQuads of nibbles (w <= 15), in two steps: QuadPart adds one dot into a partial
// sum, QuadSum gives the total as int32 lanes. Without VNNI (AVX2, AVX3) the partial is the int16
// pair sums of maddubs (each <= 2·15·127, eight of them <= 30,480: no overflow, no saturation), and
// one madd at the end widens them: 2 operations a dot instead of 3. The same integers as DotQuads.
HWY_INLINE VI QuadPart(VI part, VU w, VI x) {
#if HWY_TARGET == HWY_AVX3
  return VI{_mm512_add_epi16(part.raw, _mm512_maddubs_epi16(w.raw, x.raw))};
#elif HWY_TARGET == HWY_AVX2
  return VI{_mm256_add_epi16(part.raw, _mm256_maddubs_epi16(w.raw, x.raw))};
#else
  return DotQuads(part, w, x);
#endif
}
HWY_INLINE VI QuadSum(VI part) {
#if HWY_TARGET == HWY_AVX3
  return VI{_mm512_madd_epi16(part.raw, _mm512_set1_epi16(1))};
#elif HWY_TARGET == HWY_AVX2
  return VI{_mm256_madd_epi16(part.raw, _mm256_set1_epi16(1))};
#else
  return part;
#endif
}

// acc + Σ_{b<4} w_b · x_b per 32-bit lane for signed bytes w (Q8_0's quants, -128..127). With VNNI
// (kBiasedSigned) the dot of w + 128 (unsigned), from which the caller subtracts 128 · Σ x;
// maddubs targets take |w| against x with w's sign (pairs <= 2·128·127: no saturation); elsewhere
// sign-extended byte products. Every form is exact: the same integers on every target.
#if HWY_TARGET == HWY_AVX3_DL
constexpr bool kBiasedSigned = true;
#else
constexpr bool kBiasedSigned = false;
#endif
// With a byte dot that cannot saturate (vpdpbusd), weights may be dotted times a power of two (up
// to 255, the bits left where they lie: one shift fewer) and the factor divided out of their
// float scale, exactly: fma(float(2^k·i), sc / 2^k, A) is fma(float(i), sc, A) (the same real
// product; 2^k·i stays below 2^24). maddubs's int16 pair sums would saturate.
constexpr bool kScaledDots = HWY_TARGET == HWY_AVX3_DL;
#if HWY_TARGET == HWY_AVX3_DL
// w + 128 per byte (kBiasedSigned): the unsigned operand of vpdpbusd for signed weights.
HWY_INLINE VU BiasSigned(VU w) { return VU{_mm512_xor_si512(w.raw, _mm512_set1_epi8(static_cast<char>(0x80)))}; }
#endif
HWY_INLINE VI SignedDot(VI acc, VU w, VI x) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI{_mm512_dpbusd_epi32(acc.raw, BiasSigned(w).raw, x.raw)};
#elif HWY_TARGET == HWY_AVX3
  const __m512i xs = _mm512_mask_sub_epi8(x.raw, _mm512_movepi8_mask(w.raw), _mm512_setzero_si512(), x.raw);
  return hn::Add(acc, VI{_mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w.raw), xs), _mm512_set1_epi16(1))});
#elif HWY_TARGET == HWY_AVX2
  const __m256i xs = _mm256_sign_epi8(x.raw, w.raw);
  return hn::Add(acc, VI{_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w.raw), xs), _mm256_set1_epi16(1))});
#else
  const VI wi = hn::BitCast(DI(), w);
  return AddByteProducts(acc, hn::ShiftRight<24>(hn::ShiftLeft<24>(wi)), hn::ShiftRight<24>(hn::ShiftLeft<16>(wi)),
                         hn::ShiftRight<24>(hn::ShiftLeft<8>(wi)), hn::ShiftRight<24>(wi), x);
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

// Bytes of software prefetch ahead of the stream for each GroupPrefetch (decode_order.h; 0: none,
// the hardware prefetchers alone): kSoftware 8 KiB (4, 8 and 16 KiB measured level on the Xeon VM).
HWY_INLINE size_t PrefetchAhead(uint8_t prefetch) {
  switch (static_cast<GroupPrefetch>(prefetch)) {
    case GroupPrefetch::kHardware: return 0;
    case GroupPrefetch::kSoftware16K: return 16384;
    case GroupPrefetch::kSoftware4K: return 4096;
    default: return 8192;
  }
}

HWY_INLINE int32_t Word(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// DotQuads, QuadPart and SignedDot against the four activation bytes at p broadcast to every lane.
// On AVX3_DL the broadcast is vpdpbusd's own memory operand ({1to16}, inline asm): GCC kept a
// separate vpbroadcastd for each dot, 64 of the Q6_K loop's 526 instructions per super-block and
// 64 of Q4_K's 401 (Xeon VM, llama-1b decode: +0.5 to +2.7% tok/s in 5 of 6 old/new pairs of
// Q4_K, Q6_K, Q8_0, near that machine's noise; docs/PERFORMANCE.md). The same integers.
#if HWY_TARGET == HWY_AVX3_DL
using AliasedWord = int32_t __attribute__((may_alias));
HWY_INLINE VI DotQuadsAt(VI acc, VU w, const int8_t* p) {
  __m512i a = acc.raw;
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(a) : "v"(w.raw), "m"(*reinterpret_cast<const AliasedWord*>(p)));
  return VI{a};
}
HWY_INLINE VI QuadPartAt(VI part, VU w, const int8_t* p) { return DotQuadsAt(part, w, p); }
HWY_INLINE VI SignedDotAt(VI acc, VU w, const int8_t* p) { return DotQuadsAt(acc, BiasSigned(w), p); }
#else
HWY_INLINE VI DotQuadsAt(VI acc, VU w, const int8_t* p) { return DotQuads(acc, w, hn::Set(DI(), Word(p))); }
HWY_INLINE VI QuadPartAt(VI part, VU w, const int8_t* p) { return QuadPart(part, w, hn::Set(DI(), Word(p))); }
HWY_INLINE VI SignedDotAt(VI acc, VU w, const int8_t* p) { return SignedDot(acc, w, hn::Set(DI(), Word(p))); }
#endif

// Word v of the 16 rows at byte offset `at` of a group super-block, rows lane0 .. lane0 + Lanes.
HWY_INLINE VU Words(const uint8_t* HWY_RESTRICT blk, size_t at, size_t v, size_t lane0) {
  return hn::LoadU(DU(), reinterpret_cast<const uint32_t*>(blk + at + 64 * v) + lane0);
}
// An L2 prefetch of pf + at tied to the load of v (prefetch-inl.h), none where pf is null (the lane
// blocks after the first, which find the unit in cache).
HWY_INLINE void PrefetchLine(const uint8_t* pf, size_t at, VU& v) {
  if (pf != nullptr) PrefetchL2Tied(pf + at, v);
}

// Bit `from` of every byte moved to bit `to` by one shift of the 32-bit lanes (the other bits:
// anything; the caller masks).
template <int from, int to>
HWY_INLINE VU MoveBit(VU v) {
  if constexpr (from > to) {
    return hn::ShiftRight<from - to>(v);
  } else if constexpr (from < to) {
    return hn::ShiftLeft<to - from>(v);
  } else {
    return v;
  }
}

// The integer sums of a quarter super-block's four 32-column runs for RN tokens (Q2_K, Q3_K), zeroed.
template <int RN>
HWY_INLINE void ZeroRunSums(VI (&is)[4][RN]) {
  for (int k = 0; k < 4; ++k)
    for (int u = 0; u < RN; ++u) is[k][u] = hn::Zero(DI());
}

// Tokens per tile (kMaxRN) by register count: 32 vector registers on AVX-512, 16 on AVX2.
constexpr bool kWideRegisters = HWY_TARGET <= HWY_AVX3;

// Each format: kUnitCols (columns of the unit its layout repeats: a super-block of 256, Q8_0's pair
// of blocks), kBlock (bytes of a group's unit), kTail (its lines from there on are prefetched at
// the start of a unit, the others by Super between its loads; Q4_K and Q6_K prefetch all theirs
// between the loads: their 4 and 5 scale and d lines at once at the start cost Q6_K 1-5% of its
// stream in BM_DecodeStep), kMaxRN, and
// Super<RN>(blk, pf, lane0, xq, xs, xw, dx, acc): one unit of the lane block's rows against RN tokens
// (xq: their int8 activations of the unit, xs: their sums of 16, xw: their QuantActs::words of the
// unit (K-quants only), dx: their activation scales of the unit, one per 256 or per 32 columns) into
// acc.

// Q4_K (quant_groups.h): per sub-block j the integer dot i_j, A = Σ_j float(i_j)·sc_j and
// M = Σ_j m_j·bsum_j in order j = 0..7, then acc += A·(d·dx) − M·(dmin·dx).
// Q5_K (kFifth): the same on 5-bit weights, from its recoded words (quant_groups.h: the low
// sub-block's weight in bits 0-4 of the X word, the high one's in bits 5-7 of X and two bits of the
// y word); weights up to 31 take DotQuads (int32), not the int16 partial sums of QuadPart.
template <bool kFifth>
struct Q4KOr5K {
  static constexpr uint64_t kBlock = kFifth ? kQ5KGroupBlock : kQ4KGroupBlock, kTail = kBlock;
  static constexpr uint64_t kScales = kFifth ? kQ5KGroupScales : kQ4KGroupScales;
  static constexpr uint64_t kD = kFifth ? kQ5KGroupD : kQ4KGroupD, kDmin = kFifth ? kQ5KGroupDmin : kQ4KGroupDmin;
  static constexpr uint64_t kQs = kFifth ? 0 : kQ4KGroupQs;  // the weights' first line
  static constexpr int64_t kUnitCols = 256;
  static constexpr int kMaxRN = kWideRegisters ? 4 : 2;
  // kScaledDots: the high sub-block's weights dotted times 16 (Q4_K: the nibbles in place) or 8
  // (Q5_K: its recoded bits 5-7 in place); the tail divides the factor out of its scale.
  static constexpr float kHighFactor = kFifth ? 8.0f : 16.0f;
  // M = Σ_j m_j · b_j is an integer below 2^24 (8 · 63 · 32 · 127), and so is every partial sum of
  // the float form (each product and sum exact): with a byte dot that cannot saturate it is taken as
  // four byte dots of the mins against the activations' split run sums (QuantActs::words) and one
  // conversion, the same value, instead of 8 extractions, conversions and broadcasts per super-block
  // (kIntegerMins). Elsewhere the float form.
  static constexpr bool kIntegerMins = kScaledDots;

  // Sub-block pair c (2c: low nibbles, 2c + 1: high nibbles of qs words 8c .. 8c + 7).
  template <int c, int RN>
  static HWY_INLINE void Pair(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                              const int8_t* const* xq, const int16_t* const* xs, VU sc, VU mn, VF* A, VF* M) {
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
      // One line each between the loads: qs; the scale and d lines (Q5_K: the qh lines first).
      VU v = Words(blk, kQs, 8 * c + q, lane0);
      PrefetchLine(pf, kQs + 64 * (8 * c + q), v);
      if (kFifth && c == 0) PrefetchLine(pf, kQ5KGroupQh + 64 * q, v);
      if (c == (kFifth ? 1 : 0) && q < 4) PrefetchLine(pf, kScales + 64 * q, v);
      VU vl, vh;
      if constexpr (kFifth) {
        // Q5_K's recoded words (quant_groups.h): the low sub-block's 5-bit weight in bits 0-4 of v,
        // the high one's bits 2-4 in bits 5-7 and its bits 0-1 in bits 2c, 2c + 1 of the y word.
        const VU y = Words(blk, kQ5KGroupQh, q, lane0);
        vl = hn::And(v, hn::Set(du, 0x1F1F1F1Fu));
        if constexpr (kScaledDots) {  // 8 times the weight: bits 5-7 where they lie, y's two at 3-4
          vh = hn::OrAnd(hn::And(v, hn::Set(du, 0xE0E0E0E0u)), MoveBit<2 * c, 3>(y), hn::Set(du, 0x18181818u));
        } else {
          vh = hn::OrAnd(hn::And(hn::ShiftRight<3>(v), hn::Set(du, 0x1C1C1C1Cu)), MoveBit<2 * c, 0>(y),
                         hn::Set(du, 0x03030303u));
        }
      } else {  // kScaledDots (Q4_K): the high nibbles in place, 16 times their value
        vl = hn::And(v, low4);
        vh = kScaledDots ? hn::And(v, hn::Set(du, 0xF0F0F0F0u)) : hn::And(hn::ShiftRight<4>(v), low4);
      }
      for (int t = 0; t < RN; ++t) {
        const int8_t* xl = xq[t] + 64 * c + 4 * q;
        const int8_t* xh = xq[t] + 64 * c + 32 + 4 * q;
        lo[t] = kFifth ? DotQuadsAt(lo[t], vl, xl) : QuadPartAt(lo[t], vl, xl);
        hi[t] = kFifth ? DotQuadsAt(hi[t], vh, xh) : QuadPartAt(hi[t], vh, xh);
      }
    }
    if constexpr (!kFifth) {
      for (int t = 0; t < RN; ++t) {
        lo[t] = QuadSum(lo[t]);
        hi[t] = QuadSum(hi[t]);
      }
    }
    // Sub-block 2c's scale and min are byte (2c) % 4 of sc / mn, 2c + 1's the next byte.
    constexpr int k = (2 * c) % 4;
    const VF sl = hn::ConvertTo(df, hn::BitCast(di, Byte<k>(sc)));
    VF sh = hn::ConvertTo(df, hn::BitCast(di, Byte<k + 1>(sc)));
    if constexpr (kScaledDots) sh = hn::Mul(sh, hn::Set(df, 1.0f / kHighFactor));
    for (int t = 0; t < RN; ++t) {
      A[t] = hn::MulAdd(hn::ConvertTo(df, lo[t]), sl, A[t]);
      A[t] = hn::MulAdd(hn::ConvertTo(df, hi[t]), sh, A[t]);
    }
    if constexpr (!kIntegerMins) {
      const VF ml = hn::ConvertTo(df, hn::BitCast(di, Byte<k>(mn))), mh = hn::ConvertTo(df, hn::BitCast(di, Byte<k + 1>(mn)));
      for (int t = 0; t < RN; ++t) {
        const int16_t* s = xs[t] + 4 * c;  // 16-sums: sub-block 2c is sums 4c, 4c + 1
        M[t] = hn::MulAdd(ml, hn::Set(df, static_cast<float>(s[0] + s[1])), M[t]);
        M[t] = hn::MulAdd(mh, hn::Set(df, static_cast<float>(s[2] + s[3])), M[t]);
      }
    }
  }

  template <int RN>
  static HWY_INLINE void Super(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                               const int8_t* const* xq, const int16_t* const* xs, const int32_t* const* xw, const float* const* dx,
                               VF* acc) {
    const DU du;
    const DF df;
    const DH dh;
    const VU u0 = Words(blk, kScales, 0, lane0), u1 = Words(blk, kScales, 1, lane0), u2 = Words(blk, kScales, 2, lane0);
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
    if constexpr (!kIntegerMins) {
      (void)xw;
    } else {
      const DI di;
      for (int u = 0; u < RN; ++u) {
        const auto* w = reinterpret_cast<const int8_t*>(xw[u]);
        constexpr int kQ = 4 * QuantActs::kActWordQ, kR = 4 * QuantActs::kActWordR;
        const VI q = DotQuadsAt(DotQuadsAt(hn::Zero(di), mn03, w + kQ), mn47, w + kQ + 4);
        const VI r = DotQuadsAt(DotQuadsAt(hn::Zero(di), mn03, w + kR), mn47, w + kR + 4);
        M[u] = hn::ConvertTo(df, hn::Add(hn::ShiftLeft<7>(q), r));
      }
    }
    const VF d = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kD) + lane0));
    const VF dmin = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kDmin) + lane0));
    for (int u = 0; u < RN; ++u) {
      const VF x = hn::Set(df, dx[u][0]);
      acc[u] = hn::MulAdd(A[u], hn::Mul(d, x), acc[u]);
      acc[u] = hn::NegMulAdd(M[u], hn::Mul(dmin, x), acc[u]);
    }
  }
};
using Q4K = Q4KOr5K<false>;
using Q5K = Q4KOr5K<true>;

// Q6_K (quant_groups.h, its recoded layout): weights q (0..63) in bits 0-5 of the words A, B, C
// (runs 0, 1, 3) and in their bits 6-7 (run 2), value sc_s·(q − 32) for sub-block s of 16. Per
// sub-block the exact integer i_s − 32·bsum_s (the dot of the unsigned q minus the zero point
// through the activations' 16-sum), A = Σ_s float(that)·sc_s in the order
// s = 8h + 2k + e for h, e, k (halves, then the first or second 16 of each 32-column run, then the
// four runs), then acc += A·(d·dx).
struct Q6K {
  static constexpr uint64_t kBlock = kQ6KGroupBlock, kTail = kBlock;
  static constexpr int64_t kUnitCols = 256;
  static constexpr int kMaxRN = kWideRegisters ? 3 : 2;

  // Half h, quads 4e .. 4e + 3 of each 32-column run k (columns 128h + 32k + 16e ..: sub-block
  // 8h + 2k + e) into A.
  // (h a template parameter: every offset is a constant, where a runtime h left them in stack slots.)
  template <int h, int e, int RN>
  static HWY_INLINE void Quarter(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                                 const int8_t* const* xq, const int32_t* const* xw, VF* A) {
    const DI di;
    const DU du;
    const DF df;
    const VU m6 = hn::Set(du, 0x3F3F3F3Fu), m0c = hn::Set(du, 0x0C0C0C0Cu), m30 = hn::Set(du, 0x30303030u);
    // Run k's sums start at its sub-block's zero point, -32 · times · (the activations' 16-sum)
    // (QuantActs::words, broadcast from memory): the exact integer i_s - 32 · times · bsum_s at the end.
    VI is[4][RN];
    for (int k = 0; k < 4; ++k) {
      const int w = kScaledDots && k == 2 ? QuantActs::kActWordZero4 + 2 * h + e : QuantActs::kActWordZero + 8 * h + 2 * k + e;
      for (int u = 0; u < RN; ++u) is[k][u] = hn::Set(di, xw[u][w]);
    }
    HWY_UNROLL(4)
    for (int q = 4 * e; q < 4 * e + 4; ++q) {
      VU a = Words(blk, q6k_line(h, q, 0), 0, lane0), b = Words(blk, q6k_line(h, q, 1), 0, lane0);
      VU c = Words(blk, q6k_line(h, q, 2), 0, lane0);
      PrefetchLine(pf, q6k_line(h, q, 0), a);
      PrefetchLine(pf, q6k_line(h, q, 1), b);
      PrefetchLine(pf, q6k_line(h, q, 2), c);
      if (h == 0 && e == 0) PrefetchLine(pf, kQ6KGroupScales + 64 * q, c);  // the scales' 4 lines (q < 4)
      if (h == 0 && e == 1 && q == 4) PrefetchLine(pf, kQ6KGroupD, c);        // and d's
      // Run 2's weight: bits 6-7 of a, b and c as its bits 0-1, 2-3 and 4-5 (kScaledDots: as bits
      // 2-3, 4-5 and 6-7, 4 times its value, c's bits where they lie).
      VU w2;
      if constexpr (kScaledDots) {
        w2 = hn::OrAnd(hn::OrAnd(hn::And(hn::ShiftRight<4>(a), m0c), hn::ShiftRight<2>(b), m30), c,
                       hn::Set(du, 0xC0C0C0C0u));
      } else {
        w2 = hn::OrAnd(hn::OrAnd(hn::And(hn::ShiftRight<6>(a), hn::Set(du, 0x03030303u)), hn::ShiftRight<4>(b), m0c),
                       hn::ShiftRight<2>(c), m30);
      }
      const VU w[4] = {hn::And(a, m6), hn::And(b, m6), w2, hn::And(c, m6)};
      for (int u = 0; u < RN; ++u) {
        const int8_t* x = xq[u] + 128 * h + 4 * q;
        for (int k = 0; k < 4; ++k) is[k][u] = DotQuadsAt(is[k][u], w[k], x + 32 * k);
      }
    }
    // Run k's sub-block s = 8h + 2k + e: the 16 rows' int8 scales s side by side.
    for (int k = 0; k < 4; ++k) {
      const int times = kScaledDots && k == 2 ? 4 : 1;  // run 2's dots: 4 times the value
      VF sc = hn::ConvertTo(df, Scale(blk, 8 * h + 2 * k + e, lane0));
      if (times != 1) sc = hn::Mul(sc, hn::Set(df, 0.25f));
      for (int u = 0; u < RN; ++u) A[u] = hn::MulAdd(hn::ConvertTo(df, is[k][u]), sc, A[u]);
    }
  }

  // Scale s of the rows lane0 .. lane0 + Lanes, sign-extended.
  static HWY_INLINE VI Scale(const uint8_t* HWY_RESTRICT blk, int s, size_t lane0) {
    const hn::Rebind<int8_t, DI> d8;
    return hn::PromoteTo(DI(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + kQ6KGroupScales + 16 * s) + lane0));
  }

  template <int RN>
  static HWY_INLINE void Super(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                               const int8_t* const* xq, const int16_t* const* /*xs*/, const int32_t* const* xw, const float* const* dx,
                               VF* acc) {
    const DF df;
    const DH dh;
    VF A[RN];
    for (int u = 0; u < RN; ++u) A[u] = hn::Zero(df);
    Quarter<0, 0, RN>(blk, pf, lane0, xq, xw, A);
    Quarter<0, 1, RN>(blk, pf, lane0, xq, xw, A);
    Quarter<1, 0, RN>(blk, pf, lane0, xq, xw, A);
    Quarter<1, 1, RN>(blk, pf, lane0, xq, xw, A);
    const VF d = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kQ6KGroupD) + lane0));
    for (int u = 0; u < RN; ++u) acc[u] = hn::MulAdd(A[u], hn::Mul(d, hn::Set(df, dx[u][0])), acc[u]);
  }
};

// Q2_K and Q3_K (quant_groups.h): 16 sub-blocks of 16, weights q = the 2 bits of qs (Q3_K, kThird:
// | its hmask bit << 2, 0..7). Q2_K: value d·sc_s·q − dmin·m_s (sc_s, m_s: the 4-bit halves of scale
// byte s); per sub-block the exact integer dot i_s, A = Σ_s float(i_s)·sc_s and M = Σ_s m_s·bsum_s,
// then acc += A·(d·dx) − M·(dmin·dx). Q3_K: value d·(sc_s − 32)·(q − 4), sc_s the 6-bit scale; per
// sub-block i_s − 4·bsum_s (the zero point through the activations' 16-sums), A = Σ_s float(that)·
// float(sc_s − 32), then acc += A·(d·dx). Both sum the sub-blocks s = 8h + 2j + e in the order h, e, j
// (halves, then the first or second 16 of each 32-column run, then the four runs j). Weights <= 7:
// the int16 partial sums of QuadPart (four dots of pairs <= 2·7·127).
template <bool kThird>
struct Q2KOr3K {
  static constexpr uint64_t kBlock = kThird ? kQ3KGroupBlock : kQ2KGroupBlock, kTail = kBlock;
  static constexpr uint64_t kScales = kThird ? kQ3KGroupScales : kQ2KGroupScales;
  static constexpr uint64_t kD = kThird ? kQ3KGroupD : kQ2KGroupD;
  static constexpr int64_t kUnitCols = 256;
  static constexpr int kMaxRN = kWideRegisters ? 3 : 2;

  // Q2_K with kScaledDots: run j's 2 bits where they lie, 4^j times the weight (no shift; the tail
  // divides 4^j out of the scale).
  static constexpr bool kScaledRuns = kScaledDots && !kThird;

  // Run j's weights of qs word qw: its 2 bits (shifted down by 2j; kScaledRuns: in place), Q3_K
  // with its hmask bit 4h + j of hw moved to bit 2 (one shift, one OrAnd).
  template <int h, int j>
  static HWY_INLINE VU Run(VU qw, VU hw) {
    const DU du;
    const VU m2 = hn::Set(du, 0x03030303u);
    if constexpr (kScaledRuns) {
      (void)hw;
      return hn::And(qw, hn::Set(du, 0x03030303u << (2 * j)));
    }
    const VU lo = j == 0 ? qw : hn::ShiftRight<2 * j>(qw);
    if constexpr (kThird) {
      return hn::OrAnd(hn::And(MoveBit<4 * h + j, 2>(hw), hn::Set(du, 0x04040404u)), lo, m2);
    } else {
      (void)hw;
      return hn::And(lo, m2);
    }
  }

  // Half h, quads 4e .. 4e + 3 of each 32-column run j (columns 128h + 32j + 16e ..: sub-block
  // 8h + 2j + e) into A (and Q2_K's M). s0, s1: the scale bytes of sub-blocks 8h .. 8h + 3 and
  // 8h + 4 .. 8h + 7 (Q3_K: the 6-bit scales; Q2_K: scale and min nibbles).
  template <int h, int e, int RN>
  static HWY_INLINE void Quarter(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                                 const int8_t* const* xq, const int16_t* const* xs, VU s0, VU s1, VF* A, VF* M) {
    const DI di;
    const DU du;
    const DF df;
    VI is[4][RN];
    ZeroRunSums(is);
    HWY_UNROLL(4)
    for (int q = 4 * e; q < 4 * e + 4; ++q) {
      VU qw = Words(blk, 0, 8 * h + q, lane0);
      VU hw = kThird ? Words(blk, kQ3KGroupHmask, q, lane0) : qw;
      PrefetchLine(pf, 64 * (8 * h + q), qw);
      if constexpr (kThird) {
        if (h == 0) PrefetchLine(pf, kQ3KGroupHmask + 64 * q, hw);
        if (h == 1 && e == 0 && q < 3) PrefetchLine(pf, kScales + 64 * q, qw);  // the scales' 3 lines
        if (h == 1 && e == 0 && q == 3) PrefetchLine(pf, kD, qw);                // and d's
      } else {
        if (h == 0 && e == 0) PrefetchLine(pf, kScales + 64 * q, qw);  // the scales' 4 lines
        if (h == 0 && e == 1 && q == 4) PrefetchLine(pf, kD, qw);      // and d's and dmin's
      }
      const VU w[4] = {Run<h, 0>(qw, hw), Run<h, 1>(qw, hw), Run<h, 2>(qw, hw), Run<h, 3>(qw, hw)};
      for (int u = 0; u < RN; ++u) {
        const int8_t* x = xq[u] + 128 * h + 4 * q;
        for (int j = 0; j < 4; ++j) is[j][u] = QuadPartAt(is[j][u], w[j], x + 32 * j);
      }
    }
    // Run j's sub-block 8h + 2j + e: byte 2 (j % 2) + e of s0 (j < 2) or s1.
    const VU b[4] = {Byte<e>(s0), Byte<2 + e>(s0), Byte<e>(s1), Byte<2 + e>(s1)};
    for (int j = 0; j < 4; ++j) {
      if constexpr (kThird) {
        const VF sc = hn::ConvertTo(df, hn::Sub(hn::BitCast(di, b[j]), hn::Set(di, 32)));
        for (int u = 0; u < RN; ++u) {
          const int32_t zero = 4 * xs[u][8 * h + 2 * j + e];
          A[u] = hn::MulAdd(hn::ConvertTo(df, hn::Sub(QuadSum(is[j][u]), hn::Set(di, zero))), sc, A[u]);
        }
      } else {
        VF sc = hn::ConvertTo(df, hn::BitCast(di, hn::And(b[j], hn::Set(du, 0x0Fu))));
        if (kScaledRuns && j > 0) sc = hn::Mul(sc, hn::Set(df, 1.0f / static_cast<float>(1 << (2 * j))));
        const VF mn = hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<4>(b[j])));
        for (int u = 0; u < RN; ++u) {
          A[u] = hn::MulAdd(hn::ConvertTo(df, QuadSum(is[j][u])), sc, A[u]);
          M[u] = hn::MulAdd(mn, hn::Set(df, static_cast<float>(xs[u][8 * h + 2 * j + e])), M[u]);
        }
      }
    }
  }

  template <int RN>
  static HWY_INLINE void Super(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                               const int8_t* const* xq, const int16_t* const* xs, const int32_t* const* /*xw*/, const float* const* dx,
                               VF* acc) {
    const DU du;
    const DF df;
    const DH dh;
    // S[k]: the scale bytes of sub-blocks 4k .. 4k + 3. Q2_K: the 4 words as stored. Q3_K: its 6-bit
    // scales (q3_k_scale) unpacked: low 4 bits in bytes 0..7 (low nibbles: sub-blocks 0..7, high
    // nibbles: 8..15), high 2 bits in bits 2 (i / 4) of byte 8 + i % 4.
    VU S[4];
    if constexpr (kThird) {
      const VU u0 = Words(blk, kScales, 0, lane0), u1 = Words(blk, kScales, 1, lane0), u2 = Words(blk, kScales, 2, lane0);
      const VU m4 = hn::Set(du, 0x0F0F0F0Fu), hi2 = hn::Set(du, 0x30303030u);
      S[0] = hn::Or(hn::And(u0, m4), hn::And(hn::ShiftLeft<4>(u2), hi2));
      S[1] = hn::Or(hn::And(u1, m4), hn::And(hn::ShiftLeft<2>(u2), hi2));
      S[2] = hn::Or(hn::And(hn::ShiftRight<4>(u0), m4), hn::And(u2, hi2));
      S[3] = hn::Or(hn::And(hn::ShiftRight<4>(u1), m4), hn::And(hn::ShiftRight<2>(u2), hi2));
    } else {
      for (int k = 0; k < 4; ++k) S[k] = Words(blk, kScales, static_cast<size_t>(k), lane0);
    }
    VF A[RN], M[RN];
    for (int u = 0; u < RN; ++u) {
      A[u] = hn::Zero(df);
      M[u] = hn::Zero(df);
    }
    Quarter<0, 0, RN>(blk, pf, lane0, xq, xs, S[0], S[1], A, M);
    Quarter<0, 1, RN>(blk, pf, lane0, xq, xs, S[0], S[1], A, M);
    Quarter<1, 0, RN>(blk, pf, lane0, xq, xs, S[2], S[3], A, M);
    Quarter<1, 1, RN>(blk, pf, lane0, xq, xs, S[2], S[3], A, M);
    const VF d = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kD) + lane0));
    VF dmin = hn::Zero(df);
    if constexpr (!kThird) dmin = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + kQ2KGroupDmin) + lane0));
    for (int u = 0; u < RN; ++u) {
      const VF x = hn::Set(df, dx[u][0]);
      acc[u] = hn::MulAdd(A[u], hn::Mul(d, x), acc[u]);
      if constexpr (!kThird) acc[u] = hn::NegMulAdd(M[u], hn::Mul(dmin, x), acc[u]);
    }
  }
};
using Q2K = Q2KOr3K<false>;
using Q3K = Q2KOr3K<true>;

// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (quant_groups.h: pairs of blocks of 32): per block the exact integer dot
// (B::Dots), minus B::kZero · Σ x (the block's two 16-sums), then acc = fma(float(that), d_w · d_x,
// acc), and for Q4_1/Q5_1 (B::kMins) acc = fma(m_w, d_x · Σ x, acc); block after block.
//   Q8_0 (Q8Dots): SignedDot of the signed quants; zero point 128 where the dot was biased.
//   Q4_0 (Q4Dots<false>): the nibbles (0..15; low nibbles: columns 0..15, high: 16..31) in QuadPart's
//   partial sums (eight dots of pairs <= 2·15·127); zero point 8.
//   Q4_1 (Q4Dots<true>): Q4_0's dots without a zero point, and the block's min m.
//   Q5_0 and Q5_1 (Q5Dots, below): with a fifth bit.
struct Q8Dots {
  static constexpr uint64_t kPair = kQ8GroupPair, kD = kQ8GroupD, kQs = 512;  // kQs: one block's quants
  static constexpr int32_t kZero = kBiasedSigned ? 128 : 0;
  static constexpr uint64_t kMins = 0;
  template <int RN>
  static HWY_INLINE void Dots(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0, const int8_t* const* xq,
                              int k, VI* is) {
    HWY_UNROLL(8)
    for (int v = 0; v < 8; ++v) {
      VU w = Words(blk, kQs * k, v, lane0);
      PrefetchLine(pf, kQs * k + 64 * v, w);
      for (int u = 0; u < RN; ++u) is[u] = SignedDotAt(is[u], w, xq[u] + 32 * k + 4 * v);
    }
  }
  static HWY_INLINE VI Total(VI v) { return v; }
};
template <bool kMin>
struct Q4Dots {
  static constexpr uint64_t kPair = kMin ? kQ41GroupPair : kQ40GroupPair, kD = kMin ? kQ41GroupD : kQ40GroupD, kQs = 256;
  static constexpr int32_t kZero = kMin ? 0 : 8;
  static constexpr uint64_t kMins = kMin ? kQ41GroupM : 0;  // offset of the mins (0: none)
  template <int RN>
  static HWY_INLINE void Dots(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0, const int8_t* const* xq,
                              int k, VI* is) {
    const VU low4 = hn::Set(DU(), 0x0F0F0F0Fu);
    HWY_UNROLL(4)
    for (int v = 0; v < 4; ++v) {
      VU w = Words(blk, kQs * k, v, lane0);
      PrefetchLine(pf, kQs * k + 64 * v, w);
      const VU lo = hn::And(w, low4), hi = hn::And(hn::ShiftRight<4>(w), low4);
      for (int u = 0; u < RN; ++u) {
        is[u] = QuadPartAt(is[u], lo, xq[u] + 32 * k + 4 * v);
        is[u] = QuadPartAt(is[u], hi, xq[u] + 32 * k + 16 + 4 * v);
      }
    }
  }
  static HWY_INLINE VI Total(VI v) { return QuadSum(v); }
};

template <class B>
struct BlockPairs {
  static constexpr uint64_t kBlock = B::kPair, kTail = B::kD;
  static constexpr int64_t kUnitCols = 64;
  static constexpr int kMaxRN = kWideRegisters ? 4 : 2;

  template <int RN>
  static HWY_INLINE void Super(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0,
                               const int8_t* const* xq, const int16_t* const* xs, const int32_t* const* /*xw*/, const float* const* dx,
                               VF* acc) {
    const DI di;
    const DF df;
    const DH dh;
    HWY_UNROLL(2)
    for (int k = 0; k < 2; ++k) {
      VI is[RN];
      for (int u = 0; u < RN; ++u) is[u] = hn::Zero(di);
      B::template Dots<RN>(blk, pf, lane0, xq, k, is);
      const VF d = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + B::kD + 32 * k) + lane0));
      for (int u = 0; u < RN; ++u) {
        VI i = B::Total(is[u]);
        if constexpr (B::kZero != 0) i = hn::Sub(i, hn::Set(di, B::kZero * (xs[u][2 * k] + xs[u][2 * k + 1])));
        acc[u] = hn::MulAdd(hn::ConvertTo(df, i), hn::Mul(d, hn::Set(df, dx[u][k])), acc[u]);
      }
      if constexpr (B::kMins != 0) {
        const VF m =
            hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk + B::kMins + 32 * k) + lane0));
        for (int u = 0; u < RN; ++u) {
          const float sx = dx[u][k] * static_cast<float>(xs[u][2 * k] + xs[u][2 * k + 1]);
          acc[u] = hn::MulAdd(m, hn::Set(df, sx), acc[u]);
        }
      }
    }
  }
};
using Q8 = BlockPairs<Q8Dots>;
// Q5_0 and Q5_1: Q4_0's and Q4_1's on 5-bit weights, recoded at load as Q5_K's (quant_groups.h):
// byte i of qs word v holds column 4v + i's weight in bits 0-4 and bits 2-4 of column 16 + 4v + i's
// in bits 5-7; byte i of the y word (where qh was) that weight's bits 0-1 in bits 2v, 2v + 1.
// Weights up to 31 take DotQuads (int32).
template <bool kMin>
struct Q5Dots {
  static constexpr uint64_t kPair = kMin ? kQ51GroupPair : kQ50GroupPair, kD = kMin ? kQ51GroupD : kQ50GroupD, kQs = 256;
  static constexpr uint64_t kQh = kMin ? kQ51GroupQh : kQ50GroupQh;
  static constexpr int32_t kZero = kMin ? 0 : 16;
  static constexpr uint64_t kMins = kMin ? kQ51GroupM : 0;
  template <int RN>
  static HWY_INLINE void Dots(const uint8_t* HWY_RESTRICT blk, const uint8_t* pf, size_t lane0, const int8_t* const* xq,
                              int k, VI* is) {
    const DU du;
    const VU y = Words(blk, kQh + 64 * static_cast<uint64_t>(k), 0, lane0);
    HWY_UNROLL(4)
    for (int v = 0; v < 4; ++v) {
      VU w = Words(blk, kQs * k, v, lane0);
      PrefetchLine(pf, kQs * k + 64 * v, w);
      const VU lo = hn::And(w, hn::Set(du, 0x1F1F1F1Fu));
      const VU hi = hn::OrAnd(hn::And(hn::ShiftRight<3>(w), hn::Set(du, 0x1C1C1C1Cu)),
                              hn::ShiftRightSame(y, 2 * v), hn::Set(du, 0x03030303u));
      for (int u = 0; u < RN; ++u) {
        is[u] = DotQuadsAt(is[u], lo, xq[u] + 32 * k + 4 * v);
        is[u] = DotQuadsAt(is[u], hi, xq[u] + 32 * k + 16 + 4 * v);
      }
    }
  }
  static HWY_INLINE VI Total(VI v) { return v; }
};

using Q40 = BlockPairs<Q4Dots<false>>;
using Q41 = BlockPairs<Q4Dots<true>>;
using Q50 = BlockPairs<Q5Dots<false>>;
using Q51 = BlockPairs<Q5Dots<true>>;

// Group rows [lane0, lane0 + Lanes) of one group (`group`: its first super-block) against tokens
// t .. t + RN - 1; y[u · ys + i] for lane i < rows_out (rows of the group that exist and are asked).
// The first lane block prefetches `ahead` bytes ahead of the stream where kPf (ahead > 0).
template <class F, int RN, bool kPf>
HWY_NOINLINE void Tile(const uint8_t* HWY_RESTRICT group, int64_t nsb, const QuantActs& a, int64_t t, size_t lane_block,
                       float* HWY_RESTRICT y, size_t ys, size_t rows_out, size_t ahead) {
  const DF df;
  // A vector of 16 lanes holds the whole group: lane0 is 0, a constant, so that every load's address
  // is the unit's start plus a constant (with lane0 unknown, GCC kept per-line bases in spare
  // vector registers and moved them back for each load: ~50 more uops per Q6_K super-block).
  const size_t lane0 = hn::MaxLanes(df) >= static_cast<size_t>(kQuantGroupRows) ? 0 : lane_block;
  const int64_t K = a.cols;
  VF acc[RN];
  for (int u = 0; u < RN; ++u) acc[u] = hn::Zero(df);
  const int8_t* xq[RN];
  const int16_t* xs[RN];
  const int32_t* xw[RN] = {};
  const float* dx[RN];
  constexpr int64_t C = F::kUnitCols;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* blk = group + static_cast<size_t>(s) * F::kBlock;
    // The first lane block streams the group from memory (the others find it in cache): one L2
    // prefetch `ahead` bytes ahead per line (kPf), spread between the loads (Super) rather than
    // all of a super-block's at once, which filled the core's miss buffers and kept the arithmetic
    // from overlapping the stream (llama-1b Q4_K on the Xeon VM: 37-39 tok/s in bursts, 47 spread;
    // into L1 29).
    // (On 16-lane targets lane0 is the constant 0, and the null checks compile away; without kPf pf is
    // the constant null, and so are the prefetches.)
    const uint8_t* pf = kPf && lane0 == 0 ? blk + ahead : nullptr;
    if (pf != nullptr) {
      for (size_t line = F::kTail; line < F::kBlock; line += 64) __builtin_prefetch(pf + line, 0, 2);
    }
    for (int u = 0; u < RN; ++u) {
      xq[u] = a.qs + (t + u) * K + C * s;
      xs[u] = a.sums + (t + u) * (K / 16) + C / 16 * s;
      if constexpr (C == 256) xw[u] = a.words + ((t + u) * (K / 256) + s) * QuantActs::kActWords;
      dx[u] = a.d + (t + u) * (K / a.block) + C / a.block * s;
    }
    F::template Super<RN>(blk, pf, lane0, xq, xs, xw, dx, acc);
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

// y[t][r] for t < n, r0 <= r < r1 over a matrix of format F in groups (r0 a multiple of the group),
// prefetching `ahead` bytes ahead of the stream (0: none).
template <class F, int... RNs>
void RunGroups(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1, size_t ahead,
               std::integer_sequence<int, RNs...>) {
  using Fn = void (*)(const uint8_t*, int64_t, const QuantActs&, int64_t, size_t, float*, size_t, size_t, size_t);
  static constexpr Fn kPfTiles[] = {&Tile<F, RNs + 1, true>...};
  static constexpr Fn kHwTiles[] = {&Tile<F, RNs + 1, false>...};
  const Fn* kTiles = ahead > 0 ? kPfTiles : kHwTiles;
  const int64_t G = kQuantGroupRows;
  const int64_t nsb = w.cols / F::kUnitCols;  // units: super-blocks, or Q8_0's pairs of blocks
  const size_t ys = static_cast<size_t>(w.rows);
  const auto N = static_cast<int64_t>(hn::Lanes(DF()));
  // Tokens per block: their activations stay in L1/L2 while the groups go by.
  const int64_t tb = std::max<int64_t>(F::kMaxRN, (128 * 1024) / w.cols / F::kMaxRN * F::kMaxRN);
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    const int64_t t1 = std::min(n, t0 + tb);
    for (int64_t g0 = r0; g0 < r1; g0 += G) {
      const uint8_t* group = w.data + static_cast<uint64_t>(g0) * w.row_bytes;
      for (int64_t l = 0; l < G && g0 + l < r1; l += N) {
        const auto rows_out = static_cast<size_t>(std::min<int64_t>(N, r1 - g0 - l));
        for (int64_t t = t0; t < t1; t += F::kMaxRN) {
          const int rn = static_cast<int>(std::min<int64_t>(F::kMaxRN, t1 - t));
          kTiles[rn - 1](group, nsb, a, t, static_cast<size_t>(l), y + t * w.rows + g0 + l, ys, rows_out, ahead);
        }
      }
    }
  }
}

// RunGroups with a tile for every token count up to F::kMaxRN, and w's type's GroupPrefetch.
template <class F>
void Run(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1) {
  const int slot = group_prefetch_slot_or_none(w.type);
  const size_t ahead = PrefetchAhead(g_group_prefetch[slot].load(std::memory_order_relaxed));
  RunGroups<F>(w, a, n, y, r0, r1, ahead, std::make_integer_sequence<int, F::kMaxRN>());
}

}  // namespace qg

// y[t][r] for t < n, r0 <= r < r1 over a quantized matrix in groups (r0 a multiple of the group).
HWY_NOINLINE void MatmulQuantGroups(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0,
                                    int64_t r1) {
  switch (w.type) {
    case GgmlType::kQ2_K: return qg::Run<qg::Q2K>(w, a, n, y, r0, r1);
    case GgmlType::kQ3_K: return qg::Run<qg::Q3K>(w, a, n, y, r0, r1);
    case GgmlType::kQ4_K: return qg::Run<qg::Q4K>(w, a, n, y, r0, r1);
    case GgmlType::kQ5_K: return qg::Run<qg::Q5K>(w, a, n, y, r0, r1);
    case GgmlType::kQ6_K: return qg::Run<qg::Q6K>(w, a, n, y, r0, r1);
    case GgmlType::kQ4_0: return qg::Run<qg::Q40>(w, a, n, y, r0, r1);
    case GgmlType::kQ4_1: return qg::Run<qg::Q41>(w, a, n, y, r0, r1);
    case GgmlType::kQ5_0: return qg::Run<qg::Q50>(w, a, n, y, r0, r1);
    case GgmlType::kQ5_1: return qg::Run<qg::Q51>(w, a, n, y, r0, r1);
    default: return qg::Run<qg::Q8>(w, a, n, y, r0, r1);  // Q8_0 (quant_groups_supported's last type)
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
