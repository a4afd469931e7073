// Quantized matmul kernels, compiled once per SIMD target (Highway foreach_target) and chosen at
// run time. See matmul_quant.h for the arithmetic contract.
//
// Shapes: W [rows][K / B] blocks of B weights (B = 32 for legacy types, 256 for K-quants),
// activations QuantActs [n][K] int8, y [n][rows].
// x86 (AVX2 and both AVX-512 targets) works on 256-bit integer vectors: 32 weights = one register.
//   Legacy types (Q8_0, Q4_0, Q5_0 signed; Q4_1, Q5_1 unsigned with a min): a tile is RM = 2
//   rows × RN tokens; a block is unpacked once per row and dotted with RN token blocks.
//   K-quants: a tile is 1 row × RN tokens; a super-block's 64-element chunks are unpacked once and
//   their sub-block scales applied in int16 (madd), so a super-block costs one integer sum per
//   token and two f32 FMAs (scales, and mins/zero points through the activations' 16-sums).
//   RN = 4 on AVX2 (16 registers), 8 on AVX-512 (32 registers).
//   One token (decode): K-quants in tiles of 4 rows (KRows, the rows' chains interleaved) or one row
//   at a time, as measured at load (DecodeOrder, decode_order.h); legacy types one row at a time (a
//   single sequential stream). Every tile prefetches 8 KiB ahead.
// Quantized matrices (Q2_K .. Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) in groups of 16 rows (WeightMatrix::kQuantGroup, as CpuBackend copies them) take
// the one Highway kernel of matmul_quant_groups-inl.h on every target, whatever the token count or
// STRATA_QUANT_HWY. For matrices with rows as stored (--mmap-weights, STRATA_CPU_ROW_GROUPS=0, the
// other types), which path each target takes:
//   AVX3_DL (AVX-512 with VNNI: Ice Lake and later, Zen 4/5): legacy dots with vpdpbusd (EVEX);
//     Q4_K and Q6_K unpack 64 weights per 512-bit step (maddubs/madd), folded to 8 int32 lanes;
//     Q2_K, Q3_K, Q5_K use the 256-bit steps.
//   AVX3 (AVX-512 without VNNI: Skylake-X): the same, legacy dots with maddubs + madd.
//   AVX2: 256-bit steps throughout (maddubs + madd).
//   Every other target (NEON, SVE, SSE4/SSSE3 where compiled, EMU128/SCALAR): every quantized type
//     takes the portable Highway kernels of matmul_quant_hwy-inl.h (int16 lanes, ReorderWiden-
//     MulAccumulate; 8 lanes on NEON).
//   The x86 targets keep their intrinsics: on the Zen 5 VM the Highway kernels forced there
//   (STRATA_QUANT_HWY=1, BM_MatmulHighway) were as fast for Q8_0 from memory but up to 1.15x slower
//   in cache (AVX3_DL), and 1.2-1.75x slower for Q4_K/Q6_K (no u8 x i8 pair dot in Highway 1.0.3).

#include "backend/cpu/matmul_quant.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "backend/cpu/decode_order.h"
#include "core/fp16.h"
#include "gguf/quant_blocks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/matmul_quant.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backend/cpu/simd_reduce-inl.h"
#include "backend/cpu/matmul_quant_hwy-inl.h"
#include "backend/cpu/matmul_quant_groups-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
// Highway's AVX3_DL target implies AVX512-VNNI at run time; enable its EVEX encodings here.
#pragma GCC target("avx512vnni")
#endif
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- activation quantization (all targets) ----

// The words of nsb super-blocks (QuantActs::words) from their 16-sums.
void FillActWords(const int16_t* sums, int64_t nsb, int32_t* words) {
  for (int64_t sb = 0; sb < nsb; ++sb, sums += 16, words += QuantActs::kActWords) {
    uint32_t q[2] = {0, 0}, r[2] = {0, 0};
    for (int j = 0; j < 8; ++j) {
      const int32_t b = sums[2 * j] + sums[2 * j + 1];
      q[j / 4] |= (static_cast<uint32_t>(b >> 7) & 0xffu) << (8 * (j % 4));
      r[j / 4] |= static_cast<uint32_t>(b & 127) << (8 * (j % 4));
    }
    for (int k = 0; k < 2; ++k) {
      words[QuantActs::kActWordQ + k] = static_cast<int32_t>(q[k]);
      words[QuantActs::kActWordR + k] = static_cast<int32_t>(r[k]);
    }
    for (int s = 0; s < 16; ++s) words[QuantActs::kActWordZero + s] = -32 * sums[s];
    constexpr int kRun2[4] = {4, 5, 12, 13};
    for (int i = 0; i < 4; ++i) words[QuantActs::kActWordZero4 + i] = -128 * sums[kRun2[i]];
  }
}

void QuantizeActs(const float* x, int64_t t0, int64_t t1, const QuantActs& a) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const size_t N = hn::Lanes(d);
  const int64_t K = a.cols;
  const int64_t B = a.block;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * K;
    int8_t* q = a.qs + t * K;
    int16_t* sums = a.sums + t * (K / 16);
    for (int64_t b0 = 0; b0 < K; b0 += B) {
      VF vmax = hn::Zero(d);
      for (int64_t i = 0; i < B; i += static_cast<int64_t>(N)) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(d, xr + b0 + i)));
      const float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
      a.d[t * (K / B) + b0 / B] = amax / 127.0f;
      const VF scale = hn::Set(d, amax > 0.0f ? 127.0f / amax : 0.0f);
      // 16 is a multiple of every target's lane count for f32 (4, 8 or 16).
      for (int64_t g = 0; g < B; g += 16) {
        auto group = hn::Zero(di);
        for (int64_t i = 0; i < 16; i += static_cast<int64_t>(N)) {
          const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(d, xr + b0 + g + i), scale));
          group = hn::Add(group, qi);
          hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b0 + g + i);
        }
        sums[(b0 + g) / 16] = static_cast<int16_t>(hn::GetLane(hn::SumOfLanes(di, group)));
      }
    }
    if (a.words != nullptr) FillActWords(sums, K / 256, a.words + t * (K / 256) * QuantActs::kActWords);
  }
}

#if STRATA_X86_SIMD

// ---- x86 building blocks on 32 int8 lanes ----

HWY_INLINE float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

HWY_INLINE __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight rows stream from memory, and a tile's rows are a few hundred bytes each: too short for
// the hardware prefetchers to ramp up when a tile reads several rows side by side (on a Zen 5 VM,
// Q8_0 n = 1 with 2-row tiles ran at 6.5 GB/s per core, 70% of the time waiting on the weight
// loads). The rows of a chunk are contiguous, so each tile prefetches kPrefetchBytes ahead of what
// it reads; past the matrix's end the hints are harmless. Measured on the Zen 5 VM (32000x768,
// n = 1, one thread): 8 KiB beat 2, 4 and 16 KiB, and the L1 hint (prefetcht0) beat L2 for the
// K-quants by 5-25%.
constexpr size_t kPrefetchBytes = 8192;
HWY_INLINE void PrefetchAhead(const uint8_t* p) { __builtin_prefetch(p + kPrefetchBytes, 0, 3); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles (Q4_0's order).
HWY_INLINE __m256i Nibbles(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

// Byte e = 0x10 where bit e of the 32 bits at p is set (the fifth bit of Q5_0/Q5_1).
HWY_INLINE __m256i FifthBits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  v = _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Sums of 4 adjacent products of unsigned u (0..255; at most 128 with maddubs so pairs cannot
// saturate) and signed s, as 8 int32.
HWY_INLINE __m256i DotU8S8(__m256i u, __m256i s) {
#if HWY_TARGET == HWY_AVX3_DL
  // Highway 1.0.3 (Debian 12) also enables AVX-VNNI for this target, a different extension (VEX
  // encodings: Alder Lake, Sapphire Rapids, Zen 5) that AVX-512 machines such as AMD Zen 4 lack;
  // GCC then encodes the intrinsic on ymm registers as {vex} vpdpbusd, an illegal instruction there.
  // Spell out the EVEX form, which every AVX512-VNNI machine has.
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// maddubs then madd by per-16-bit scales: Σ over pairs of (u·s) · scale, as 8 int32.
HWY_INLINE __m256i DotScaled(__m256i u, __m256i s, __m256i scales16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales16);
}

// Two int16 scales, a for lanes 0..15 (first 16 weights) and b for 16..31.
HWY_INLINE __m256i Scales2(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a)));
}
// Byte shuffle of 8 int16 words held in both 128-bit lanes giving Scales2(word k, word k + 1).
HWY_INLINE __m256i ScalePair(int k) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((2 * k + 3) << 8) | (2 * k + 2))),
                          _mm_set1_epi16(static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k))));
}

// ---- legacy types: blocks of 32 ----

template <GgmlType T> struct Legacy;
template <> struct Legacy<GgmlType::kQ8_0> {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kSigned = true;
  static HWY_INLINE __m256i Decode(const uint8_t* b) { return Load32(b + offsetof(BlockQ8_0, qs)); }
  static HWY_INLINE float Min(const uint8_t*) { return 0.0f; }
};
template <> struct Legacy<GgmlType::kQ4_0> {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static constexpr bool kSigned = true;
  static HWY_INLINE __m256i Decode(const uint8_t* b) {
    return _mm256_sub_epi8(Nibbles(b + offsetof(BlockQ4_0, qs)), _mm256_set1_epi8(8));
  }
  static HWY_INLINE float Min(const uint8_t*) { return 0.0f; }
};
template <> struct Legacy<GgmlType::kQ5_0> {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static constexpr bool kSigned = true;
  static HWY_INLINE __m256i Decode(const uint8_t* b) {
    const __m256i q = _mm256_or_si256(Nibbles(b + offsetof(BlockQ5_0, qs)), FifthBits(b + offsetof(BlockQ5_0, qh)));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
  }
  static HWY_INLINE float Min(const uint8_t*) { return 0.0f; }
};
template <> struct Legacy<GgmlType::kQ4_1> {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kSigned = false;
  static HWY_INLINE __m256i Decode(const uint8_t* b) { return Nibbles(b + offsetof(BlockQ4_1, qs)); }
  static HWY_INLINE float Min(const uint8_t* b) { return Half(b + offsetof(BlockQ4_1, m)); }
};
template <> struct Legacy<GgmlType::kQ5_1> {
  static constexpr size_t kBytes = sizeof(BlockQ5_1);
  static constexpr bool kSigned = false;
  static HWY_INLINE __m256i Decode(const uint8_t* b) {
    return _mm256_or_si256(Nibbles(b + offsetof(BlockQ5_1, qs)), FifthBits(b + offsetof(BlockQ5_1, qh)));
  }
  static HWY_INLINE float Min(const uint8_t* b) { return Half(b + offsetof(BlockQ5_1, m)); }
};

#undef STRATA_ZMM
#if HWY_TARGET <= HWY_AVX3
#define STRATA_ZMM 1
constexpr int kMaxRN = 8;
#else
#define STRATA_ZMM 0
constexpr int kMaxRN = 4;
#endif
constexpr int kLegacyRM = 2;
constexpr int kDecodeRows = 4;  // rows of a one-token K-quant tile

// Rows w .. w + (RM-1)·row_bytes, tokens t .. t+RN-1, nb blocks; y[c·ys + r].
template <GgmlType T, int RM, int RN>
HWY_NOINLINE void LegacyTile(const uint8_t* HWY_RESTRICT w, size_t row_bytes, int64_t nb, const QuantActs& a,
                             int64_t t, float* HWY_RESTRICT y, size_t ys) {
  using L = Legacy<T>;
  const int64_t K = a.cols;
  const int8_t* xq[RN];
  const float* xd[RN];
  const int16_t* xs[RN];
  for (int c = 0; c < RN; ++c) {
    xq[c] = a.qs + (t + c) * K;
    xd[c] = a.d + (t + c) * (K / 32);
    xs[c] = a.sums + (t + c) * (K / 16);
  }
  __m256 acc[RM][RN];
  float macc[RM][RN];
#pragma GCC unroll 8
  for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      macc[r][c] = 0.0f;
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    float dx[RN];
#pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) dx[c] = xd[c][b];
#pragma GCC unroll 8
    for (int r = 0; r < RM; ++r) {
      const uint8_t* blk = w + r * row_bytes + static_cast<size_t>(b) * L::kBytes;
      PrefetchAhead(blk);
      const __m256i q = L::Decode(blk);
      const float dw = Half(blk);
      const __m256i aq = L::kSigned ? _mm256_sign_epi8(q, q) : q;
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        __m256i xv = Load32(xq[c] + 32 * b);
        if (L::kSigned) xv = _mm256_sign_epi8(xv, q);
        const __m256 dot = _mm256_cvtepi32_ps(DotU8S8(aq, xv));
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[c]), dot, acc[r][c]);
        if (!L::kSigned) macc[r][c] += L::Min(blk) * dx[c] * static_cast<float>(xs[c][2 * b] + xs[c][2 * b + 1]);
      }
    }
  }
  for (int r = 0; r < RM; ++r) {
    float sums[RN];
    ReduceSums256<RN>(acc[r], sums);
    for (int c = 0; c < RN; ++c) y[c * ys + r] = sums[c] + macc[r][c];
  }
}

// ---- K-quants: super-blocks of 256 ----

// The activations of RN tokens for one super-block.
template <int RN>
struct SuperActs {
  const int8_t* q[RN];   // [256] each
  const int16_t* s[RN];  // [16] sums of 16
  float d[RN];
};

// acc[c] += d_w·d_x·isum[c] + off·d_x·(offset dot)[c], both 8-lane int32 vectors.
template <int RN>
HWY_INLINE void Finish(const __m256i* isum, __m256i offsets16, float dw, float off, const SuperActs<RN>& x,
                       __m256* acc) {
#pragma GCC unroll 8
  for (int c = 0; c < RN; ++c) {
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(dw * x.d[c]), acc[c]);
    const __m256i o = _mm256_madd_epi16(offsets16, Load32(x.s[c]));
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(o), _mm256_set1_ps(off * x.d[c]), acc[c]);
  }
}

// Scales and mins of Q4_K/Q5_K unpacked to bytes: sc[0..7] then m[0..7] (ggml's layout trick), in
// vector registers: 32-bit words u0..u2 of the 12 packed bytes give
//   [u0 & 3f.., (u2 & 0f..) | ((u0 >> 6) & 03..) << 4, u1 & 3f.., ((u2 >> 4) & 0f..) | ((u1 >> 6) & 03..) << 4].
// Reads 16 bytes from `packed` (the 4 after the scales are the block's next field).
HWY_INLINE __m128i K4ScalesMins(const uint8_t* packed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // u0 u2 u1 u2
  const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // u0 u0 u1 u1
  const __m128i even = _mm_and_si128(a, _mm_set1_epi32(0x3f3f3f3f));
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
  const __m128i hi = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), _mm_set1_epi32(0x03030303)), 4);
  return _mm_blend_epi32(even, _mm_or_si128(lo, hi), 0xA);
}

// Each of the 8 low byte values of v repeated for two int16 lanes: [v0, v0, v1, v1, ..., v7, v7].
HWY_INLINE __m256i Repeat2(__m128i v) {
  const __m128i m = _mm_cvtepu8_epi16(v);
  return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}
// The mins of K4ScalesMins' result (its high 8 bytes), repeated as Repeat2.
HWY_INLINE __m256i RepeatMins(__m128i sm) { return Repeat2(_mm_unpackhi_epi64(sm, sm)); }
// Word k (0..7) of each 128-bit half of `words` in every int16 lane (one byte shuffle, in registers:
// the scales never go through memory, whose narrow reloads of wide stores stalled the AVX2 loop).
HWY_INLINE __m256i ScaleWord(__m256i words, int k) {
  return _mm256_shuffle_epi8(words, _mm256_set1_epi16(static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k))));
}

#if STRATA_ZMM
// AVX-512 (both targets): the K-quants unpack 64 weights per 512-bit step. The integer sums are
// folded to the 8 lanes of the 256-bit code before any float arithmetic, lane for lane the same
// integers as the 256-bit steps would give (lane l of the upper half belongs to the same lane l),
// so results do not depend on the step width.
HWY_INLINE __m512i Load64(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE __m512i DotScaled512(__m512i u, __m512i s, __m512i scales16) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), scales16);
}
HWY_INLINE __m256i Fold512(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
// Byte shuffles (within each 128-bit lane of a broadcast [s0..s7] int16 vector) giving
// [s_2j × 16 | s_2j+1 × 16] for j = 0..3 (functions, not constants: no AVX-512 code may run at
// static initialisation on a machine without it).
HWY_INLINE __m512i PairScalePattern(int a, int b) {
  const auto lo = static_cast<char>(2 * a), hi = static_cast<char>(2 * b);
  const __m256i pa = _mm256_set1_epi16(static_cast<int16_t>((lo + 1) << 8 | lo));
  const __m256i pb = _mm256_set1_epi16(static_cast<int16_t>((hi + 1) << 8 | hi));
  return _mm512_inserti64x4(_mm512_castsi256_si512(pa), pb, 1);
}
HWY_INLINE __m512i PairScales(int j) { return PairScalePattern(2 * j, 2 * j + 1); }
// Word indices giving [s_4i × 8 | s_4i+1 × 8 | s_4i+2 × 8 | s_4i+3 × 8] of 16 int16 scales, i = 0..3.
HWY_INLINE __m512i QuarterScalePattern(int i) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * i + 1)),
                                              _mm_set1_epi16(static_cast<int16_t>(4 * i)))),
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * i + 3)), _mm_set1_epi16(static_cast<int16_t>(4 * i + 2))),
      1);
}

#endif

template <GgmlType T> struct KQuant;

template <> struct KQuant<GgmlType::kQ4_K> {
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  template <int RN>
  static HWY_INLINE void Super(const uint8_t* b, const SuperActs<RN>& x, __m256* acc) {
    const __m128i smv = K4ScalesMins(b + offsetof(BlockQ4_K, scales));
    const uint8_t* qs = b + offsetof(BlockQ4_K, qs);
#if STRATA_ZMM
    // 64 weights a step: a 32-byte chunk broadcast to both halves, low nibbles kept in the lower
    // half (sub-block 2j) and high nibbles in the upper (2j+1), so the 64 activations are contiguous.
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i half_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(smv));
    __m512i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i q = _mm512_broadcast_i64x4(Load32(qs + 32 * j));
      const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(q, half_shift), low4);
      const __m512i s = _mm512_shuffle_epi8(sc, PairScales(j));
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) isum[c] = _mm512_add_epi32(isum[c], DotScaled512(nib, Load64(x.q[c] + 64 * j), s));
    }
    __m256i folded[RN];
    for (int c = 0; c < RN; ++c) folded[c] = Fold512(isum[c]);
    Finish<RN>(folded, RepeatMins(smv), Half(b + offsetof(BlockQ4_K, d)), -Half(b + offsetof(BlockQ4_K, dmin)), x,
               acc);
#else
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));  // the 8 scales as words, twice
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i q = Load32(qs + 32 * j);
      const __m256i lo = _mm256_and_si256(q, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m256i slo = ScaleWord(sc, 2 * j), shi = ScaleWord(sc, 2 * j + 1);
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        const __m256i p = _mm256_add_epi32(DotScaled(lo, Load32(x.q[c] + 64 * j), slo),
                                           DotScaled(hi, Load32(x.q[c] + 64 * j + 32), shi));
        isum[c] = _mm256_add_epi32(isum[c], p);
      }
    }
    Finish<RN>(isum, RepeatMins(smv), Half(b + offsetof(BlockQ4_K, d)), -Half(b + offsetof(BlockQ4_K, dmin)), x,
               acc);
#endif
  }
};

template <> struct KQuant<GgmlType::kQ5_K> {
  static constexpr size_t kBytes = sizeof(BlockQ5_K);
  template <int RN>
  static HWY_INLINE void Super(const uint8_t* b, const SuperActs<RN>& x, __m256* acc) {
    const __m128i smv = K4ScalesMins(b + offsetof(BlockQ5_K, scales));
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));  // the 8 scales as words, twice
    const uint8_t* qs = b + offsetof(BlockQ5_K, qs);
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i hbits = Load32(b + offsetof(BlockQ5_K, qh));  // bit j of byte l: fifth bit of sub-block j
    __m256i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i q = Load32(qs + 32 * j);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
      hbits = _mm256_srli_epi16(hbits, 1);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                         _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
      hbits = _mm256_srli_epi16(hbits, 1);
      const __m256i slo = ScaleWord(sc, 2 * j), shi = ScaleWord(sc, 2 * j + 1);
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        const __m256i p = _mm256_add_epi32(DotScaled(lo, Load32(x.q[c] + 64 * j), slo),
                                           DotScaled(hi, Load32(x.q[c] + 64 * j + 32), shi));
        isum[c] = _mm256_add_epi32(isum[c], p);
      }
    }
    Finish<RN>(isum, RepeatMins(smv), Half(b + offsetof(BlockQ5_K, d)), -Half(b + offsetof(BlockQ5_K, dmin)), x,
               acc);
  }
};

template <> struct KQuant<GgmlType::kQ6_K> {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  template <int RN>
  static HWY_INLINE void Super(const uint8_t* b, const SuperActs<RN>& x, __m256* acc) {
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh);
#if STRATA_ZMM
    int8_t sc[16];
    std::memcpy(sc, b + offsetof(BlockQ6_K, scales), 16);
    // 64 weights a step: ql's 64 bytes of a half give sub-blocks 8h..8h+3 (low nibbles) and
    // 8h+4..8h+7 (high nibbles); the 32 qh bytes are broadcast to both halves and shifted per half.
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(3);
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
    __m512i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i l = Load64(ql + 64 * h);
      const __m512i hb = _mm512_broadcast_i64x4(Load32(qh + 32 * h));
      const __m512i q[2] = {
          _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh_lo), low2), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh_hi), low2), 4))};
#pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        const __m512i s = _mm512_permutexvar_epi16(QuarterScalePattern(2 * h + g), sc16);
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          isum[c] = _mm512_add_epi32(isum[c], DotScaled512(q[g], Load64(x.q[c] + 128 * h + 64 * g), s));
        }
      }
    }
    __m256i folded[RN];
    for (int c = 0; c < RN; ++c) folded[c] = Fold512(isum[c]);
    const float d = Half(b + offsetof(BlockQ6_K, d));
    Finish<RN>(folded, _mm512_castsi512_si256(sc16), d, -32.0f * d, x, acc);
#else
    // The 16 scales as words, from the block in registers (no byte reloads of a stored copy).
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(BlockQ6_K, scales))));
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    __m256i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = Load32(ql + 64 * h), l1 = Load32(ql + 64 * h + 32), hb = Load32(qh + 32 * h);
      // Scales 8h..8h+7 in both lanes (each permute with its own immediate: -O0 keeps h a variable).
      const __m256i half =
          h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      // Bit pair 2g of each qh byte moved to bits 4-5 in one 16-bit shift (or none) and a mask: the
      // bits a shift carries across the bytes of a 16-bit lane fall outside 0x30.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hb, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45))};
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i s = _mm256_shuffle_epi8(half, ScalePair(2 * g));  // Scales2(sc[8h + 2g], sc[8h + 2g + 1])
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          isum[c] = _mm256_add_epi32(isum[c], DotScaled(q[g], Load32(x.q[c] + 128 * h + 32 * g), s));
        }
      }
    }
    // Zero point 32: Σ_s sc_s · 32 · (16-sum of the activations).
    const float d = Half(b + offsetof(BlockQ6_K, d));
    Finish<RN>(isum, sc16, d, -32.0f * d, x, acc);
#endif
  }
};

template <> struct KQuant<GgmlType::kQ3_K> {
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  template <int RN>
  static HWY_INLINE void Super(const uint8_t* b, const SuperActs<RN>& x, __m256* acc) {
    const uint8_t* qs = b + offsetof(BlockQ3_K, qs);
    int16_t sc[16];
    for (int i = 0; i < 16; ++i) sc[i] = static_cast<int16_t>(q3_k_scale(i, b + offsetof(BlockQ3_K, scales)) - 32);
    const __m256i low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = Load32(b + offsetof(BlockQ3_K, hmask));  // bit (4h + j) of byte l
    __m256i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i lo = Load32(qs + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_or_si256(_mm256_and_si256(lo, low2), _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
        lo = _mm256_srli_epi16(lo, 2);
        hm = _mm256_srli_epi16(hm, 1);
        const __m256i s = Scales2(sc[8 * h + 2 * j], sc[8 * h + 2 * j + 1]);
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          isum[c] = _mm256_add_epi32(isum[c], DotScaled(q, Load32(x.q[c] + 128 * h + 32 * j), s));
        }
      }
    }
    const __m256i sc16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc));
    const float d = Half(b + offsetof(BlockQ3_K, d));
    Finish<RN>(isum, sc16, d, -4.0f * d, x, acc);
  }
};

template <> struct KQuant<GgmlType::kQ2_K> {
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  template <int RN>
  static HWY_INLINE void Super(const uint8_t* b, const SuperActs<RN>& x, __m256* acc) {
    const uint8_t* qs = b + offsetof(BlockQ2_K, qs);
    const uint8_t* scales = b + offsetof(BlockQ2_K, scales);
    HWY_ALIGN int16_t mins[16];
    for (int i = 0; i < 16; ++i) mins[i] = static_cast<int16_t>(scales[i] >> 4);
    const __m256i low2 = _mm256_set1_epi8(3);
    __m256i isum[RN];
    for (int c = 0; c < RN; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i lo = Load32(qs + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_and_si256(lo, low2);
        lo = _mm256_srli_epi16(lo, 2);
        const int s0 = 8 * h + 2 * j;
        const __m256i s = Scales2(scales[s0] & 0xF, scales[s0 + 1] & 0xF);
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) {
          isum[c] = _mm256_add_epi32(isum[c], DotScaled(q, Load32(x.q[c] + 128 * h + 32 * j), s));
        }
      }
    }
    Finish<RN>(isum, Load32(mins), Half(b + offsetof(BlockQ2_K, d)), -Half(b + offsetof(BlockQ2_K, dmin)), x, acc);
  }
};

// One row w (nsb super-blocks) against tokens t .. t+RN-1; y[c·ys].
template <GgmlType T, int RN>
HWY_NOINLINE void KTile(const uint8_t* HWY_RESTRICT w, int64_t nsb, const QuantActs& a, int64_t t,
                        float* HWY_RESTRICT y, size_t ys) {
  const int64_t K = a.cols;
  __m256 acc[RN];
  for (int c = 0; c < RN; ++c) acc[c] = _mm256_setzero_ps();
  SuperActs<RN> x;
  for (int64_t sb = 0; sb < nsb; ++sb) {
#pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) {
      x.q[c] = a.qs + (t + c) * K + 256 * sb;
      x.s[c] = a.sums + (t + c) * (K / 16) + 16 * sb;
      x.d[c] = a.d[(t + c) * (K / 256) + sb];
    }
    const uint8_t* blk = w + static_cast<size_t>(sb) * KQuant<T>::kBytes;
    for (size_t line = 0; line < KQuant<T>::kBytes; line += 64) PrefetchAhead(blk + line);
    KQuant<T>::template Super<RN>(blk, x, acc);
  }
  float sums[RN];
  ReduceSums256<RN>(acc, sums);
  for (int c = 0; c < RN; ++c) y[c * ys] = sums[c];
}

// One token against RM rows w, w + row_bytes, ...: the single-token (decode) tile. The rows'
// super-blocks interleave, so RM independent dependency chains overlap, and the call, the
// activation setup and the final lane sums are paid once per RM rows. Per row the arithmetic is
// KTile<T, 1>'s, so a token's result does not depend on the tile.
template <GgmlType T, int RM>
HWY_NOINLINE void KRows(const uint8_t* HWY_RESTRICT w, size_t row_bytes, int64_t nsb, const QuantActs& a, int64_t t,
                        float* HWY_RESTRICT y) {
  const int64_t K = a.cols;
  __m256 acc[RM];
  for (int r = 0; r < RM; ++r) acc[r] = _mm256_setzero_ps();
  SuperActs<1> x;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    x.q[0] = a.qs + t * K + 256 * sb;
    x.s[0] = a.sums + t * (K / 16) + 16 * sb;
    x.d[0] = a.d[t * (K / 256) + sb];
#pragma GCC unroll 4
    for (int r = 0; r < RM; ++r) {
      const uint8_t* blk = w + r * row_bytes + static_cast<size_t>(sb) * KQuant<T>::kBytes;
      for (size_t line = 0; line < KQuant<T>::kBytes; line += 64) PrefetchAhead(blk + line);
      KQuant<T>::template Super<1>(blk, x, &acc[r]);
    }
  }
  float sums[RM];
  ReduceSums256<RM>(acc, sums);
  for (int r = 0; r < RM; ++r) y[r] = sums[r];
}

// Tokens per block: a block of activations stays in (half of) L2 while rows go by.
int64_t QuantTokenBlock(int64_t K) { return std::max<int64_t>(kMaxRN, (256 * 1024) / K / kMaxRN * kMaxRN); }

template <GgmlType T, int... RNs>
void RunLegacy(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1,
               std::integer_sequence<int, RNs...>) {
  using Fn = void (*)(const uint8_t*, size_t, int64_t, const QuantActs&, int64_t, float*, size_t);
  static constexpr Fn kOne[] = {&LegacyTile<T, 1, RNs + 1>...};
  static constexpr Fn kTwo[] = {&LegacyTile<T, kLegacyRM, RNs + 1>...};
  const int64_t nb = w.cols / 32;
  const size_t ys = static_cast<size_t>(w.rows);
  const int64_t tb = QuantTokenBlock(w.cols);
  if (n == 1) {
    // One token: one row after the other, a single sequential stream. 4-row tiles were 1.3-1.7x
    // slower from memory on the Zen 5 VM (Q8_0 32000x768, one thread), 2-row tiles 3x.
    for (int64_t r = r0; r < r1; ++r) {
      LegacyTile<T, 1, 1>(w.data + static_cast<uint64_t>(r) * w.row_bytes, w.row_bytes, nb, a, 0, y + r, ys);
    }
    return;
  }
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    const int64_t t1 = std::min(n, t0 + tb);
    for (int64_t r = r0; r < r1; r += kLegacyRM) {
      const Fn* table = r + kLegacyRM <= r1 ? kTwo : kOne;
      for (int64_t t = t0; t < t1; t += kMaxRN) {
        const int rn = static_cast<int>(std::min<int64_t>(kMaxRN, t1 - t));
        table[rn - 1](w.data + static_cast<uint64_t>(r) * w.row_bytes, w.row_bytes, nb, a, t, y + t * w.rows + r, ys);
      }
      if (r + kLegacyRM > r1) break;  // the last odd row was done alone
    }
  }
}

template <GgmlType T, int... RNs>
void RunK(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1,
          std::integer_sequence<int, RNs...>) {
  using Fn = void (*)(const uint8_t*, int64_t, const QuantActs&, int64_t, float*, size_t);
  static constexpr Fn kTiles[] = {&KTile<T, RNs + 1>...};
  const int64_t nsb = w.cols / 256;
  const size_t ys = static_cast<size_t>(w.rows);
  const int64_t tb = QuantTokenBlock(w.cols);
  constexpr int kSlot = decode_order_slot_or_none(T);
  static_assert(kSlot >= 0, "every K-quant has a one-token decode order");
  constexpr auto kTilesOrder = static_cast<uint8_t>(DecodeOrder::kTiles);
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    const int64_t t1 = std::min(n, t0 + tb);
    int64_t r = r0;
    // One token: 4-row tiles (DecodeOrder::kTiles; the tail below takes the rest) or one row at a
    // time (kRows: the loop below, KTile<T, 1>: per row the same arithmetic as KRows'), as measured
    // at load (decode_order.h).
    if (t1 - t0 == 1 && g_decode_order[kSlot].load(std::memory_order_relaxed) == kTilesOrder) {
      for (; r + kDecodeRows <= r1; r += kDecodeRows) {
        KRows<T, kDecodeRows>(w.data + static_cast<uint64_t>(r) * w.row_bytes, w.row_bytes, nsb, a, t0,
                              y + t0 * w.rows + r);
      }
    }
    for (; r < r1; ++r) {
      for (int64_t t = t0; t < t1; t += kMaxRN) {
        const int rn = static_cast<int>(std::min<int64_t>(kMaxRN, t1 - t));
        kTiles[rn - 1](w.data + static_cast<uint64_t>(r) * w.row_bytes, nsb, a, t, y + t * w.rows + r, ys);
      }
    }
  }
}

void MatmulQuantRows(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1) {
  constexpr auto kRN = std::make_integer_sequence<int, kMaxRN>();
  if (quant_highway_forced()) return MatmulQuantRowsHwy(w, a, n, y, r0, r1);
  switch (w.type) {
    case GgmlType::kQ8_0: return RunLegacy<GgmlType::kQ8_0>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ4_0: return RunLegacy<GgmlType::kQ4_0>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ5_0: return RunLegacy<GgmlType::kQ5_0>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ4_1: return RunLegacy<GgmlType::kQ4_1>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ5_1: return RunLegacy<GgmlType::kQ5_1>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ2_K: return RunK<GgmlType::kQ2_K>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ3_K: return RunK<GgmlType::kQ3_K>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ4_K: return RunK<GgmlType::kQ4_K>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ5_K: return RunK<GgmlType::kQ5_K>(w, a, n, y, r0, r1, kRN);
    case GgmlType::kQ6_K: return RunK<GgmlType::kQ6_K>(w, a, n, y, r0, r1, kRN);
    default: return;  // the caller only sends quantized types
  }
}

#else  // !STRATA_X86_SIMD

// Every quantized type: the Highway kernels (matmul_quant_hwy-inl.h).
void MatmulQuantRows(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y, int64_t r0, int64_t r1) {
  MatmulQuantRowsHwy(w, a, n, y, r0, r1);
}

#endif  // STRATA_X86_SIMD

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(QuantizeActs);
HWY_EXPORT(MatmulQuantRows);
HWY_EXPORT(MatmulQuantGroups);

namespace {
size_t align64(size_t n) { return (n + 63) / 64 * 64; }
size_t word_bytes(size_t n, size_t cols, int32_t block) {
  return block == 256 ? align64(n * (cols / 256) * QuantActs::kActWords * sizeof(int32_t)) : 0;
}
}  // namespace

size_t QuantActs::bytes(int64_t n, int64_t cols, int32_t block) {
  const auto un = static_cast<size_t>(n), uc = static_cast<size_t>(cols);
  return align64(un * uc) + align64(un * (uc / static_cast<size_t>(block)) * sizeof(float)) +
         align64(un * (uc / 16) * sizeof(int16_t)) + word_bytes(un, uc, block);
}

QuantActs QuantActs::carve(uint8_t* mem, int64_t n, int64_t cols, int32_t block) {
  const auto un = static_cast<size_t>(n), uc = static_cast<size_t>(cols);
  QuantActs a;
  a.block = block;
  a.cols = cols;
  a.qs = reinterpret_cast<int8_t*>(mem);
  mem += align64(un * uc);
  a.d = reinterpret_cast<float*>(mem);
  mem += align64(un * (uc / static_cast<size_t>(block)) * sizeof(float));
  a.sums = reinterpret_cast<int16_t*>(mem);
  mem += align64(un * (uc / 16) * sizeof(int16_t));
  if (block == 256) a.words = reinterpret_cast<int32_t*>(mem);
  return a;
}

int32_t quant_act_block(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kQ4_1: case GgmlType::kQ5_1:
      return 32;
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return 256;
    default:
      return 0;
  }
}

namespace {
std::atomic<bool>& highway_forced() {
  static std::atomic<bool> forced = [] {
    const char* env = std::getenv("STRATA_QUANT_HWY");
    return env != nullptr && env[0] == '1';
  }();
  return forced;
}
}  // namespace

void set_quant_highway_forced(bool on) { highway_forced().store(on, std::memory_order_relaxed); }
bool quant_highway_forced() { return highway_forced().load(std::memory_order_relaxed); }

void quantize_acts(const float* x, int64_t t0, int64_t t1, const QuantActs& acts) {
  HWY_DYNAMIC_DISPATCH(QuantizeActs)(x, t0, t1, acts);
}

void matmul_quant_rows(const WeightMatrix& w, const QuantActs& acts, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (w.row_group == WeightMatrix::kQuantGroup) {  // every target: the kernel of matmul_quant_groups-inl.h
    if (r0 % WeightMatrix::kQuantGroup != 0) {
      throw std::invalid_argument(fmt::format("matmul over rows in groups of {}: rows [{}, {}) start inside a group",
                                              WeightMatrix::kQuantGroup, r0, r1));
    }
    return HWY_DYNAMIC_DISPATCH(MatmulQuantGroups)(w, acts, n, y, r0, r1);
  }
  HWY_DYNAMIC_DISPATCH(MatmulQuantRows)(w, acts, n, y, r0, r1);
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
