// Matmul for quantized weights (internal to backend/cpu; matmul.cpp drives it): activations are
// quantized to int8 once per call (QuantActs), then each block of a weight row is unpacked to 8-bit
// integers in registers and dotted with the activations of up to RN tokens at once, as exact
// integer sums (maddubs/madd on AVX2, dpbusd where AVX-512 VNNI is present), scaled and
// accumulated in f32.
//
// Per output the arithmetic is one sequence: for each block in order, an f32 FMA of the block's
// integer dot (times d_w · d_x) into 8 lanes, then the fixed lane-sum tree of simd_reduce-inl.h
// (plus, for Q4_1/Q5_1, a scalar sum of the min terms). Tiling and the number of tokens do not
// change it, so results are the same bit for bit whatever the batch is.
//
// Thread-safety: pure functions over caller memory; concurrent calls must write disjoint rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels.h"

namespace strata::cpu {

// Activations of n rows quantized to 8 bits: x[t][k] ≈ d[t][k / block] · qs[t][k], with the
// scale chosen per block as max|x| / 127 (so |qs| <= 127). Layout: qs [n][cols] (rows 32-byte
// aligned when the base is), d [n][cols / block], sums [n][cols / 16] (sum of each 16 qs, for the
// zero points and mins of the weight types), and for the K-quants (block 256) words [n][cols / 256]
// [kActWords]: per super-block, terms of its sums that the grouped kernels (matmul_quant_groups-inl.h)
// read as broadcast operands instead of computing them per group of rows (kActWord* below).
struct QuantActs {
  int32_t block = 32;  // 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256 for the K-quants
  int64_t cols = 0;
  int8_t* qs = nullptr;
  float* d = nullptr;
  int16_t* sums = nullptr;
  int32_t* words = nullptr;  // block 256 only (null otherwise)

  // A super-block's words. b_j = sums[2j] + sums[2j + 1] is the sum of its 32-column run j (|b_j| <=
  // 32 · 127), split as b_j = 128 · q_j + r_j (q_j = b_j >> 7 in -32..31, r_j = b_j & 127): words
  // kActWordQ + k and kActWordR + k hold q_{4k..4k+3} and r_{4k..4k+3} as signed bytes, so a byte
  // dot of 4 mins against each gives Σ m_j · b_j = 128 · Σ m_j q_j + Σ m_j r_j exactly (Q4_K, Q5_K).
  // kActWordZero + s: -32 · sums[s], the zero point of Q6_K's sub-block s of 16; kActWordZero4 + i:
  // -128 · sums[s] for s = 4, 5, 12, 13 (i = 0..3), the same for a run dotted at 4 times its value.
  static constexpr int kActWordQ = 0, kActWordR = 2, kActWordZero = 4, kActWordZero4 = 20, kActWords = 24;

  // Scratch bytes for n rows (each array 64-byte aligned within it).
  static size_t bytes(int64_t n, int64_t cols, int32_t block);
  // Points the arrays into `mem` (64-byte aligned, bytes(n, cols, block) long).
  static QuantActs carve(uint8_t* mem, int64_t n, int64_t cols, int32_t block);
};

// The activation block a quantized weight type is dotted with: 32, 256, or 0 for float types.
int32_t quant_act_block(GgmlType type);

// Quantizes rows [t0, t1) of x [n][acts.cols] into acts. Precondition: cols % acts.block == 0.
void quantize_acts(const float* x, int64_t t0, int64_t t1, const QuantActs& acts);

// y[t][r] for t < n, r0 <= r < r1 of a quantized weight matrix against activations quantized
// with quant_act_block(w.type). y: [n][w.rows]. Rows in groups (WeightMatrix::kQuantGroup): r0 must
// start a group (std::invalid_argument otherwise).
void matmul_quant_rows(const WeightMatrix& w, const QuantActs& acts, int64_t n, float* y, int64_t r0, int64_t r1);

// The portable Highway kernels (matmul_quant_hwy-inl.h) of every quantized type on x86 targets too,
// instead of their AVX2/AVX-512 intrinsics (which are faster there); other targets use them
// anyway. Initially on iff the environment has STRATA_QUANT_HWY=1. A test and benchmark hook;
// set it while no matmul runs.
void set_quant_highway_forced(bool on);
bool quant_highway_forced();

}  // namespace strata::cpu
