// On-disk block layouts of ggml's quantized tensor types, field for field as ggml-common.h has
// them, so that a row of a GGUF tensor is an array of these structs. Half-precision fields are
// uint16_t bit patterns (decode with fp16_to_f32 from core/fp16.h); multi-byte fields are
// little-endian on disk, as on every host Strata targets.
//
// A block of QK elements is split into sub-blocks that share a quantized scale (and min); the
// comments give each field's shape and how element e of the block is found in it. The reference
// code (gguf/quant.cpp) and the SIMD kernels read these structs; rows in a mapped file are only as
// aligned as the file's tensor alignment, so code that may see unaligned rows copies a block out
// with memcpy instead of dereferencing a cast pointer.
//
// Thread-safety: types and pure inline functions only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace strata {

// Elements per block.
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;  // every K-quant super-block
// Bytes of the packed 6-bit scales (and mins) of Q3_K, Q4_K and Q5_K.
inline constexpr int kKScaleSize = 12;

// ---- legacy types: one scale per 32 elements ----

// x[e] = d * (q[e] - 8); q[e] is the low nibble of qs[e] for e < 16, the high nibble of qs[e - 16]
// otherwise.
struct BlockQ4_0 {
  uint16_t d;                 // fp16 scale
  uint8_t qs[kQK4_0 / 2];     // [16] 4-bit quants, two per byte
};

// x[e] = d * q[e] + m; nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;                 // fp16 scale
  uint16_t m;                 // fp16 min (added)
  uint8_t qs[kQK4_1 / 2];     // [16]
};

// x[e] = d * (q[e] - 16); q[e] = nibble as in Q4_0 | bit e of qh (a little-endian uint32) << 4.
struct BlockQ5_0 {
  uint16_t d;                 // fp16 scale
  uint8_t qh[4];              // [32 bits] fifth bit of each quant
  uint8_t qs[kQK5_0 / 2];     // [16] low 4 bits
};

// x[e] = d * q[e] + m; q[e] as in Q5_0 (without the offset).
struct BlockQ5_1 {
  uint16_t d;                 // fp16 scale
  uint16_t m;                 // fp16 min (added)
  uint8_t qh[4];              // [32 bits]
  uint8_t qs[kQK5_1 / 2];     // [16]
};

// x[e] = d * qs[e].
struct BlockQ8_0 {
  uint16_t d;                 // fp16 scale
  int8_t qs[kQK8_0];          // [32]
};

// x[e] = d * qs[e]; s caches d * sum(qs) for the dot products with Q4_1/Q5_1.
struct BlockQ8_1 {
  uint16_t d;                 // fp16 scale
  uint16_t s;                 // fp16 d * sum(qs)
  int8_t qs[kQK8_1];          // [32]
};

// ---- K-quants: super-blocks of 256 elements ----

// 16 sub-blocks of 16. With h = e / 128, j = (e % 128) / 32, l = e % 32:
//   q = (qs[32 h + l] >> 2 j) & 3,   s = scales[e / 16],
//   x[e] = d * (s & 0xF) * q - dmin * (s >> 4).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16]; // [16] 4-bit scale (low) and 4-bit min (high) per sub-block
  uint8_t qs[kQK_K / 4];      // [64] 2-bit quants, four per byte
  uint16_t d;                 // fp16 scale of the scales
  uint16_t dmin;              // fp16 scale of the mins
};

// 16 sub-blocks of 16, symmetric. With h, j, l as in Q2_K:
//   q = ((qs[32 h + l] >> 2 j) & 3) | (bit (e / 32) of hmask[l]) << 2,   range 0..7,
//   x[e] = d * (sc[e / 16] - 32) * (q - 4),
// where sc[i] (6 bits) is q3_k_scale(i, scales).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];   // [32] third bit of each quant
  uint8_t qs[kQK_K / 4];      // [64] low 2 bits
  uint8_t scales[kKScaleSize];// [12] sixteen 6-bit scales: low nibbles in 0..7, high pairs in 8..11
  uint16_t d;                 // fp16 scale of the scales
};

// 8 sub-blocks of 32. With c = e / 64, r = e % 64:
//   q = r < 32 ? qs[32 c + r] & 0xF : qs[32 c + r - 32] >> 4,
//   x[e] = d * sc[e / 32] * q - dmin * m[e / 32],   (sc, m) = k4_scale_min(e / 32, scales).
struct BlockQ4_K {
  uint16_t d;                 // fp16 scale of the scales
  uint16_t dmin;              // fp16 scale of the mins
  uint8_t scales[kKScaleSize];// [12] eight 6-bit scales and eight 6-bit mins
  uint8_t qs[kQK_K / 2];      // [128] 4-bit quants
};

// As Q4_K with a fifth bit: q |= (bit (e / 32) of qh[e % 32]) << 4, range 0..31.
struct BlockQ5_K {
  uint16_t d;                 // fp16 scale of the scales
  uint16_t dmin;              // fp16 scale of the mins
  uint8_t scales[kKScaleSize];// [12] as in Q4_K
  uint8_t qh[kQK_K / 8];      // [32] fifth bit of each quant
  uint8_t qs[kQK_K / 2];      // [128] low 4 bits, laid out as Q4_K's
};

// 16 sub-blocks of 16, symmetric, 8-bit signed scales. With h = e / 128, g = (e % 128) / 32,
// l = e % 32:
//   lo = (ql[64 h + 32 (g & 1) + l] >> (g >= 2 ? 4 : 0)) & 0xF,   hi = (qh[32 h + l] >> 2 g) & 3,
//   x[e] = d * scales[e / 16] * ((lo | hi << 4) - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // [128] low 4 bits
  uint8_t qh[kQK_K / 4];      // [64] high 2 bits
  int8_t scales[kQK_K / 16];  // [16]
  uint16_t d;                 // fp16 scale of the scales
};

// Intermediate type for dot products (activations): x[e] = d * qs[e]. Not stored in model files.
struct BlockQ8_K {
  float d;                    // f32 scale
  int8_t qs[kQK_K];           // [256]
  int16_t bsums[kQK_K / 16];  // [16] sum of each 16 consecutive qs
};

// Sizes must equal tensor_type.cpp's type sizes (and ggml's), and no field may be padded.
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ3_K, d) == 108);
static_assert(offsetof(BlockQ5_K, qs) == 48 && offsetof(BlockQ6_K, d) == 208);
static_assert(offsetof(BlockQ8_K, bsums) == 260);
static_assert(std::is_trivially_copyable_v<BlockQ4_K> && std::is_standard_layout_v<BlockQ4_K>);

// 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K. Sub-blocks 0..3 keep theirs in the low
// 6 bits of bytes j and j + 4; sub-blocks 4..7 keep the low 4 bits in the nibbles of byte j + 4
// and the high 2 bits in the top bits of bytes j - 4 (scale) and j (min).
inline void k4_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Unsigned 6-bit scale of sub-block i (0..15) of Q3_K (subtract 32 for the signed value). Low
// nibble: byte i (low) for i < 8, byte i - 8 (high) otherwise; high 2 bits: bits 2 (i / 4) of
// byte 8 + i % 4.
inline int q3_k_scale(int i, const uint8_t* scales) {
  const int lo = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
  const int hi = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace strata
