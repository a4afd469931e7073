// Pins every block format byte by byte: blocks are built by hand from the layout of ggml's
// ggml-common.h, and the expected floats are worked out by hand from the format definition (the
// literal values) or from a per-element reading of the layout written here independently of the
// implementation's loops. Scales are powers of two or small integers so every expected value is
// exact and compared with ==.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"
#include "gguf/tensor_type.h"

namespace strata {
namespace {

// fp16 bit patterns used below.
constexpr uint16_t kHalfOne = 0x3C00;        // 1.0
constexpr uint16_t kHalfHalf = 0x3800;       // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;    // 0.25
constexpr uint16_t kHalfSixteenth = 0x2C00;  // 0.0625
constexpr uint16_t kHalfTwo = 0x4000;        // 2.0
constexpr uint16_t kHalfMinusOne = 0xBC00;   // -1.0
constexpr uint16_t kHalfMinusTwo = 0xC000;   // -2.0

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> dequant(GgmlType type, const std::vector<uint8_t>& bytes) {
  const auto traits = ggml_type_traits(type);
  EXPECT_EQ(bytes.size() % traits.type_size, 0u);
  const int64_t n = static_cast<int64_t>(bytes.size() / traits.type_size * traits.block_size);
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

std::vector<uint8_t> quant(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(ggml_row_size(type, x.size()), 0xEE);
  quantize_row(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

TEST(QuantTypes, SupportedSetAndBlockSizes) {
  const GgmlType supported[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
                                GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ8_1, GgmlType::kQ2_K,
                                GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K};
  for (GgmlType t : supported) {
    EXPECT_TRUE(can_dequantize(t)) << ggml_type_name(t);
    EXPECT_TRUE(can_quantize(t)) << ggml_type_name(t);
  }
  for (GgmlType t : {GgmlType::kIQ2_XXS, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kI8, GgmlType::kF64,
                     GgmlType::kTQ1_0}) {
    EXPECT_FALSE(can_dequantize(t)) << ggml_type_name(t);
    EXPECT_FALSE(can_quantize(t)) << ggml_type_name(t);
  }
  // The structs are the units of a row: their sizes and element counts are the type table's.
  const auto check = [](GgmlType t, size_t size, int qk) {
    EXPECT_EQ(ggml_type_traits(t).type_size, size) << ggml_type_name(t);
    EXPECT_EQ(ggml_type_traits(t).block_size, static_cast<uint32_t>(qk)) << ggml_type_name(t);
  };
  check(GgmlType::kQ4_0, sizeof(BlockQ4_0), kQK4_0);
  check(GgmlType::kQ4_1, sizeof(BlockQ4_1), kQK4_1);
  check(GgmlType::kQ5_0, sizeof(BlockQ5_0), kQK5_0);
  check(GgmlType::kQ5_1, sizeof(BlockQ5_1), kQK5_1);
  check(GgmlType::kQ8_0, sizeof(BlockQ8_0), kQK8_0);
  check(GgmlType::kQ8_1, sizeof(BlockQ8_1), kQK8_1);
  check(GgmlType::kQ2_K, sizeof(BlockQ2_K), kQK_K);
  check(GgmlType::kQ3_K, sizeof(BlockQ3_K), kQK_K);
  check(GgmlType::kQ4_K, sizeof(BlockQ4_K), kQK_K);
  check(GgmlType::kQ5_K, sizeof(BlockQ5_K), kQK_K);
  check(GgmlType::kQ6_K, sizeof(BlockQ6_K), kQK_K);
  check(GgmlType::kQ8_K, sizeof(BlockQ8_K), kQK_K);
}

TEST(QuantTypesDeathTest, PreconditionsAbort) {
  std::vector<uint8_t> bytes(64);
  std::vector<float> floats(64);
  EXPECT_DEATH(dequantize_row(GgmlType::kQ4_0, bytes.data(), floats.data(), 33), "block size 32");
  EXPECT_DEATH(quantize_row(GgmlType::kQ4_K, floats.data(), bytes.data(), 64), "block size 256");
  EXPECT_DEATH(dequantize_row(GgmlType::kIQ2_XXS, bytes.data(), floats.data(), 0), "cannot dequantize iq2_xxs");
  EXPECT_DEATH(quantize_row(GgmlType::kI8, floats.data(), bytes.data(), 4), "cannot quantize to i8");
}

// ---------------------------------------- floats ----------------------------------------

TEST(QuantF32, CopiesBitsIncludingNan) {
  const std::vector<float> x = {1.5f, -0.0f, std::numeric_limits<float>::infinity(),
                                std::bit_cast<float>(0x7fc01234u), 1e-45f};
  const auto bytes = quant(GgmlType::kF32, x);
  ASSERT_EQ(bytes.size(), 20u);
  EXPECT_EQ(std::memcmp(bytes.data(), x.data(), 20), 0);
  const auto y = dequant(GgmlType::kF32, bytes);
  EXPECT_EQ(std::memcmp(y.data(), x.data(), 20), 0);
}

uint16_t f16_bits(GgmlType type, float v) {
  const auto b = quant(type, {v});
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}

TEST(QuantF16, RoundsToNearestEven) {
  EXPECT_EQ(f16_bits(GgmlType::kF16, 1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(GgmlType::kF16, -2.0f), 0xC000);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 0.1f), 0x2E66);  // 0.0999755859375 is nearer than 0x2E67
  // Ties between two halves go to the even mantissa.
  EXPECT_EQ(f16_bits(GgmlType::kF16, 1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
  // Largest finite half, the tie above it (to infinity), and overflow.
  EXPECT_EQ(f16_bits(GgmlType::kF16, 65504.0f), 0x7BFF);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 65519.0f), 0x7BFF);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 65520.0f), 0x7C00);
  EXPECT_EQ(f16_bits(GgmlType::kF16, -1e6f), 0xFC00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties between 0 and it and goes to 0 (even).
  EXPECT_EQ(f16_bits(GgmlType::kF16, 0x1p-24f), 0x0001);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 0x1p-25f), 0x0000);
  EXPECT_EQ(f16_bits(GgmlType::kF16, 0x1.8p-24f), 0x0002);  // tie between 1 and 2 ulps: even
  EXPECT_EQ(f16_bits(GgmlType::kF16, 0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(f16_bits(GgmlType::kF16, -0.0f), 0x8000);
  EXPECT_EQ(f16_bits(GgmlType::kF16, std::numeric_limits<float>::infinity()), 0x7C00);
  const uint16_t nan = f16_bits(GgmlType::kF16, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(QuantF16, DecodesEveryClass) {
  std::vector<uint8_t> b(14);
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x7E00};
  for (size_t i = 0; i < 7; ++i) put_u16(b, 2 * i, halves[i]);
  const auto y = dequant(GgmlType::kF16, b);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_EQ(y[3], 0x1p-24f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_TRUE(std::signbit(y[4]));
  EXPECT_EQ(y[5], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[6]));
}

TEST(QuantBF16, RoundsToNearestEven) {
  EXPECT_EQ(f16_bits(GgmlType::kBF16, 1.0f), 0x3F80);
  EXPECT_EQ(f16_bits(GgmlType::kBF16, -2.0f), 0xC000);
  EXPECT_EQ(f16_bits(GgmlType::kBF16, 1.0f + 0x1p-8f), 0x3F80);              // tie: even
  EXPECT_EQ(f16_bits(GgmlType::kBF16, 1.0f + 3 * 0x1p-8f), 0x3F82);          // tie: even (up)
  EXPECT_EQ(f16_bits(GgmlType::kBF16, 1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);   // above the tie
  EXPECT_EQ(f16_bits(GgmlType::kBF16, std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX -> inf
  EXPECT_EQ(f16_bits(GgmlType::kBF16, -std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(f16_bits(GgmlType::kBF16, std::bit_cast<float>(0x00010000u)), 0x0001);  // f32 subnormal kept
  EXPECT_EQ(f16_bits(GgmlType::kBF16, -0.0f), 0x8000);
  // A signalling NaN whose payload sits only in the low bits must stay a NaN (not become inf).
  const uint16_t nan = f16_bits(GgmlType::kBF16, std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

TEST(QuantBF16, DecodesByShifting) {
  std::vector<uint8_t> b(8);
  put_u16(b, 0, 0x3F80);
  put_u16(b, 2, 0xC0A0);  // -5.0
  put_u16(b, 4, 0x7F80);
  put_u16(b, 6, 0x7FC0);
  const auto y = dequant(GgmlType::kBF16, b);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -5.0f);
  EXPECT_EQ(y[2], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[3]));
}

// ------------------------------------- legacy types -------------------------------------

TEST(QuantQ4_0, DecodesHandMadeBlocks) {
  std::vector<uint8_t> b(36);
  put_u16(b, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  put_u16(b, 18, kHalfMinusTwo);
  for (int j = 0; j < 16; ++j) b[20 + j] = 0x0F;
  const auto y = dequant(GgmlType::kQ4_0, b);
  EXPECT_EQ(y[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_EQ(y[15], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(y[16], 3.5f);   // high nibble of byte 0: 15
  EXPECT_EQ(y[31], -4.0f);  // high nibble of byte 15: 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[16 + j], (7 - j) * 0.5f);
    EXPECT_EQ(y[32 + j], -14.0f);      // (15 - 8) * -2
    EXPECT_EQ(y[32 + 16 + j], 16.0f);  // (0 - 8) * -2
  }
}

TEST(QuantQ4_0, EncodesExactGrid) {
  // Largest magnitude -8 gives d = 1 and every value lands on its level: q = x + 8.
  std::vector<float> x(32);
  for (int e = 0; e < 32; ++e) x[e] = static_cast<float>(e % 16 - 8);
  const auto b = quant(GgmlType::kQ4_0, x);
  EXPECT_EQ(b[0] | (b[1] << 8), kHalfOne);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[2 + j], j | (j << 4)) << j;
  EXPECT_EQ(dequant(GgmlType::kQ4_0, b), x);
  // With the largest magnitude positive the scale turns negative: d = 8 / -8.
  for (int e = 0; e < 32; ++e) x[e] = static_cast<float>(8 - e % 16);
  const auto c = quant(GgmlType::kQ4_0, x);
  EXPECT_EQ(c[0] | (c[1] << 8), kHalfMinusOne);
  EXPECT_EQ(c[2], 0x00);  // 8 -> level 0
  EXPECT_EQ(c[17], 0xFF);  // -7 -> level 15
  EXPECT_EQ(dequant(GgmlType::kQ4_0, c), x);
}

TEST(QuantQ4_1, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(20);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2, kHalfMinusOne);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::kQ4_1, b);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[16], 14.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 1.0f);
    EXPECT_EQ(y[16 + j], 14.0f - j);
  }
}

TEST(QuantQ4_1, EncodesExactGrid) {
  std::vector<float> x(32);
  for (int e = 0; e < 32; ++e) x[e] = 0.5f * static_cast<float>((e * 7) % 16) - 2.0f;  // min -2, max 5.5
  const auto b = quant(GgmlType::kQ4_1, x);
  EXPECT_EQ(b[0] | (b[1] << 8), kHalfHalf);  // d = 7.5 / 15
  EXPECT_EQ(b[2] | (b[3] << 8), 0xC000);     // m = -2
  EXPECT_EQ(dequant(GgmlType::kQ4_1, b), x);
}

// Q5 high bits: the little-endian word 0x40028001 sets bits 0, 15, 17 and 30; reading the bytes
// in the other order would pick different elements.
constexpr uint8_t kQh[4] = {0x01, 0x80, 0x02, 0x40};
bool q5_high(int e) { return e == 0 || e == 15 || e == 17 || e == 30; }

TEST(QuantQ5_0, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(22);
  put_u16(b, 0, kHalfQuarter);
  std::memcpy(&b[2], kQh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::kQ5_0, b);
  EXPECT_EQ(y[0], 0.0f);     // (0 + 16 - 16) * 0.25
  EXPECT_EQ(y[1], -3.75f);   // (1 - 16) * 0.25
  EXPECT_EQ(y[15], 3.75f);   // (15 + 16 - 16) * 0.25
  EXPECT_EQ(y[16], -0.25f);  // (15 - 16) * 0.25
  EXPECT_EQ(y[17], 3.5f);    // (14 + 16 - 16) * 0.25
  EXPECT_EQ(y[31], -4.0f);   // (0 - 16) * 0.25
  for (int e = 0; e < 32; ++e) {
    const int lo = e < 16 ? e : 15 - (e - 16);
    EXPECT_EQ(y[e], static_cast<float>(lo + (q5_high(e) ? 16 : 0) - 16) * 0.25f) << e;
  }
}

TEST(QuantQ5_0, EncodesExactGrid) {
  std::vector<float> x(32);
  for (int e = 0; e < 32; ++e) x[e] = static_cast<float>(e - 16);  // -16 is the largest magnitude: d = 1
  const auto b = quant(GgmlType::kQ5_0, x);
  EXPECT_EQ(b[0] | (b[1] << 8), kHalfOne);
  EXPECT_EQ(b[2] | b[3] << 8 | b[4] << 16 | static_cast<uint32_t>(b[5]) << 24, 0xFFFF0000u);  // levels 16..31
  EXPECT_EQ(b[6], 0x00);  // levels 0 and 16
  EXPECT_EQ(b[21], 0xFF);  // levels 15 and 31
  EXPECT_EQ(dequant(GgmlType::kQ5_0, b), x);
}

TEST(QuantQ5_1, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(24);
  put_u16(b, 0, kHalfHalf);
  put_u16(b, 2, kHalfTwo);
  std::memcpy(&b[4], kQh, 4);
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::kQ5_1, b);
  EXPECT_EQ(y[0], 10.0f);   // 16 * 0.5 + 2
  EXPECT_EQ(y[1], 2.5f);    // 1 * 0.5 + 2
  EXPECT_EQ(y[30], 10.5f);  // (1 + 16) * 0.5 + 2
  EXPECT_EQ(y[31], 2.0f);
  for (int e = 0; e < 32; ++e) {
    const int lo = e < 16 ? e : 15 - (e - 16);
    EXPECT_EQ(y[e], static_cast<float>(lo + (q5_high(e) ? 16 : 0)) * 0.5f + 2.0f) << e;
  }
}

TEST(QuantQ5_1, EncodesExactGrid) {
  std::vector<float> x(32);
  for (int e = 0; e < 32; ++e) x[e] = 0.5f * static_cast<float>((e * 5) % 32) + 3.0f;  // min 3, max 18.5
  const auto b = quant(GgmlType::kQ5_1, x);
  EXPECT_EQ(b[0] | (b[1] << 8), kHalfHalf);
  EXPECT_EQ(b[2] | (b[3] << 8), 0x4200);  // 3.0
  EXPECT_EQ(dequant(GgmlType::kQ5_1, b), x);
}

TEST(QuantQ8_0, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(34);
  put_u16(b, 0, kHalfSixteenth);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(8 * j - 128));
  const auto y = dequant(GgmlType::kQ8_0, b);
  EXPECT_EQ(y[0], -8.0f);  // -128 / 16
  EXPECT_EQ(y[31], 7.5f);  // 120 / 16
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * j - 8.0f);
}

TEST(QuantQ8_0, EncodesRoundingHalfAwayFromZero) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto b = quant(GgmlType::kQ8_0, x);
  // d = 16 / 127 = 0.1259842... -> nearest half 0x3008 (0.1259765625); the quants use the exact d.
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3008);
  const auto q = [&](int j) { return static_cast<int8_t>(b[2 + j]); };
  EXPECT_EQ(q(0), -127);  // -16 * 127/16
  EXPECT_EQ(q(16), 0);
  EXPECT_EQ(q(17), 8);    // 7.9375
  EXPECT_EQ(q(18), 16);   // 15.875
  EXPECT_EQ(q(31), 119);  // 119.0625
  // With d = 1 the products are exact, so halves are true ties: ggml's roundf goes away from zero
  // (round-to-even would give 2 and -2).
  std::vector<float> t(32, 0.0f);
  t[0] = 127.0f;
  t[1] = 2.5f;
  t[2] = -2.5f;
  t[3] = 0.5f;
  const auto c = quant(GgmlType::kQ8_0, t);
  EXPECT_EQ(c[0] | (c[1] << 8), kHalfOne);
  EXPECT_EQ(static_cast<int8_t>(c[2]), 127);
  EXPECT_EQ(static_cast<int8_t>(c[3]), 3);
  EXPECT_EQ(static_cast<int8_t>(c[4]), -3);
  EXPECT_EQ(static_cast<int8_t>(c[5]), 1);
}

TEST(QuantQ8_1, DecodesAndEncodesSum) {
  std::vector<uint8_t> b(36);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2, 0x7C00);  // s is a cache for dot products; decoding must ignore it
  for (int j = 0; j < 32; ++j) b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(127 - j));
  const auto y = dequant(GgmlType::kQ8_1, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 127.0f - j);

  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto c = quant(GgmlType::kQ8_1, x);
  EXPECT_EQ(c[0] | (c[1] << 8), 0x3008);  // as Q8_0
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(c[4 + j]);
  EXPECT_EQ(sum, -127);  // x = -16..15: the quants of -k and k cancel, -16 -> -127 remains
  // s = sum * d with the unrounded d = 16/127: -127 * 16/127 = -16 exactly.
  EXPECT_EQ(fp16_to_f32(static_cast<uint16_t>(c[2] | (c[3] << 8))), -16.0f);
}

// ---------------------------------------- K-quants ----------------------------------------

TEST(QuantQ2_K, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(84, 0);
  // scales[i]: low nibble scale, high nibble min. Sub-blocks not set: scale 0, min 1.
  for (int i = 0; i < 16; ++i) b[i] = 0x10;
  b[0] = 0x21;   // scale 1, min 2
  b[1] = 0x03;   // scale 3, min 0
  b[15] = 0xF5;  // scale 5, min 15
  b[16 + 0] = 0xE4;   // elements 0, 32, 64, 96 -> 0, 1, 2, 3
  b[16 + 16] = 0x03;  // element 16 -> 3
  b[16 + 63] = 0xC0;  // element 255 -> 3 (half 1, byte 31, bits 6-7)
  put_u16(b, 80, kHalfOne);
  put_u16(b, 82, kHalfHalf);
  const auto y = dequant(GgmlType::kQ2_K, b);
  EXPECT_EQ(y[0], -1.0f);    // 1*1*0 - 0.5*2
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[16], 9.0f);    // 1*3*3 - 0
  EXPECT_EQ(y[32], -0.5f);   // sub-block 2: 0*1 - 0.5*1
  EXPECT_EQ(y[255], 7.5f);   // 1*5*3 - 0.5*15
  EXPECT_EQ(y[159], -0.5f);  // sub-block 9, quant 0
}

TEST(QuantQ2_K, DecodesByLayoutFormula) {
  std::vector<uint8_t> b(84);
  for (int k = 0; k < 80; ++k) b[k] = static_cast<uint8_t>(k * 37 + 11);
  put_u16(b, 80, 0x3000);  // 0.125
  put_u16(b, 82, 0x2C00);  // 0.0625
  const auto y = dequant(GgmlType::kQ2_K, b);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
    const int s = b[e / 16];
    EXPECT_EQ(y[e], 0.125f * static_cast<float>((s & 0xF) * q) - 0.0625f * static_cast<float>(s >> 4)) << e;
  }
}

TEST(QuantQ3_K, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(110, 0);
  // 6-bit scales (minus 32): sub-block 0 -> +1, 1 -> -1, 8 -> +8, 13 -> +31, 15 -> -32, others 0.
  const uint8_t scales[12] = {0x81, 0x0F, 0x00, 0x00, 0x00, 0xF0, 0x00, 0x00, 0xAA, 0xE9, 0xAA, 0x2A};
  std::memcpy(&b[96], scales, 12);
  b[0] = 0x01;        // hmask[0] bit 0: element 0
  b[21] = 0x40;       // hmask[21] bit 6: element 213
  b[31] = 0x80;       // hmask[31] bit 7: element 255
  b[32 + 0] = 0x03;   // element 0 low bits 3
  b[32 + 32] = 0x02;  // element 128 low bits 2
  b[32 + 53] = 0x10;  // element 213 (half 1, byte 21, bits 4-5) low bits 1
  b[32 + 63] = 0xC0;  // element 255 low bits 3
  put_u16(b, 108, kHalfHalf);
  const auto y = dequant(GgmlType::kQ3_K, b);
  EXPECT_EQ(y[0], 1.5f);     // 0.5 * 1 * (7 - 4)
  EXPECT_EQ(y[1], -2.0f);    // 0.5 * 1 * (0 - 4)
  EXPECT_EQ(y[16], 2.0f);    // 0.5 * -1 * (0 - 4)
  EXPECT_EQ(y[32], 0.0f);    // scale 0
  EXPECT_EQ(y[128], -8.0f);  // 0.5 * 8 * (2 - 4)
  EXPECT_EQ(y[213], 15.5f);  // 0.5 * 31 * (5 - 4)
  EXPECT_EQ(y[255], -48.0f);  // 0.5 * -32 * (7 - 4)
  EXPECT_EQ(y[254], 64.0f);   // 0.5 * -32 * (0 - 4)
  // The unpacking helper agrees with the hand packing.
  const int expected_scales[16] = {33, 31, 32, 32, 32, 32, 32, 32, 40, 32, 32, 32, 32, 63, 32, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q3_k_scale(i, scales), expected_scales[i]) << i;
}

TEST(QuantQ3_K, DecodesByLayoutFormula) {
  std::vector<uint8_t> b(110);
  for (int k = 0; k < 108; ++k) b[k] = static_cast<uint8_t>(k * 73 + 5);
  put_u16(b, 108, 0x3000);  // 0.125
  const auto y = dequant(GgmlType::kQ3_K, b);
  const uint8_t* sc = &b[96];
  for (int e = 0; e < 256; ++e) {
    const int i = e / 16;
    const int lo4 = i < 8 ? (sc[i] & 0xF) : (sc[i - 8] >> 4);
    const int s = (lo4 | (((sc[8 + i % 4] >> (2 * (i / 4))) & 3) << 4)) - 32;
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) | (((b[l] >> (e / 32)) & 1) << 2);
    EXPECT_EQ(y[e], 0.125f * static_cast<float>(s * (q - 4))) << e;
  }
}

// Q4_K/Q5_K scales used below: sc = {1, 2, 3, 4, 17, 33, 50, 63}, m = {0, 1, 2, 3, 20, 40, 60, 63}.
constexpr uint8_t kK4Scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81, 0xC2, 0xC3, 0x41, 0x81, 0xC2, 0xFF};
constexpr int kK4Sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr int kK4M[8] = {0, 1, 2, 3, 20, 40, 60, 63};

TEST(QuantK4Scales, UnpackHandPackedBytes) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, m = 0;
    k4_scale_min(j, kK4Scales, &sc, &m);
    EXPECT_EQ(sc, kK4Sc[j]) << j;
    EXPECT_EQ(m, kK4M[j]) << j;
  }
}

// qs[32 c + l] = (l % 16) | (15 - l % 16) << 4: element 64 c + r has quant r % 16 (r < 32) or
// 15 - (r - 32) % 16.
std::vector<uint8_t> k4_block(size_t size, size_t qs_at) {
  std::vector<uint8_t> b(size, 0);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2, kHalfHalf);
  std::memcpy(&b[4], kK4Scales, 12);
  for (int k = 0; k < 128; ++k) b[qs_at + k] = static_cast<uint8_t>((k % 16) | ((15 - k % 16) << 4));
  return b;
}

int k4_quant(int e) {
  const int r = e % 64;
  return r < 32 ? r % 16 : 15 - (r - 32) % 16;
}

TEST(QuantQ4_K, DecodesHandMadeBlock) {
  const auto y = dequant(GgmlType::kQ4_K, k4_block(144, 16));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[5], 5.0f);       // 1*1*5 - 0.5*0
  EXPECT_EQ(y[35], 23.5f);     // sub-block 1: 1*2*12 - 0.5*1
  EXPECT_EQ(y[100], 42.5f);    // sub-block 3: 4*11 - 0.5*3
  EXPECT_EQ(y[133], 75.0f);    // sub-block 4: 17*5 - 0.5*20
  EXPECT_EQ(y[170], 145.0f);   // sub-block 5: 33*5 - 0.5*40
  EXPECT_EQ(y[200], 370.0f);   // sub-block 6: 50*8 - 0.5*60
  EXPECT_EQ(y[224], 913.5f);   // sub-block 7: 63*15 - 0.5*63
  EXPECT_EQ(y[255], -31.5f);   // sub-block 7: 63*0 - 0.5*63
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], static_cast<float>(kK4Sc[e / 32] * k4_quant(e)) - 0.5f * static_cast<float>(kK4M[e / 32])) << e;
  }
}

TEST(QuantQ5_K, DecodesHandMadeBlock) {
  auto b = k4_block(176, 48);
  b[16 + 3] = 0x02;   // qh[3] bit 1: element 35
  b[16 + 8] = 0x40;   // qh[8] bit 6: element 200
  b[16 + 31] = 0x80;  // qh[31] bit 7: element 255
  const auto y = dequant(GgmlType::kQ5_K, b);
  EXPECT_EQ(y[5], 5.0f);
  EXPECT_EQ(y[35], 55.5f);     // 2*(12+16) - 0.5
  EXPECT_EQ(y[133], 75.0f);
  EXPECT_EQ(y[200], 1170.0f);  // 50*(8+16) - 30
  EXPECT_EQ(y[224], 913.5f);
  EXPECT_EQ(y[255], 976.5f);   // 63*16 - 31.5
  for (int e = 0; e < 256; ++e) {
    const int q = k4_quant(e) + ((e == 35 || e == 200 || e == 255) ? 16 : 0);
    EXPECT_EQ(y[e], static_cast<float>(kK4Sc[e / 32] * q) - 0.5f * static_cast<float>(kK4M[e / 32])) << e;
  }
}

TEST(QuantQ5_K, DecodesByLayoutFormula) {
  std::vector<uint8_t> b(176);
  for (int k = 4; k < 176; ++k) b[k] = static_cast<uint8_t>(k * 29 + 3);
  put_u16(b, 0, 0x3000);  // 0.125
  put_u16(b, 2, 0x2C00);  // 0.0625
  const auto y = dequant(GgmlType::kQ5_K, b);
  const uint8_t* s = &b[4];
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    const int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    const int m = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    const int c = e / 64, r = e % 64;
    const int lo = r < 32 ? (b[48 + 32 * c + r] & 0xF) : (b[48 + 32 * c + r - 32] >> 4);
    const int q = lo | (((b[16 + e % 32] >> j) & 1) << 4);
    EXPECT_EQ(y[e], 0.125f * static_cast<float>(sc * q) - 0.0625f * static_cast<float>(m)) << e;
  }
}

TEST(QuantQ6_K, DecodesHandMadeBlock) {
  std::vector<uint8_t> b(210, 0);
  uint8_t* ql = &b[0];
  uint8_t* qh = &b[128];
  auto* sc = reinterpret_cast<int8_t*>(&b[192]);
  for (int i = 0; i < 16; ++i) sc[i] = 1;
  sc[1] = -2;
  sc[5] = 127;
  sc[10] = -128;
  sc[15] = 3;
  ql[0] = 0x5F;   // element 0 low 15, element 64 low 5
  qh[0] = 0x1B;   // high bits: element 0 -> 3, 32 -> 2, 64 -> 1, 96 -> 0
  ql[32] = 0xA0;  // element 32 low 0, element 96 low 10
  ql[96] = 0x01;  // element 160 low 1
  qh[32] = 0x0C;  // element 160 high 3
  ql[127] = 0xF0;  // element 255 low 15
  qh[63] = 0xC0;   // element 255 high 3
  put_u16(b, 208, kHalfQuarter);
  const auto y = dequant(GgmlType::kQ6_K, b);
  EXPECT_EQ(y[0], 7.75f);      // 0.25 * 1 * (63 - 32)
  EXPECT_EQ(y[16], 16.0f);     // 0.25 * -2 * (0 - 32)
  EXPECT_EQ(y[32], 0.0f);      // 0.25 * 1 * (32 - 32)
  EXPECT_EQ(y[64], -2.75f);    // 0.25 * 1 * (21 - 32)
  EXPECT_EQ(y[80], -1016.0f);  // 0.25 * 127 * (0 - 32)
  EXPECT_EQ(y[96], -5.5f);     // 0.25 * 1 * (10 - 32)
  EXPECT_EQ(y[128], -8.0f);    // 0.25 * 1 * (0 - 32)
  EXPECT_EQ(y[160], -544.0f);  // 0.25 * -128 * (49 - 32)
  EXPECT_EQ(y[255], 23.25f);   // 0.25 * 3 * (63 - 32)
}

TEST(QuantQ6_K, DecodesByLayoutFormula) {
  std::vector<uint8_t> b(210);
  for (int k = 0; k < 208; ++k) b[k] = static_cast<uint8_t>(k * 101 + 7);
  put_u16(b, 208, 0x2C00);  // 0.0625
  const auto y = dequant(GgmlType::kQ6_K, b);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int lo = (b[64 * h + 32 * (g & 1) + l] >> (g >= 2 ? 4 : 0)) & 0xF;
    const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    const int s = static_cast<int8_t>(b[192 + e / 16]);
    EXPECT_EQ(y[e], 0.0625f * static_cast<float>(s * ((lo | (hi << 4)) - 32))) << e;
  }
}

TEST(QuantQ8_K, DecodesAndEncodesBsums) {
  std::vector<uint8_t> b(292, 0);
  const float d = 0.5f;
  std::memcpy(&b[0], &d, 4);
  for (int j = 0; j < 256; ++j) b[4 + j] = static_cast<uint8_t>(j - 128);
  const auto y = dequant(GgmlType::kQ8_K, b);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(static_cast<int8_t>(j - 128)));

  // Encoding: the largest magnitude (-3 at 0) maps to -127 with d = 3/127 in f32.
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>(j % 5 - 2);
  x[0] = -3.0f;
  const auto c = quant(GgmlType::kQ8_K, x);
  float dq;
  std::memcpy(&dq, &c[0], 4);
  EXPECT_FLOAT_EQ(dq, 3.0f / 127.0f);
  EXPECT_EQ(static_cast<int8_t>(c[4]), -127);
  EXPECT_EQ(static_cast<int8_t>(c[4 + 1]), -42);  // -1 * 127/3 = -42.33
  EXPECT_EQ(static_cast<int8_t>(c[4 + 4]), 85);   // 2 * 127/3 = 84.67
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int k = 0; k < 16; ++k) sum += static_cast<int8_t>(c[4 + 16 * g + k]);
    EXPECT_EQ(static_cast<int16_t>(c[260 + 2 * g] | (c[261 + 2 * g] << 8)), sum) << g;
  }
}

}  // namespace
}  // namespace strata
