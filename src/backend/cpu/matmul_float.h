// Matmul for F32, F16 and BF16 weights (internal to backend/cpu; matmul.cpp drives it): register-
// blocked dot-product tiles over SIMD lanes of k, with weights widened to f32 exactly.
//
// Every output is one f32 FMA chain per lane over k (lanes of Lanes(float) consecutive columns,
// the last vector zero-padded), then a fixed horizontal-sum tree (simd_reduce-inl.h). Tiles,
// widened slices and token blocks change only which outputs are computed together, never that
// sequence, so an output is the same bit for bit whatever n and the row range are.
//
// Thread-safety: pure functions over caller memory; concurrent calls must write disjoint rows.
#pragma once

#include <cstdint>

#include "backend/cpu/decode_order.h"
#include "backend/cpu/kernels.h"

namespace strata::cpu {

// When a block of tokens needs more than one token group per tile (more tokens than the target's
// tile width: 3 on AVX2, 6 on AVX-512), each slice of f16/bf16 rows is widened once into an f32
// buffer that all the groups read; otherwise widening on the fly is cheaper. The caller provides
// the buffer from this many tokens on (the narrowest tile width + 1).
inline constexpr int64_t kFloatWidenMinTokens = 4;
// Rows of the widening buffer (at least every target's tile rows).
inline constexpr int64_t kFloatMaxSliceRows = 8;

// One token over rows as stored takes 4-row tiles or one row at a time: DecodeOrder (decode_order.h),
// measured at load per type.

// One token over rows in groups: its prefetch (GroupPrefetch) is in decode_order.h.

// f32 elements of the widening buffer matmul_float_rows() wants for n tokens (0: none).
int64_t matmul_float_slice_floats(const WeightMatrix& w, int64_t n);

// Whether matmul_float_rows takes w's x permuted (BF16 on AVX-512 targets, cols a multiple of 32:
// each line of 32 bf16 is read as 16 words, the even columns by a shift and the odd ones by a
// mask, so the activations must come in that order), and the permutation: per 32 columns, the 16
// even ones, then the 16 odd ones (x, xp: [n][cols]). The same products as unpermuted up to f32
// summation order; the same bits whatever n. False for every type but BF16.
bool matmul_float_permutes_x(const WeightMatrix& w);
void matmul_float_permute_x(const float* x, int64_t n, int64_t cols, float* xp);

// y[t][r] = Σ_k w[r][k] · x[t][k] for t < n, r0 <= r < r1. x: [n][w.cols] (permuted where
// matmul_float_permutes_x(w)), y: [n][w.rows].
// slice: matmul_float_slice_floats(w, n) floats, or null to widen on the fly (required when that
// is 0). Precondition: w.type is F32, F16 or BF16.
void matmul_float_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                       float* slice);

}  // namespace strata::cpu
