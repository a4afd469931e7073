// Portable (Highway) quantized dot kernels for every quantized type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K..Q6_K): one weight row against the int8 activations (QuantActs) of one token or four (each
// weight vector unpacked once for the four), or, for one token, four rows of a K-quant side by side;
// for every Highway target. matmul_quant.cpp uses them on every target without its own x86
// intrinsics path (NEON, SVE, EMU128/SCALAR, ...), and on x86 when
// forced (set_quant_highway_forced / STRATA_QUANT_HWY=1: tests and benchmarks).
//
// Arithmetic per output, the same for any tile, batch or thread count (so a token alone gives the
// bits it gives in a batch): per block, the exact integer dot of the unpacked weights (times their
// sub-block scales, in int16) with the int8 activations, widened to int32 pairs
// (ReorderWidenMulAccumulate); then one f32 multiply-add of that block sum (times d_w · d_x) into
// the lanes of an f32 accumulator; at the end one fixed lane sum (SumOfLanes). Q4_K's mins go through
// the activations' 16-sums into a scalar f32 term. Exact integers: |w·scale| <= 32·128 in int16,
// a super-block's int32 sum stays below 2^28.
//
// Weights are unpacked in int16 lanes, at most 32 per vector (16 for Q4_0, whose 16 bytes hold a block): 1 lane on SCALAR, 8 on NEON/EMU128,
// 16 on AVX2, 32 on AVX-512 (SVE: its vector length, up to 32).
// Included once per Highway target (foreach_target); thread-safety: pure functions.

#if defined(STRATA_BACKEND_CPU_MATMUL_QUANT_HWY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_BACKEND_CPU_MATMUL_QUANT_HWY_INL_H_
#undef STRATA_BACKEND_CPU_MATMUL_QUANT_HWY_INL_H_
#else
#define STRATA_BACKEND_CPU_MATMUL_QUANT_HWY_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>

#include "backend/cpu/decode_order.h"
#include "backend/cpu/matmul_quant.h"
#include "core/fp16.h"
#include "gguf/quant_blocks.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace hq {

// The same prefetch distance as the x86 tiles (see kPrefetchBytes in matmul_quant.cpp).
constexpr size_t kPrefetch = 8192;
HWY_INLINE void Prefetch(const uint8_t* p) { __builtin_prefetch(p + kPrefetch, 0, 3); }

// One f16 scale to f32 with the target's conversion (F16C, fcvt; software on SCALAR/EMU128).
HWY_INLINE float HalfAt(const uint8_t* p) {
  const hn::CappedTag<float, 1> df1;
  const hn::Rebind<hwy::float16_t, decltype(df1)> dh1;
  return hn::GetLane(hn::PromoteTo(df1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Scales and mins of Q4_K packed 6-bit values, as bytes: sc[0..7] then m[0..7].
HWY_INLINE void ScalesMinsK4(const uint8_t* packed, uint8_t* out16) {
  constexpr uint32_t kMask1 = 0x3f3f3f3f, kMask2 = 0x0f0f0f0f, kMask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kMask2) | (((u[1] >> 6) & kMask3) << 4);
  const uint32_t aux = u[1] & kMask1;
  u[1] = (u[2] & kMask2) | (((u[0] >> 6) & kMask3) << 4);
  u[2] = aux;
  u[0] &= kMask1;
  std::memcpy(out16, u, 16);
}

// Tags: int16 weight lanes (at most kCap), their int32 pair sums, and f32 of the same lane count.
template <size_t kCap>
struct Tags {
  using D16 = hn::CappedTag<int16_t, kCap>;
  using D32 = hn::Repartition<int32_t, D16>;
  using DF = hn::Rebind<float, D32>;
  using D8 = hn::Rebind<int8_t, D16>;
  using DU8 = hn::Rebind<uint8_t, D16>;
  D16 d16;
  D32 d32;
  DF df;
  D8 d8;
  DU8 du8;
};

// Activations, widened to int16 once per token (WidenActs) and shared by all rows.
template <class T>
HWY_INLINE auto LoadX(const T& tg, const int16_t* p) {
  return hn::LoadU(tg.d16, p);
}
template <class T>
HWY_INLINE auto LoadU8(const T& tg, const uint8_t* p) {
  return hn::BitCast(tg.d16, hn::PromoteTo(hn::RebindToUnsigned<decltype(tg.d16)>(), hn::LoadU(tg.du8, p)));
}

// The fifth bits of weights i .. i + lanes - 1 of a 16-weight half of a Q5_0/Q5_1 block (`half` = its
// 16 bits of qh), as 16 in int16 lanes where set.
template <class T>
HWY_INLINE auto FifthBits16(const T& tg, uint32_t half, size_t i) {
  const hn::RebindToUnsigned<decltype(tg.d16)> du16;
  const auto shifted = hn::Shr(hn::Set(du16, static_cast<uint16_t>(half)),
                               hn::Add(hn::Iota(du16, 0), hn::Set(du16, static_cast<uint16_t>(i))));
  return hn::BitCast(tg.d16, hn::ShiftLeft<4>(hn::And(shifted, hn::Set(du16, 1))));
}

// Blocks of 32 weights with an f16 scale d at offset 0. Q8_0 (kQs8): 32 signed bytes. The others:
// nibbles as Q4_0 (weights 0..15 low, 16..31 high), an optional fifth bit (Q5_0/Q5_1: bit e of the
// 32 bits at kQh) and zero point kZero (Q4_0 8, Q5_0 16), or a min at kMin (Q4_1/Q5_1: w = d·q + m,
// through the activations' 16-sums). kQh/kMin: 0 without.
template <size_t kBytesT, size_t kQs, size_t kQh, size_t kMin, int kZero, bool kQs8 = false>
struct Legacy {
  using TG = Tags<kQs8 ? 32 : 16>;
  static constexpr size_t kBytes = kBytesT;
  static constexpr bool kMins = kMin != 0;
  static constexpr size_t kMinAt = kMin;
  // Each weight vector (int16) with the activation offset it multiplies: sink(w, offset).
  template <class Sink>
  static HWY_INLINE void Ints(const uint8_t* HWY_RESTRICT blk, Sink&& sink) {
    const TG tg;
    using V16 = hn::Vec<decltype(tg.d16)>;
    const size_t N = hn::Lanes(tg.d16);
    if constexpr (kQs8) {
      const auto* q = reinterpret_cast<const int8_t*>(blk + kQs);
      for (size_t i = 0; i < 32; i += N) sink(hn::PromoteTo(tg.d16, hn::LoadU(tg.d8, q + i)), i);
    } else {
      const V16 low4 = hn::Set(tg.d16, 0x0F), zero_point = hn::Set(tg.d16, kZero);
      uint32_t qh = 0;
      if constexpr (kQh != 0) std::memcpy(&qh, blk + kQh, 4);
      for (size_t i = 0; i < 16; i += N) {
        const V16 q = LoadU8(tg, blk + kQs + i);
        V16 lo = hn::And(q, low4), hi = hn::ShiftRight<4>(q);
        if constexpr (kQh != 0) {
          lo = hn::Or(lo, FifthBits16(tg, qh & 0xFFFFu, i));
          hi = hn::Or(hi, FifthBits16(tg, qh >> 16, i));
        }
        sink(hn::Sub(lo, zero_point), i);
        sink(hn::Sub(hi, zero_point), 16 + i);
      }
    }
  }
};
using LQ8_0 = Legacy<sizeof(BlockQ8_0), offsetof(BlockQ8_0, qs), 0, 0, 0, true>;
using LQ4_0 = Legacy<sizeof(BlockQ4_0), offsetof(BlockQ4_0, qs), 0, 0, 8>;
using LQ4_1 = Legacy<sizeof(BlockQ4_1), offsetof(BlockQ4_1, qs), 0, offsetof(BlockQ4_1, m), 0>;
using LQ5_0 = Legacy<sizeof(BlockQ5_0), offsetof(BlockQ5_0, qs), offsetof(BlockQ5_0, qh), 0, 16>;
using LQ5_1 = Legacy<sizeof(BlockQ5_1), offsetof(BlockQ5_1, qs), offsetof(BlockQ5_1, qh), offsetof(BlockQ5_1, m), 0>;

// One row of blocks of 32 against T tokens (1 or 4; token c's activations at xq + c·K, xs + c·K/16,
// xd + c·nb): out[c · stride]. Per token and block: the exact integer dot, one f32 multiply-add of
// it times d·dx into the lanes, the min term (if any) into a scalar; one lane sum at the end. The
// same sequence per token whatever T is.
template <class L, int T>
HWY_INLINE void LegacyDot(const uint8_t* HWY_RESTRICT row, int64_t nb, int64_t K, const int16_t* HWY_RESTRICT xq,
                          const int16_t* HWY_RESTRICT xs, const float* HWY_RESTRICT xd, float* out, size_t stride) {
  static_assert(T == 1 || T == 4, "one or four tokens");
  const typename L::TG tg;
  const auto uk = static_cast<size_t>(K), un = static_cast<size_t>(nb);
  auto acc0 = hn::Zero(tg.df), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  float macc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + static_cast<size_t>(b) * L::kBytes;
    Prefetch(blk);
    const int16_t* x = xq + 32 * b;
    auto a0 = hn::Zero(tg.d32), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    L::Ints(blk, [&](auto w, size_t off) {
      a0 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + off), a0, b0);
      if constexpr (T == 4) {
        a1 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + uk + off), a1, b1);
        a2 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + 2 * uk + off), a2, b2);
        a3 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + 3 * uk + off), a3, b3);
      }
    });
    const float d = HalfAt(blk);
    acc0 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a0, b0)), hn::Set(tg.df, d * xd[b]), acc0);
    if constexpr (T == 4) {
      acc1 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a1, b1)), hn::Set(tg.df, d * xd[un + b]), acc1);
      acc2 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a2, b2)), hn::Set(tg.df, d * xd[2 * un + b]), acc2);
      acc3 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a3, b3)), hn::Set(tg.df, d * xd[3 * un + b]), acc3);
    }
    if constexpr (L::kMins) {
      const float m = HalfAt(blk + L::kMinAt);
      for (int c = 0; c < T; ++c) {
        const int16_t* s = xs + static_cast<size_t>(c) * (uk / 16) + 2 * b;
        macc[c] += m * xd[static_cast<size_t>(c) * un + b] * static_cast<float>(s[0] + s[1]);
      }
    }
  }
  out[0] = hn::GetLane(hn::SumOfLanes(tg.df, acc0)) + macc[0];
  if constexpr (T == 4) {
    out[stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc1)) + macc[1];
    out[2 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc2)) + macc[2];
    out[3 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc3)) + macc[3];
  }
}

// Q4_K: super-blocks of 256 = 8 sub-blocks of 32 unsigned 4-bit weights with 6-bit scales and
// mins; 32 bytes of qs hold sub-block 2j (low nibbles) and 2j+1 (high nibbles). Q5_K (kFifth):
// the same with a fifth bit, bit 2j of qh[l] for weight l of sub-block 2j and bit 2j+1 for 2j+1.
template <class Block, bool kFifth>
struct KQ4Or5 {
  using TG = Tags<32>;
  static constexpr size_t kBytes = sizeof(Block);
  static constexpr bool kMins = true;
  // Each unpacked weight vector (times its sub-block's scale, int16) with the activation offset it
  // multiplies: sink(w, offset).
  template <class Sink>
  static HWY_INLINE void Ints(const uint8_t* HWY_RESTRICT blk, Sink&& sink) {
    const TG tg;
    using V16 = hn::Vec<decltype(tg.d16)>;
    const size_t N = hn::Lanes(tg.d16);
    const V16 low4 = hn::Set(tg.d16, 0x0F), one = hn::Set(tg.d16, 1);
    uint8_t sm[16];
    ScalesMinsK4(blk + offsetof(Block, scales), sm);
    const uint8_t* qs = blk + offsetof(Block, qs);
    for (int j = 0; j < 4; ++j) {
      const V16 slo = hn::Set(tg.d16, static_cast<int16_t>(sm[2 * j]));
      const V16 shi = hn::Set(tg.d16, static_cast<int16_t>(sm[2 * j + 1]));
      for (size_t i = 0; i < 32; i += N) {
        const V16 q = LoadU8(tg, qs + 32 * j + i);
        V16 lo = hn::And(q, low4), hi = hn::ShiftRight<4>(q);
        if constexpr (kFifth) {
          const V16 hb = LoadU8(tg, blk + offsetof(Block, qh) + i);
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(hb, 2 * j), one)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(hb, 2 * j + 1), one)));
        }
        sink(hn::Mul(lo, slo), 64 * j + i);
        sink(hn::Mul(hi, shi), 64 * j + 32 + i);
      }
    }
  }
  static HWY_INLINE float Scale(const uint8_t* blk) { return HalfAt(blk + offsetof(Block, d)); }
  static HWY_INLINE float MinScale(const uint8_t* blk) { return -HalfAt(blk + offsetof(Block, dmin)); }
  // The min of each group of 16 weights (a sub-block of 32's min twice).
  static HWY_INLINE void Mins16(const uint8_t* blk, int32_t* m16) {
    uint8_t sm[16];
    ScalesMinsK4(blk + offsetof(Block, scales), sm);
    for (int s = 0; s < 8; ++s) m16[2 * s] = m16[2 * s + 1] = sm[8 + s];
  }
};
using KQ4 = KQ4Or5<BlockQ4_K, false>;
using KQ5 = KQ4Or5<BlockQ5_K, true>;

// Q2_K and Q3_K (kThird): 16 sub-blocks of 16 weights with h, j, l as in quant_blocks.h: q = the 2
// bits of qs[32h + l] at 2j, for Q3_K | bit 4h + j of hmask[l] << 2, minus 4; times the sub-block's
// scale (Q2_K: the low nibble of scales[s], its high nibble a min taken through the activations'
// 16-sums as Q4_K's; Q3_K: q3_k_scale - 32).
template <class Block, bool kThird>
struct KQ2Or3 {
  using TG = Tags<32>;
  static constexpr size_t kBytes = sizeof(Block);
  static constexpr bool kMins = !kThird;
  template <class Sink>
  static HWY_INLINE void Ints(const uint8_t* HWY_RESTRICT blk, Sink&& sink) {
    const TG tg;
    using V16 = hn::Vec<decltype(tg.d16)>;
    const size_t N = hn::Lanes(tg.d16);
    const V16 low2 = hn::Set(tg.d16, 3), one = hn::Set(tg.d16, 1), zero_point = hn::Set(tg.d16, kThird ? 4 : 0);
    const uint8_t* qs = blk + offsetof(Block, qs);
    const uint8_t* scales = blk + offsetof(Block, scales);
    int16_t sc[16];
    for (int i = 0; i < 16; ++i) {
      sc[i] = static_cast<int16_t>(kThird ? q3_k_scale(i, scales) - 32 : scales[i] & 0xF);
    }
    const auto iota = hn::Iota(tg.d16, 0);  // lanes l + i < 16 take a pair's first scale (as KQ6)
    for (int h = 0; h < 2; ++h) {
      for (size_t l = 0; l < 32; l += N) {
        const auto first = hn::Lt(hn::Add(iota, hn::Set(tg.d16, static_cast<int16_t>(l))), hn::Set(tg.d16, 16));
        const V16 lo = LoadU8(tg, qs + 32 * h + l);
        V16 hb = hn::Zero(tg.d16);
        if constexpr (kThird) hb = LoadU8(tg, blk + offsetof(Block, hmask) + l);
        for (int j = 0; j < 4; ++j) {
          V16 q = hn::And(hn::ShiftRightSame(lo, 2 * j), low2);
          if constexpr (kThird) q = hn::Or(q, hn::ShiftLeft<2>(hn::And(hn::ShiftRightSame(hb, 4 * h + j), one)));
          const int s = 8 * h + 2 * j;
          const V16 scale = hn::IfThenElse(first, hn::Set(tg.d16, sc[s]), hn::Set(tg.d16, sc[s + 1]));
          sink(hn::Mul(hn::Sub(q, zero_point), scale), 128 * h + 32 * j + l);
        }
      }
    }
  }
  static HWY_INLINE float Scale(const uint8_t* blk) { return HalfAt(blk + offsetof(Block, d)); }
  // Q2_K only (kMins): -dmin, and the min of each sub-block of 16 (high nibble of its scale byte).
  static HWY_INLINE float MinScale(const uint8_t* blk) { return -HalfAt(blk + offsetof(Block, dmin)); }
  static HWY_INLINE void Mins16(const uint8_t* blk, int32_t* m16) {
    for (int i = 0; i < 16; ++i) m16[i] = blk[offsetof(Block, scales) + i] >> 4;
  }
};
using KQ2 = KQ2Or3<BlockQ2_K, false>;
using KQ3 = KQ2Or3<BlockQ3_K, true>;

// Q6_K: super-blocks of 256 = 16 sub-blocks of 16 signed 6-bit weights (zero point 32) with int8
// scales. Half h (128 weights): weight l (0..31) of group g (0..3) is
// (ql[64h + 32(g&1) + l] >> 4(g>>1)) & 15 | ((qh[32h + l] >> 2g) & 3) << 4, scale sc[8h + 2g + l/16].
struct KQ6 {
  using TG = Tags<32>;
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kMins = false;
  template <class Sink>
  static HWY_INLINE void Ints(const uint8_t* HWY_RESTRICT blk, Sink&& sink) {
    const TG tg;
    using V16 = hn::Vec<decltype(tg.d16)>;
    const size_t N = hn::Lanes(tg.d16);
    const V16 low4 = hn::Set(tg.d16, 0x0F), low2 = hn::Set(tg.d16, 3), zero_point = hn::Set(tg.d16, 32);
    const uint8_t* ql = blk + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = blk + offsetof(BlockQ6_K, qh);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
    // Lanes l + i < 16 take the first scale of a group's pair, the others the second (a vector of
    // more than 16 lanes holds both sub-blocks).
    const auto iota = hn::Iota(tg.d16, 0);
    for (int h = 0; h < 2; ++h) {
      for (size_t l = 0; l < 32; l += N) {
        const auto first = hn::Lt(hn::Add(iota, hn::Set(tg.d16, static_cast<int16_t>(l))), hn::Set(tg.d16, 16));
        const V16 l0 = LoadU8(tg, ql + 64 * h + l);
        const V16 l1 = LoadU8(tg, ql + 64 * h + 32 + l);
        const V16 hb = LoadU8(tg, qh + 32 * h + l);
        // (No arrays of vectors: SVE's are sizeless.)
        const auto group = [&](V16 q, int g) {
          const V16 scale = hn::IfThenElse(first, hn::Set(tg.d16, static_cast<int16_t>(sc[8 * h + 2 * g])),
                                           hn::Set(tg.d16, static_cast<int16_t>(sc[8 * h + 2 * g + 1])));
          sink(hn::Mul(hn::Sub(q, zero_point), scale), 128 * h + 32 * g + l);
        };
        group(hn::Or(hn::And(l0, low4), hn::ShiftLeft<4>(hn::And(hb, low2))), 0);
        group(hn::Or(hn::And(l1, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(hb), low2))), 1);
        group(hn::Or(hn::ShiftRight<4>(l0), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(hb), low2))), 2);
        group(hn::Or(hn::ShiftRight<4>(l1), hn::ShiftLeft<4>(hn::ShiftRight<6>(hb))), 3);
      }
    }
  }
  static HWY_INLINE float Scale(const uint8_t* blk) { return HalfAt(blk + offsetof(BlockQ6_K, d)); }
};

// One super-block against T tokens (1 or 4; token c's activations at x + c·xs, s16 + c·ss, its scale
// dx[c]; T = 1 touches acc0 and macc[0] only): per token acc_c += (integer dot) · d · dx[c] (lanes),
// and for the types with mins macc[c] += (-dmin) · dx[c] · Σ m · (activation 16-sums). Each weight
// vector is unpacked once for the T tokens; per token the same sequence whatever T is.
template <class KQ, int T, class VF>
HWY_INLINE void SuperT(const uint8_t* HWY_RESTRICT blk, const int16_t* HWY_RESTRICT x, size_t xs,
                       const int16_t* HWY_RESTRICT s16, size_t ss, const float* dx, VF& acc0, VF& acc1, VF& acc2,
                       VF& acc3, float* macc) {
  static_assert(T == 1 || T == 4, "one or four tokens");
  const typename KQ::TG tg;
  auto a0 = hn::Zero(tg.d32), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
  KQ::Ints(blk, [&](auto w, size_t off) {
    a0 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + off), a0, b0);
    if constexpr (T == 4) {
      a1 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + xs + off), a1, b1);
      a2 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + 2 * xs + off), a2, b2);
      a3 = hn::ReorderWidenMulAccumulate(tg.d32, w, LoadX(tg, x + 3 * xs + off), a3, b3);
    }
  });
  const float d = KQ::Scale(blk);
  acc0 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a0, b0)), hn::Set(tg.df, d * dx[0]), acc0);
  if constexpr (T == 4) {
    acc1 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a1, b1)), hn::Set(tg.df, d * dx[1]), acc1);
    acc2 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a2, b2)), hn::Set(tg.df, d * dx[2]), acc2);
    acc3 = hn::MulAdd(hn::ConvertTo(tg.df, hn::Add(a3, b3)), hn::Set(tg.df, d * dx[3]), acc3);
  }
  if constexpr (KQ::kMins) {
    int32_t m16[16];
    KQ::Mins16(blk, m16);
    const float m = KQ::MinScale(blk);
    for (int c = 0; c < T; ++c) {
      const int16_t* sc = s16 + static_cast<size_t>(c) * ss;
      int32_t msum = 0;
      for (int i = 0; i < 16; ++i) msum += m16[i] * sc[i];
      macc[c] += m * dx[c] * static_cast<float>(msum);
    }
  }
}

// One K-quant row against T tokens (1 or 4; token c's activations at xq + c·K, xs + c·K/16,
// xd + c·nsb): out[c · stride] = lane sum of its acc + its macc.
template <class KQ, int T>
HWY_INLINE void KDotT(const uint8_t* HWY_RESTRICT row, int64_t nsb, int64_t K, const int16_t* HWY_RESTRICT xq,
                      const int16_t* HWY_RESTRICT xs, const float* HWY_RESTRICT xd, float* out, size_t stride) {
  const typename KQ::TG tg;
  auto acc0 = hn::Zero(tg.df), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  float macc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const auto uk = static_cast<size_t>(K), ns = static_cast<size_t>(nsb);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + static_cast<size_t>(sb) * KQ::kBytes;
    for (size_t line = 0; line < KQ::kBytes; line += 64) Prefetch(blk + line);
    float dx[4];
    for (int c = 0; c < T; ++c) dx[c] = xd[static_cast<size_t>(c) * ns + sb];
    SuperT<KQ, T>(blk, xq + 256 * sb, uk, xs + 16 * sb, uk / 16, dx, acc0, acc1, acc2, acc3, macc);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(tg.df, acc0)) + macc[0];
  if constexpr (T == 4) {
    out[stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc1)) + macc[1];
    out[2 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc2)) + macc[2];
    out[3 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc3)) + macc[3];
  }
}

// Four consecutive rows against one token, their super-blocks interleaved (four independent
// chains); per row exactly KDotT<KQ, 1>'s operations, so the bits do not depend on the grouping.
template <class KQ>
HWY_INLINE void KDot4(const uint8_t* HWY_RESTRICT row, size_t row_bytes, int64_t nsb, const int16_t* HWY_RESTRICT xq,
                      const int16_t* HWY_RESTRICT xs, const float* HWY_RESTRICT xd, float* out, size_t stride) {
  const typename KQ::TG tg;
  auto acc0 = hn::Zero(tg.df), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  float macc0 = 0.0f, macc1 = 0.0f, macc2 = 0.0f, macc3 = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + static_cast<size_t>(sb) * KQ::kBytes;
    for (size_t r = 0; r < 4; ++r) {
      for (size_t line = 0; line < KQ::kBytes; line += 64) Prefetch(blk + r * row_bytes + line);
    }
    const int16_t* x = xq + 256 * sb;
    const int16_t* s16 = xs + 16 * sb;
    // One token per row (SuperT<KQ, 1> touches only its first accumulator).
    SuperT<KQ, 1>(blk, x, 0, s16, 0, &xd[sb], acc0, acc0, acc0, acc0, &macc0);
    SuperT<KQ, 1>(blk + row_bytes, x, 0, s16, 0, &xd[sb], acc1, acc1, acc1, acc1, &macc1);
    SuperT<KQ, 1>(blk + 2 * row_bytes, x, 0, s16, 0, &xd[sb], acc2, acc2, acc2, acc2, &macc2);
    SuperT<KQ, 1>(blk + 3 * row_bytes, x, 0, s16, 0, &xd[sb], acc3, acc3, acc3, acc3, &macc3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(tg.df, acc0)) + macc0;
  out[stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc1)) + macc1;
  out[2 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc2)) + macc2;
  out[3 * stride] = hn::GetLane(hn::SumOfLanes(tg.df, acc3)) + macc3;
}

}  // namespace hq

// Widens the int8 activations of tokens [t0, t1) to int16: out[(t - t0) * K + k].
HWY_INLINE void WidenActs(const QuantActs& a, int64_t t0, int64_t t1, int16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const size_t N = hn::Lanes(d16);
  const size_t count = static_cast<size_t>((t1 - t0) * a.cols);
  const int8_t* in = a.qs + t0 * a.cols;
  size_t i = 0;
  for (; i + N <= count; i += N) hn::StoreU(hn::PromoteTo(d16, hn::LoadU(d8, in + i)), d16, out + i);
  for (; i < count; ++i) out[i] = in[i];
}

// One K-quant matrix, rows [r0, r1) against the widened tokens [t0, t1): one token in four-row tiles
// or row by row (DecodeOrder), several tokens row by row, four tokens at a time.
template <class KQ>
HWY_NOINLINE void KRowsHwy(const WeightMatrix& w, const QuantActs& a, int64_t t0, int64_t t1,
                           const int16_t* wide, float* y, int64_t r0, int64_t r1) {
  const int64_t K = a.cols;
  const int64_t nsb = K / 256;
  const auto rows = static_cast<size_t>(w.rows);
  if (t1 - t0 == 1) {
    // One token: four rows at a time or one by one, as measured at load for x86's tiles (decode_order.h).
    const bool four = g_decode_order[decode_order_slot_or_none(w.type)].load(std::memory_order_relaxed) ==
                      static_cast<uint8_t>(DecodeOrder::kTiles);
    int64_t r = r0;
    for (; four && r + 4 <= r1; r += 4) {
      hq::KDot4<KQ>(w.data + static_cast<uint64_t>(r) * w.row_bytes, w.row_bytes, nsb, wide, a.sums + t0 * (K / 16),
                    a.d + t0 * nsb, y + t0 * w.rows + r, 1);
    }
    for (; r < r1; ++r) {
      hq::KDotT<KQ, 1>(w.data + static_cast<uint64_t>(r) * w.row_bytes, nsb, K, wide, a.sums + t0 * (K / 16),
                       a.d + t0 * nsb, y + t0 * w.rows + r, rows);
    }
    return;
  }
  // Several tokens: each row against four tokens at a time (its weights unpacked once for the four),
  // then the rest one by one.
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + static_cast<uint64_t>(r) * w.row_bytes;
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) {
      hq::KDotT<KQ, 4>(row, nsb, K, wide + (t - t0) * K, a.sums + t * (K / 16), a.d + t * nsb, y + t * w.rows + r,
                       rows);
    }
    for (; t < t1; ++t) {
      hq::KDotT<KQ, 1>(row, nsb, K, wide + (t - t0) * K, a.sums + t * (K / 16), a.d + t * nsb, y + t * w.rows + r,
                       rows);
    }
  }
}

// A matrix of blocks of 32: rows [r0, r1) one at a time (a single sequential stream for one token)
// against the widened tokens [t0, t1), four tokens at a time, then the rest one by one.
template <class L>
HWY_NOINLINE void LegacyRowsHwy(const WeightMatrix& w, const QuantActs& a, int64_t t0, int64_t t1,
                                const int16_t* wide, float* y, int64_t r0, int64_t r1) {
  const int64_t K = a.cols;
  const int64_t nb = K / 32;
  const auto rows = static_cast<size_t>(w.rows);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + static_cast<uint64_t>(r) * w.row_bytes;
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) {
      hq::LegacyDot<L, 4>(row, nb, K, wide + (t - t0) * K, a.sums + t * (K / 16), a.d + t * nb, y + t * w.rows + r,
                          rows);
    }
    for (; t < t1; ++t) {
      hq::LegacyDot<L, 1>(row, nb, K, wide + (t - t0) * K, a.sums + t * (K / 16), a.d + t * nb, y + t * w.rows + r,
                          rows);
    }
  }
}

// y[t][r] for t < n, r0 <= r < r1 (per block of up to kTokens tokens, rows outer: a row stays in
// cache while the tokens go by). Q8_0: one row at a time (a single sequential stream, as on x86).
// Precondition: w.type is quantized.
HWY_NOINLINE void MatmulQuantRowsHwy(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0,
                                     int64_t r1) {
  constexpr int64_t kTokens = 8;
  const int64_t K = a.cols;
  thread_local std::vector<int16_t> wide;
  wide.resize(static_cast<size_t>(std::min(n, kTokens) * K));
  for (int64_t t0 = 0; t0 < n; t0 += kTokens) {
    const int64_t t1 = std::min(n, t0 + kTokens);
    WidenActs(a, t0, t1, wide.data());
    switch (w.type) {
      case GgmlType::kQ2_K: KRowsHwy<hq::KQ2>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ3_K: KRowsHwy<hq::KQ3>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ4_K: KRowsHwy<hq::KQ4>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ5_K: KRowsHwy<hq::KQ5>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ6_K: KRowsHwy<hq::KQ6>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ8_0: LegacyRowsHwy<hq::LQ8_0>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ4_0: LegacyRowsHwy<hq::LQ4_0>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ4_1: LegacyRowsHwy<hq::LQ4_1>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ5_0: LegacyRowsHwy<hq::LQ5_0>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      case GgmlType::kQ5_1: LegacyRowsHwy<hq::LQ5_1>(w, a, t0, t1, wide.data(), y, r0, r1); break;
      default: break;
    }
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
