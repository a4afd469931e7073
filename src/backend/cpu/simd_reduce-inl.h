// Per-target horizontal sums with a fixed summation tree, shared by the matmul and attention
// kernels. Every dot product of a kernel ends in one of these, and the tree a lane goes through
// does not depend on which other accumulators are reduced with it: that is what makes a row's
// result independent of the tile (and so of the batch) it was computed in.
// Included once per Highway target (foreach_target); thread-safety: pure functions.

#if defined(STRATA_BACKEND_CPU_SIMD_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_BACKEND_CPU_SIMD_REDUCE_INL_H_
#undef STRATA_BACKEND_CPU_SIMD_REDUCE_INL_H_
#else
#define STRATA_BACKEND_CPU_SIMD_REDUCE_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#undef STRATA_X86_SIMD
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define STRATA_X86_SIMD 1

// Lane sums of four 8-lane vectors: out[i] = ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)) of vector i.
HWY_INLINE void Reduce4x256(__m256 a, __m256 b, __m256 c, __m256 d, float* out) {
  const __m256 ab = _mm256_hadd_ps(a, b);
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

HWY_INLINE __m256 Fold(VF v) {
#if HWY_TARGET == HWY_AVX2
  return v.raw;
#else
  // 16 lanes: add the upper half onto the lower first.
  return _mm256_add_ps(_mm512_castps512_ps256(v.raw),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.raw), 1)));
#endif
}

// out[i] = sum of the lanes of v[i] for i < kCount (any count; the tree per vector is the same).
template <int kCount, class V, class FoldFn>
HWY_INLINE void ReduceGroups(const V* v, float* out, FoldFn fold) {
  if constexpr (kCount > 4) {
    ReduceGroups<4>(v, out, fold);
    ReduceGroups<kCount - 4>(v + 4, out + 4, fold);
  } else {
    __m256 f[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < kCount; ++i) f[i] = fold(v[i]);
    float tmp[4];
    Reduce4x256(f[0], f[1], f[2], f[3], tmp);
    for (int i = 0; i < kCount; ++i) out[i] = tmp[i];
  }
}

template <int kCount>
HWY_INLINE void ReduceSums(const VF* v, float* out) {
  ReduceGroups<kCount>(v, out, [](VF x) { return Fold(x); });
}

// The same tree for 8-lane integer-dot accumulators (__m256), used by the quantized kernels on
// every x86 target.
template <int kCount>
HWY_INLINE void ReduceSums256(const __m256* v, float* out) {
  ReduceGroups<kCount>(v, out, [](__m256 x) { return x; });
}

#else
#define STRATA_X86_SIMD 0

// Pairwise tree over the lanes, the same for every vector.
HWY_INLINE float ReduceOne(VF v) {
  const DF d;
  HWY_ALIGN float lanes[hn::MaxLanes(d)];
  hn::Store(v, d, lanes);
  size_t n = hn::Lanes(d);
  while (n > 1) {
    for (size_t i = 0; i < n / 2; ++i) lanes[i] = lanes[2 * i] + lanes[2 * i + 1];
    n /= 2;
  }
  return lanes[0];
}

template <int kCount>
HWY_INLINE void ReduceSums(const VF* v, float* out) {
  for (int i = 0; i < kCount; ++i) out[i] = ReduceOne(v[i]);
}
#endif

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
