// F32/F16/BF16 matmul kernels, compiled once per SIMD target (Highway foreach_target) and chosen at
// run time. See matmul_float.h for the arithmetic contract.
//
// Shapes: W [rows][K] (row-major, a row per output feature), x [n][K], y [n][rows].
// A tile is RM weight rows × RN tokens: RM·RN vector accumulators, and per k step RM weight
// vectors (widened from f16/bf16 on the fly, or read from an f32 slice buffer) and RN token vectors.
//   AVX2 (16 registers): up to 4 × 3  (12 accumulators + 3 token vectors + 1 weight vector).
//   AVX-512 (32 registers): up to 4 × 6 (24 + 6 + 1).
// One token (decode): 4-row tiles, or one row at a time (RunRowwise) where that streams faster
// (DecodeOrder, chosen at load: decode_order.h). Few tokens (small decode batches): weights are streamed
// once, each weight vector feeding up to RN tokens.
// Many tokens (prefill, batches): tokens go in blocks that stay in L2; for each block, an RM-row
// slice of f16/bf16 weights is widened once into an L1-sized f32 buffer (prefetching the next
// slice meanwhile) and every token group of the block reads it from there.
// Rows in groups (WeightMatrix::row_group, F16/BF16 copied by CpuBackend): a group of 4 rows is
// one sequential stream of cache lines, row after row within each line's k range; one token
// always goes in 4-row tiles over it (with software prefetch or not: GroupPrefetch, measured at
// load), few tokens in direct tiles (not the narrow path), many tokens widen a group line by line.

#include "backend/cpu/matmul_float.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "core/fp16.h"
#include "gguf/tensor_type.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/matmul_float.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backend/cpu/prefetch-inl.h"
#include "backend/cpu/simd_reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET <= HWY_AVX3
constexpr int kMaxRM = 4;
constexpr int kMaxRN = 6;
#else
constexpr int kMaxRM = 4;
constexpr int kMaxRN = 3;
#endif
static_assert(kMaxRM <= kFloatMaxSliceRows);

// Weight element types as stored: f32, IEEE half, bfloat16 (both 16-bit patterns).
struct F16Bits { uint16_t bits; };
struct BF16Bits { uint16_t bits; };

HWY_INLINE VF LoadW(DF d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadW(DF d, const F16Bits* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}
HWY_INLINE VF LoadW(DF d, const BF16Bits* p) {
  // bf16 is the upper half of an f32: widen the 16-bit patterns and shift them up.
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<uint32_t, DF> du32;
  const auto wide = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(d, hn::ShiftLeft<16>(wide));
}

// The weights of a tile's k step for RN tokens: LoadW, except bf16 for one token on AVX2, where the
// 16 bytes of 8 bf16 go into both 128-bit halves and one byte shuffle per half puts bf16 k in the
// upper half of f32 lane k, zeros below: the same f32s in one shuffle instead of a widening and a
// shift. On the Zen 3 VM one token's [2048 × 768] BF16 took 74 against 84 µs in cache this way
// (within noise in a second run), and tg128 of llama-134m BF16 rose 0-14% (docs/PERFORMANCE.md);
// but a 4 × 3 tile (8 tokens) took 522 against 384 µs, so wider tiles keep the widening.
template <int RN, typename WT>
HWY_INLINE VF LoadWTile(DF d, const WT* p) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (RN == 1 && std::is_same_v<WT, BF16Bits>) {
    (void)d;
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i idx = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,  //
                                         -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return VF{_mm256_castsi256_ps(_mm256_shuffle_epi8(both, idx))};
  }
#endif
  return LoadW(d, p);
}

// BF16 on AVX-512, K a multiple of 32 ("even/odd" order): a 64-byte line of 32 bf16 is 16
// words; the even elements are those words shifted up 16 bits, the odd ones the words with their
// low half cleared: one integer op per 16 weights and no widening shuffle. The activations come
// permuted to match (matmul_float_permute_x: per 32 columns the 16 even ones, then the 16 odd
// ones), so a line's first vector step (kk = 0) multiplies the even weights, its second (kk = 16)
// the odd ones, and every path (tiles, rows one at a time, widened slices) takes that order: an
// output's FMA sequence is still the same whatever n and the rows (docs/PERFORMANCE.md, issue 17).
#if HWY_TARGET <= HWY_AVX3
constexpr bool kEvenOddTarget = true;
#else
constexpr bool kEvenOddTarget = false;
#endif
constexpr size_t kEvenOddBlock = 32;
HWY_INLINE bool EvenOdd(GgmlType type, size_t K) {
  return kEvenOddTarget && type == GgmlType::kBF16 && K % kEvenOddBlock == 0;
}
// The weights of vector step kk (0: even, 16: odd) of the 32 bf16 at `line`.
HWY_INLINE VF LoadWEvenOdd(DF d, const BF16Bits* line, size_t kk) {
  const hn::RebindToUnsigned<DF> du;
  const auto words = hn::LoadU(du, reinterpret_cast<const uint32_t*>(line));
  return kk == 0 ? hn::BitCast(d, hn::ShiftLeft<16>(words)) : hn::BitCast(d, hn::And(words, hn::Set(du, 0xFFFF0000u)));
}

HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const F16Bits* p) { return fp16_to_f32(p->bits); }
HWY_INLINE float ScalarW(const BF16Bits* p) { return bf16_to_f32(p->bits); }

// Weights streamed from memory are short interleaved streams (RM rows of a few KiB) that hardware
// prefetchers pick up late; the tile prefetches the same columns of the RM rows kPrefetchTiles
// tiles ahead (contiguous in memory) one cache line per row at a time; past the matrix's end the
// hints are harmless. Into L2, not L1: L1 can track only a few misses at a time, too few to
// stream at full memory bandwidth.
template <typename WT>
constexpr size_t kElemsPerLine = 64 / sizeof(WT);
// How many tiles ahead: one tile's worth of rows (a few KiB) was too short a distance to hide
// memory latency once a tile does several tokens' FMAs per weight (B=8 decode +12% on a Xeon).
constexpr int kPrefetchTiles = 4;
// A grouped tile (one token over rows in groups) with GroupPrefetch::kSoftware prefetches
// kPrefetchTiles groups ahead, but no more than kGroupPrefetchMaxBytes: four groups of long rows (4 ×
// 16 KB: llama-1b's down projection) put the hints 256 KB ahead of the stream and, at a chunk's end,
// 256 KB into rows that another chunk reads. One 64 KB group ahead took that projection from
// 1,317-1,348 to 1,258-1,288 µs on the Xeon VM (docs/PERFORMANCE.md); groups of up to 16 KB keep 4
// ahead. kSoftware16K and kSoftware4K go that many bytes ahead (a multiple of a group's line of 4
// rows, so each row's hint lands on a line of the same row).
constexpr size_t kGroupPrefetchMaxBytes = 64 * 1024;
template <typename WT>
HWY_INLINE size_t GroupAheadElems(size_t ws, uint8_t prefetch) {
  switch (static_cast<GroupPrefetch>(prefetch)) {
    case GroupPrefetch::kSoftware16K: return 16384 / sizeof(WT);
    case GroupPrefetch::kSoftware4K: return 4096 / sizeof(WT);
    default: break;
  }
  const size_t group_elems = WeightMatrix::kRowGroup * ws;
  return group_elems * std::clamp<size_t>(kGroupPrefetchMaxBytes / (group_elems * sizeof(WT)), 1, kPrefetchTiles);
}
template <typename WT>
constexpr int kFloatSlot = std::is_same_v<WT, float> ? 0 : (std::is_same_v<WT, F16Bits> ? 1 : 2);  // decode_order_slot

template <typename T>
HWY_INLINE void PrefetchL2(const T* p) {
  __builtin_prefetch(p, 0, 2);
}

// Rows in groups (WeightMatrix::row_group): a group's rows interleaved one cache line at a time.
constexpr size_t kGroupRows = WeightMatrix::kRowGroup;
static_assert(kGroupRows % kMaxRM == 0, "a tile's rows lie in one group");

// Row r (counted from a group's first row) of weights w with row stride ws (elements of one row).
template <bool kGrouped, typename WT>
HWY_INLINE const WT* RowPtr(const WT* w, size_t ws, int64_t r) {
  if constexpr (kGrouped) {
    const auto g = static_cast<size_t>(r) / kGroupRows, j = static_cast<size_t>(r) % kGroupRows;
    return w + g * kGroupRows * ws + j * kElemsPerLine<WT>;
  } else {
    return w + static_cast<size_t>(r) * ws;
  }
}

// Tile's loop over whole lines of weights (k < K / C * C; returns the k it stopped at), adding into
// acc. kEvenOdd: BF16 lines read in even/odd order (x permuted): the choice of load is a template
// argument, so the loop has no branch per load.
template <int RM, int RN, bool kPrefetch, bool kGrouped, bool kEvenOdd, typename WT>
HWY_INLINE size_t TileLines(VF (&acc)[RM][RN], const WT* HWY_RESTRICT w, size_t ws, const float* HWY_RESTRICT x,
                            size_t xs, size_t K, [[maybe_unused]] size_t ahead) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t C = kElemsPerLine<WT>;
  // From one row to the next at the same k, and from a row's line to its next line.
  const size_t rs = kGrouped ? C : ws;
  constexpr size_t cs = kGrouped ? kGroupRows * C : C;
  size_t k = 0;
  const WT* wc = w;
  for (; k + C <= K; k += C, wc += cs) {
    // Rows as stored: kPrefetchTiles tiles of RM rows ahead, here. Rows in groups: `ahead`
    // elements ahead, the line of each of the group's rows right after the first load of its row's
    // line (below).
    if constexpr (kPrefetch && !kGrouped) {
#pragma GCC unroll 8
      for (int r = 0; r < RM; ++r) PrefetchL2(wc + r * rs + kPrefetchTiles * RM * ws);
    }
    // The line's vector steps.
#pragma GCC unroll 4
    for (size_t kk = 0; kk < C; kk += N) {
      VF xv[RN];
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) xv[c] = hn::LoadU(d, x + c * xs + k + kk);
#pragma GCC unroll 8
      for (int r = 0; r < RM; ++r) {
        VF wv;
        if constexpr (kEvenOdd) {  // C = 32, N = 16: kk = 0 the even weights, 16 the odd ones
          wv = LoadWEvenOdd(d, wc + r * rs, kk);
        } else {
          wv = LoadWTile<RN>(d, wc + r * rs + kk);
        }
        if constexpr (kPrefetch && kGrouped) {
          // Row r's line `ahead` elements ahead; a tile of fewer rows than the group's also
          // fetches the lines of the rows after its own (harmless hints).
          if (kk == 0) {
            PrefetchL2Tied(wc + r * C + ahead, wv);
            if (r + 1 == RM) {
              for (size_t q = RM; q < kGroupRows; ++q) PrefetchL2(wc + q * C + ahead);
            }
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) acc[r][c] = hn::MulAdd(wv, xv[c], acc[r][c]);
      }
    }
  }
  return k;
}

// y[c * ys + r] for r < RM, c < RN: dot products of weight rows w, w + ws, ... (kGrouped: rows of
// one group, w the first of them, K a multiple of a line's elements) with token rows x + c*xs.
// The k loop goes by cache lines of weights (C elements), each line a few SIMD vectors; the FMA
// sequence per output is the same either way (k ascending, one vector at a time).
template <int RM, int RN, bool kPrefetch, bool kGrouped, typename WT>
HWY_NOINLINE void Tile(const WT* HWY_RESTRICT w, size_t ws, const float* HWY_RESTRICT x, size_t xs, size_t K,
                       float* HWY_RESTRICT y, size_t ys) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF acc[RM][RN];
#pragma GCC unroll 8
  for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < RN; ++c) acc[r][c] = hn::Zero(d);
  }
  const size_t ahead =
      kPrefetch && kGrouped ? GroupAheadElems<WT>(ws, g_group_prefetch[kFloatSlot<WT>].load(std::memory_order_relaxed)) : 0;
  size_t k;
  if constexpr (std::is_same_v<WT, BF16Bits> && kEvenOddTarget) {
    k = EvenOdd(GgmlType::kBF16, K) ? TileLines<RM, RN, kPrefetch, kGrouped, true>(acc, w, ws, x, xs, K, ahead)
                                    : TileLines<RM, RN, kPrefetch, kGrouped, false>(acc, w, ws, x, xs, K, ahead);
  } else {
    k = TileLines<RM, RN, kPrefetch, kGrouped, false>(acc, w, ws, x, xs, K, ahead);
  }
  if constexpr (!kGrouped) {
    for (; k + N <= K; k += N) {
      VF xv[RN];
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) xv[c] = hn::LoadU(d, x + c * xs + k);
#pragma GCC unroll 8
      for (int r = 0; r < RM; ++r) {
        const VF wv = LoadW(d, w + r * ws + k);
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) acc[r][c] = hn::MulAdd(wv, xv[c], acc[r][c]);
      }
    }
    if (k < K) {
      // The last partial vector, zero-padded: the same FMA step in every tile shape.
      HWY_ALIGN float buf[hn::MaxLanes(d)];
      VF xt[RN];
#pragma GCC unroll 8
      for (int c = 0; c < RN; ++c) {
        for (size_t i = 0; i < N; ++i) buf[i] = k + i < K ? x[c * xs + k + i] : 0.0f;
        xt[c] = hn::Load(d, buf);
      }
#pragma GCC unroll 8
      for (int r = 0; r < RM; ++r) {
        for (size_t i = 0; i < N; ++i) buf[i] = k + i < K ? ScalarW(w + r * ws + k + i) : 0.0f;
        const VF wt = hn::Load(d, buf);
#pragma GCC unroll 8
        for (int c = 0; c < RN; ++c) acc[r][c] = hn::MulAdd(wt, xt[c], acc[r][c]);
      }
    }
  }
  // Unrolled, as every loop over acc: with a variable index GCC keeps acc in memory, and then stored
  // every accumulator once per line of the loops above.
#pragma GCC unroll 8
  for (int r = 0; r < RM; ++r) {
    float sums[RN];
    ReduceSums<RN>(acc[r], sums);
    for (int c = 0; c < RN; ++c) y[c * ys + r] = sums[c];
  }
}

template <typename WT>
using TileFn = void (*)(const WT*, size_t, const float*, size_t, size_t, float*, size_t);

template <typename WT, bool kPrefetch, bool kGrouped, int RM, int... RNs>
constexpr auto TileRow(std::integer_sequence<int, RNs...>) {
  return std::array<TileFn<WT>, kMaxRN>{&Tile<RM, RNs + 1, kPrefetch, kGrouped, WT>...};
}
template <typename WT, bool kPrefetch, bool kGrouped, int... RMs>
constexpr auto TileTable(std::integer_sequence<int, RMs...>) {
  return std::array<std::array<TileFn<WT>, kMaxRN>, kMaxRM>{
      TileRow<WT, kPrefetch, kGrouped, RMs + 1>(std::make_integer_sequence<int, kMaxRN>())...};
}

// Few tokens (a decode batch) on AVX2: every token against each weight row in one pass, so each
// 16-bit weight is loaded and converted once and the weight stream overlaps the FMAs (widening
// first would serialize a memory-bound pass and a compute-bound one). One row at a time: 8
// accumulators and 8 token vectors fill AVX2's 16 registers. On AVX-512 (32 registers, tiles
// of up to 6 tokens) widening into 4 + 4 token groups measured faster (docs/PERFORMANCE.md),
// so the narrow path is AVX2's alone.
#if HWY_TARGET <= HWY_AVX3
constexpr int kNarrowMaxTokens = 0;
#else
constexpr int kNarrowMaxTokens = 8;
#endif

template <typename WT, int... RNs>
constexpr auto NarrowTable(std::integer_sequence<int, RNs...>) {
  return std::array<TileFn<WT>, sizeof...(RNs)>{&Tile<1, RNs + 1, true, false, WT>...};
}

template <typename WT>
void RunNarrow(const WT* w, size_t ws, int64_t m, const float* x, size_t K, int64_t n, float* y, size_t ys) {
  static constexpr auto kTiles = NarrowTable<WT>(std::make_integer_sequence<int, kNarrowMaxTokens>());
  for (int64_t r = 0; r < m; ++r) kTiles[n - 1](w + r * ws, ws, x, K, K, y + r, ys);
}

// Widens rows [0, m) of a 16-bit weight type into f32 rows [m][K] at dst, prefetching the slice
// after next as it goes (the tiles between two widenings issue no memory requests of their own).
template <typename WT>
void Widen(const WT* w, size_t ws, int64_t m, size_t K, float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (int64_t r = 0; r < m; ++r) {
    const WT* src = w + r * ws;
    float* out = dst + r * K;
    size_t k = 0;
    if constexpr (std::is_same_v<WT, BF16Bits> && kEvenOddTarget) {
      if (EvenOdd(GgmlType::kBF16, K)) {  // the slice in even/odd order, as the tiles read lines
        for (; k < K; k += N) {
          if (k % kElemsPerLine<WT> == 0) PrefetchL2(src + 2 * m * ws + k);
          hn::StoreU(LoadWEvenOdd(d, src + k / kEvenOddBlock * kEvenOddBlock, k % kEvenOddBlock), d, out + k);
        }
      }
    }
    for (; k + N <= K; k += N) {
      if (k % kElemsPerLine<WT> == 0) PrefetchL2(src + 2 * m * ws + k);
      hn::StoreU(LoadW(d, src + k), d, out + k);
    }
    for (; k < K; ++k) out[k] = ScalarW(src + k);
  }
}

// The same for m rows of one group (w its first row): line by line in memory order, so that the
// group is read as one sequential stream (K a multiple of a line's elements).
template <typename WT>
void WidenGroup(const WT* w, size_t ws, int64_t m, size_t K, float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t C = kElemsPerLine<WT>;
  const size_t ahead = 2 * kGroupRows * ws;  // the group after next
  for (size_t k = 0; k < K; k += C) {
    const WT* line = w + (k / C) * kGroupRows * C;
    for (int64_t r = 0; r < m; ++r, line += C) {
      PrefetchL2(line + ahead);
      float* out = dst + r * K + k;
      if constexpr (std::is_same_v<WT, BF16Bits> && kEvenOddTarget) {
        if (EvenOdd(GgmlType::kBF16, K)) {  // (K is a multiple of the line's 32 elements here)
          for (size_t kk = 0; kk < C; kk += N) hn::StoreU(LoadWEvenOdd(d, line, kk), d, out + kk);
          continue;
        }
      }
#pragma GCC unroll 4
      for (size_t kk = 0; kk < C; kk += N) hn::StoreU(LoadW(d, line + kk), d, out + kk);
    }
  }
}

// One token (decode) with DecodeOrder::kRows: one row after the other, a single sequential
// stream, no software prefetch. Tiles of 4 rows read 4 short interleaved streams (rows of a few
// KiB) that some hardware prefetchers follow badly: on the Zen 5 VM a decode step of llama-134m
// F16 took 4.40-4.49 ms of ops row by row against 5.06-5.19 ms in 4-row tiles with prefetch
// (BF16 6.66-6.78 against 7.93-8.09; the LM head streamed 61 against 51 GB/s), and a standalone
// loop read 50-54 GB/s one row at a time against 24 (2-row), 27 (4-row) and 39-43 GB/s (4-row
// with prefetch), with a pure read at 50-65. Each output is the same single FMA chain as in a
// tile, so the bits are the same. On the H200 machine's Xeon the same order was 1.5-2x slower
// than the tiles (one chain's latency bounds it there), hence the choice at load (decode_order.h).
template <typename WT>
void RunRowwise(const WT* w, size_t ws, int64_t m, const float* x, size_t K, float* y) {
  for (int64_t r = 0; r < m; ++r) Tile<1, 1, false, false, WT>(w + r * ws, ws, x, K, K, y + r, 0);
}

// Rows [0, m) of w (stride ws) against tokens [0, n) of x: RM-row slices outermost within each
// token block, so a slice stays in L1 while the block's tokens go by. A block's tokens are split
// into groups of nearly equal size (8 tokens with RN = 6: 4 + 4, not 6 + 2).
// With `slice` (16-bit weights, many tokens), each RM-row slice is first widened into it, so a
// weight is converted once per token block instead of once per token group.
// kGrouped: w's rows lie in groups (WeightMatrix::row_group), w the first row of a group; one
// token then always goes in tiles of a group's rows (one sequential stream and 4 FMA chains in
// flight: the best of both orders).
template <bool kGrouped, typename WT>
void RunTiles(const WT* w, size_t ws, int64_t m, const float* x, size_t K, int64_t n, float* y, size_t ys,
              float* slice) {
  constexpr int kSlot = kFloatSlot<WT>;
  if (!kGrouped && n == 1 && g_decode_order[kSlot].load(std::memory_order_relaxed) ==
                    static_cast<uint8_t>(DecodeOrder::kRows)) {
    RunRowwise(w, ws, m, x, K, y);
    return;
  }
  if constexpr (!std::is_same_v<WT, float> && kNarrowMaxTokens > 0 && !kGrouped) {
    if (n > kMaxRN && n <= kNarrowMaxTokens) {
      RunNarrow(w, ws, m, x, K, n, y, ys);
      return;
    }
  }
  static constexpr auto kDirectPf = TileTable<WT, true, kGrouped>(std::make_integer_sequence<int, kMaxRM>());
  const auto* direct = &kDirectPf;
  if constexpr (kGrouped) {
    // One token over rows in groups: with or without software prefetch (and how far ahead: the
    // tile reads it), as measured at load.
    static constexpr auto kDirectHw = TileTable<WT, false, true>(std::make_integer_sequence<int, kMaxRM>());
    const auto hardware = static_cast<uint8_t>(GroupPrefetch::kHardware);
    if (n == 1 && g_group_prefetch[kSlot].load(std::memory_order_relaxed) == hardware) {
      direct = &kDirectHw;
    }
  }
  const auto& kDirect = *direct;
  static constexpr auto kWidened = TileTable<float, false, false>(std::make_integer_sequence<int, kMaxRM>());
  // Tokens per block: a block of x rows stays in (half of) L2 while weight slices go by.
  const int64_t fit = static_cast<int64_t>((192 * 1024) / (K * sizeof(float)));
  const int64_t token_block = std::max<int64_t>(kMaxRN, fit / kMaxRN * kMaxRN);
  for (int64_t t0 = 0; t0 < n; t0 += token_block) {
    const int64_t t1 = std::min(n, t0 + token_block);
    const int64_t groups = (t1 - t0 + kMaxRN - 1) / kMaxRN;
    // Widening pays off once a slice feeds more than one token group.
    // Rows in groups with few tokens (AVX2's narrow range) take direct tiles instead: each slice is
    // read from memory by the first token group and from L1 by the others. On the Zen 3 VM at B = 8
    // that was level with rows as stored (389-398 against 387-459 tok/s), where the narrow path's
    // one row at a time (a group's lines in four strided passes, even with each group first copied
    // out as rows) and widening were 16-25% slower.
    const bool widen = slice != nullptr && groups > 1 && !(kGrouped && n <= kNarrowMaxTokens);
    for (int64_t r = 0; r < m; r += kMaxRM) {
      const int rm = static_cast<int>(std::min<int64_t>(kMaxRM, m - r));
      if constexpr (!std::is_same_v<WT, float>) {
        if (widen) {
          if constexpr (kGrouped) {
            WidenGroup(RowPtr<kGrouped>(w, ws, r), ws, rm, K, slice);
          } else {
            Widen(w + r * ws, ws, rm, K, slice);
          }
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t ta = t0 + (t1 - t0) * g / groups, tb = t0 + (t1 - t0) * (g + 1) / groups;
        if (widen) {
          kWidened[rm - 1][tb - ta - 1](slice, K, x + ta * K, K, K, y + ta * ys + r, ys);
        } else {
          kDirect[rm - 1][tb - ta - 1](RowPtr<kGrouped>(w, ws, r), ws, x + ta * K, K, K, y + ta * ys + r, ys);
        }
      }
    }
  }
}

template <typename WT>
void RunLayout(const WeightMatrix& w, const WT* base, size_t ws, int64_t m, const float* x, size_t K, int64_t n,
               float* y, size_t ys, float* slice) {
  if (w.row_group != 0) {
    RunTiles<true>(base, ws, m, x, K, n, y, ys, slice);
  } else {
    RunTiles<false>(base, ws, m, x, K, n, y, ys, slice);
  }
}

void MatmulFloatRows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                     float* slice) {
  const size_t K = static_cast<size_t>(w.cols);
  const size_t ys = static_cast<size_t>(w.rows);
  const int64_t m = r1 - r0;
  float* yr = y + r0;
  // In a grouped matrix r0 starts a group (matmul_float_rows checks), which starts at the same byte.
  const uint8_t* base = w.data + static_cast<uint64_t>(r0) * w.row_bytes;
  switch (w.type) {
    case GgmlType::kF32:
      RunTiles<false>(reinterpret_cast<const float*>(base), w.row_bytes / 4, m, x, K, n, yr, ys, nullptr);
      return;
    case GgmlType::kF16:
      RunLayout(w, reinterpret_cast<const F16Bits*>(base), w.row_bytes / 2, m, x, K, n, yr, ys, slice);
      return;
    case GgmlType::kBF16:
      RunLayout(w, reinterpret_cast<const BF16Bits*>(base), w.row_bytes / 2, m, x, K, n, yr, ys, slice);
      return;
    default:
      return;  // the caller only sends float types
  }
}

bool MatmulFloatPermutesX(GgmlType type, int64_t cols) { return EvenOdd(type, static_cast<size_t>(cols)); }

void MatmulFloatPermuteX(const float* x, int64_t n, int64_t cols, float* xp) {
  const auto K = static_cast<size_t>(cols);
  constexpr size_t B = kEvenOddBlock, H = kEvenOddBlock / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* src = x + static_cast<size_t>(t) * K;
    float* dst = xp + static_cast<size_t>(t) * K;
#if HWY_TARGET <= HWY_AVX3
    const DF d;
    if (hn::Lanes(d) == H) {  // two vectors: their even lanes, then their odd lanes
      for (size_t k = 0; k < K; k += B) {
        const VF lo = hn::LoadU(d, src + k), hi = hn::LoadU(d, src + k + H);
        hn::StoreU(hn::ConcatEven(d, hi, lo), d, dst + k);
        hn::StoreU(hn::ConcatOdd(d, hi, lo), d, dst + k + H);
      }
      continue;
    }
#endif
    for (size_t k = 0; k < K; k += B) {
      for (size_t i = 0; i < H; ++i) {
        dst[k + i] = src[k + 2 * i];
        dst[k + H + i] = src[k + 2 * i + 1];
      }
    }
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(MatmulFloatRows);
HWY_EXPORT(MatmulFloatPermutesX);
HWY_EXPORT(MatmulFloatPermuteX);

bool matmul_float_permutes_x(const WeightMatrix& w) { return HWY_DYNAMIC_DISPATCH(MatmulFloatPermutesX)(w.type, w.cols); }

void matmul_float_permute_x(const float* x, int64_t n, int64_t cols, float* xp) {
  HWY_DYNAMIC_DISPATCH(MatmulFloatPermuteX)(x, n, cols, xp);
}

int64_t matmul_float_slice_floats(const WeightMatrix& w, int64_t n) {
  if (w.type == GgmlType::kF32 || n < kFloatWidenMinTokens) return 0;
  return kFloatMaxSliceRows * w.cols;
}

void matmul_float_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                       float* slice) {
  if (w.row_group != 0) {
    if (w.row_group != WeightMatrix::kRowGroup || w.type == GgmlType::kF32 || w.row_bytes % 64 != 0 ||
        r0 % WeightMatrix::kRowGroup != 0) {
      throw std::invalid_argument(
          fmt::format("matmul: rows in groups of {} ({}, {} bytes a row) from row {}: expected groups of {} of "
                      "f16/bf16 rows of a multiple of 64 bytes, from a group's first row",
                      w.row_group, ggml_type_name(w.type), w.row_bytes, r0, WeightMatrix::kRowGroup));
    }
  }
  HWY_DYNAMIC_DISPATCH(MatmulFloatRows)(w, x, n, y, r0, r1, slice);
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
