// The warm KV encodings (kv/warm_format.h) against their definitions, value by value: the integer
// levels and scales stored for chosen inputs equal the ones computed by hand from the format's
// definition (round to nearest; the numbers in the comments were worked out from the definition,
// not from this code), the bytes sit where the header's layout says, and decoding is within half a
// quantization step. fp8 e4m3 conversion is checked against the OCP 8-bit floating point
// specification (OFP8, E4M3: bias 7, no infinities, S.1111.111 is NaN, max finite 448 = S.1111.110,
// smallest subnormal 2^-9, round to nearest even).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kv/warm_format.h"

namespace strata {
namespace {

// `n_blocks` hot f32 blocks of [block_size][H][D] for K and V, filled by the test.
struct HotBlocks {
  HotBlocks(int32_t n_blocks, int32_t block_size, int32_t H, int32_t D)
      : k(static_cast<size_t>(n_blocks) * block_size * H * D), v(k.size()) {
    view.k = reinterpret_cast<uint8_t*>(k.data());
    view.v = reinterpret_cast<uint8_t*>(v.data());
    view.dtype = KvDtype::kF32;
    view.block_size = block_size;
    view.n_kv_heads = H;
    view.head_dim = D;
  }
  // Element (token t of the span, head h, channel d) when the span is blocks 0, 1, 2, ...
  float& at(bool value, int32_t t, int32_t h, int32_t d) {
    auto& x = value ? v : k;
    return x[(static_cast<size_t>(t) * view.n_kv_heads + h) * view.head_dim + d];
  }
  std::vector<float> k, v;
  KvLayerView view;
};

struct Slots {
  std::vector<uint8_t> k, v;
};

Slots encode(WarmFormat f, HotBlocks& hb) {
  const int32_t bs = hb.view.block_size, H = hb.view.n_kv_heads, D = hb.view.head_dim;
  const int32_t span = warm_span(f, bs);
  std::vector<BlockId> ids(static_cast<size_t>(span));
  for (int32_t j = 0; j < span; ++j) ids[static_cast<size_t>(j)] = j;
  Slots s{std::vector<uint8_t>(static_cast<size_t>(warm_slot_bytes(f, false, bs, H, D)), 0xAB),
          std::vector<uint8_t>(static_cast<size_t>(warm_slot_bytes(f, true, bs, H, D)), 0xAB)};
  warm_encode(f, hb.view, ids.data(), span, s.k.data(), s.v.data());
  return s;
}

std::vector<float> decode(WarmFormat f, bool value, const Slots& s, const HotBlocks& hb, int32_t t, int32_t h) {
  std::vector<float> out(static_cast<size_t>(hb.view.head_dim));
  warm_decode_row(f, value, value ? s.v.data() : s.k.data(), warm_span(f, hb.view.block_size), hb.view.block_size,
                  hb.view.n_kv_heads, hb.view.head_dim, t, h, out.data());
  return out;
}

uint16_t u16_at(const std::vector<uint8_t>& b, size_t off) {
  uint16_t x;
  std::memcpy(&x, b.data() + off, 2);
  return x;
}

// --- int8 --------------------------------------------------------------------------------------

TEST(WarmInt8, LevelsAndScalesAreRoundedToNearestAsDefined) {
  // H = 1, D = 8, two tokens (block_size 2). Layout: int8 data [T][H][D], then f16 scales [T][H]
  // at offset align4(T*H*D) = 16.
  HotBlocks hb(1, 2, 1, 8);
  // Token 0: max|x| = 127 * 2^-7, so scale = 2^-7 exactly (f16 0x2000) and q = round(x * 128).
  const float s0 = 0x1p-7f;
  const float row0[8] = {127 * s0, -3.4f * s0, 3.6f * s0, -3.6f * s0, 3.4f * s0, 0.49f * s0, 100.7f * s0, -126.6f * s0};
  const int8_t q0[8] = {127, -3, 4, -4, 3, 0, 101, -127};  // truncation would give 3, -3, 100, -126
  // Token 1: max|x| = 1, scale = f16(1/127) = 1032 * 2^-17 = 0.00787353515625 (0x2008);
  // x / scale = 127.0078, -127.0078, 63.504, 31.752, -12.701, 0, 97.796, 0.381.
  const float row1[8] = {1.0f, -1.0f, 0.5f, 0.25f, -0.1f, 0.0f, 0.77f, 0.003f};
  const int8_t q1[8] = {127, -127, 64, 32, -13, 0, 98, 0};
  for (int d = 0; d < 8; ++d) {
    hb.at(false, 0, 0, d) = row0[d];
    hb.at(false, 1, 0, d) = row1[d];
    hb.at(true, 0, 0, d) = -row1[d];  // V: token 0 mirrors K's token 1, token 1 is all zero
  }
  const Slots s = encode(WarmFormat::kInt8, hb);
  ASSERT_EQ(s.k.size(), 16u + 4u);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(static_cast<int8_t>(s.k[static_cast<size_t>(d)]), q0[d]) << "token 0, channel " << d;
    EXPECT_EQ(static_cast<int8_t>(s.k[static_cast<size_t>(8 + d)]), q1[d]) << "token 1, channel " << d;
    EXPECT_EQ(static_cast<int8_t>(s.v[static_cast<size_t>(d)]), -q1[d]) << "V token 0, channel " << d;
    EXPECT_EQ(s.v[static_cast<size_t>(8 + d)], 0) << "V token 1 is zero";
  }
  EXPECT_EQ(u16_at(s.k, 16), 0x2000);
  EXPECT_EQ(u16_at(s.k, 18), 0x2008);
  EXPECT_EQ(u16_at(s.v, 16), 0x2008);
  EXPECT_EQ(u16_at(s.v, 18), 0x0000) << "an all-zero row has scale 0";
  // Decoding is scale * q exactly, within half a step of the input.
  const float scale1 = 0.00787353515625f;
  for (int t = 0; t < 2; ++t) {
    const auto got = decode(WarmFormat::kInt8, false, s, hb, t, 0);
    const float sc = t == 0 ? s0 : scale1;
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(got[static_cast<size_t>(d)], sc * static_cast<float>(t == 0 ? q0[d] : q1[d]));
      EXPECT_LE(std::abs(got[static_cast<size_t>(d)] - hb.at(false, t, 0, d)), sc / 2 + 1e-7f) << t << " " << d;
    }
  }
  for (float x : decode(WarmFormat::kInt8, true, s, hb, 1, 0)) EXPECT_EQ(x, 0.0f);
}

TEST(WarmInt8, RandomRowsDecodeWithinHalfAStep) {
  const int32_t bs = 16, H = 2, D = 64;
  HotBlocks hb(1, bs, H, D);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto& x : hb.k) x = u(rng);
  for (auto& x : hb.v) x = u(rng) * 0.01f;
  const Slots s = encode(WarmFormat::kInt8, hb);
  for (int value = 0; value < 2; ++value) {
    const auto& slot = value ? s.v : s.k;
    for (int t = 0; t < bs; ++t) {
      for (int h = 0; h < H; ++h) {
        float amax = 0;
        for (int d = 0; d < D; ++d) amax = std::max(amax, std::abs(hb.at(value != 0, t, h, d)));
        const float scale = fp16_to_f32(u16_at(slot, static_cast<size_t>(bs * H * D + 2 * (t * H + h))));
        // The scale is max|x| / 127 rounded to f16 (relative error <= 2^-11).
        EXPECT_NEAR(scale, amax / 127, amax / 127 * 0x1p-11f);
        const auto got = decode(WarmFormat::kInt8, value != 0, s, hb, t, h);
        for (int d = 0; d < D; ++d) {
          EXPECT_LE(std::abs(got[static_cast<size_t>(d)] - hb.at(value != 0, t, h, d)), scale * 0.5f * (1 + 1e-6f))
              << "value " << value << " t " << t << " h " << h << " d " << d;
        }
      }
    }
  }
}

// --- int4 --------------------------------------------------------------------------------------

uint8_t nibble(const std::vector<uint8_t>& data, int64_t idx) {
  return (idx % 2 == 0) ? (data[static_cast<size_t>(idx / 2)] & 0xf) : (data[static_cast<size_t>(idx / 2)] >> 4);
}

TEST(WarmInt4, LevelsScalesAndZeroPointsAreAsDefined) {
  // block_size 32: span 1, T = 32; H = 1, D = 8, so V groups are whole rows (Gv = D = 8) and K
  // groups are whole channels over the 32 tokens (Gk = 32).
  // Layout of K: nibbles [32][1][4 bytes] (128 B), f16 scales [1][1][8] at 128, i8 zeros at 144.
  // Layout of V: nibbles (128 B), f16 scales [32][1][1] at 128, i8 zeros [32][1][1] at 192.
  HotBlocks hb(1, 32, 1, 8);
  // V token 0: lo = -1.5, hi = 2.25: scale = 3.75 / 15 = 0.25 (f16 0x3400), zero = round(1.5 / 0.25)
  // = 6, q = round(x / 0.25) + 6: x/0.25 = -6, 9, 1.2, 1.48, 1.6, -2.4, -2.6, 4.4.
  const float v0[8] = {-1.5f, 2.25f, 0.3f, 0.37f, 0.4f, -0.6f, -0.65f, 1.1f};
  const uint8_t qv0[8] = {0, 15, 7, 7, 8, 4, 3, 10};
  // V token 1: lo = 0, hi = 1: scale = f16(1/15) = 1092 * 2^-14 = 0.066650390625 (0x2c44), zero 0;
  // x / scale = 0, 15.004, 7.502, 1.5004, 13.503, 3.0007, 10.503, 0.450.
  const float v1[8] = {0.0f, 1.0f, 0.5f, 0.1f, 0.9f, 0.2f, 0.7f, 0.03f};
  const uint8_t qv1[8] = {0, 15, 8, 2, 14, 3, 11, 0};  // truncation: 7, 1, 13, 10
  // V token 2: a narrow group far from zero, [10, 10.5]: the zero point -10/scale must fit int8,
  // so the scale widens to f16(10/127) = 0.0787353515625 (0x2d0a), zero = round(-127.008) = -127;
  // x / scale = 127.008, 133.358, 130.183, 128.278, 132.088, 127.008, 130.818, 129.548.
  const float v2[8] = {10.0f, 10.5f, 10.25f, 10.1f, 10.4f, 10.0f, 10.3f, 10.2f};
  const uint8_t qv2[8] = {0, 6, 3, 1, 5, 0, 4, 3};
  for (int d = 0; d < 8; ++d) {
    hb.at(true, 0, 0, d) = v0[d];
    hb.at(true, 1, 0, d) = v1[d];
    hb.at(true, 2, 0, d) = v2[d];
  }
  // K channel 0 over the tokens: -1.5, 2.25, 0.3, 0.4, -0.65, then zeros: scale 0.25, zero 6.
  // K channel 1: constantly 1.0: range 0, so scale = f16(1/127) (0x2008) and zero = -127, q = 0.
  const float k0[5] = {-1.5f, 2.25f, 0.3f, 0.4f, -0.65f};
  const uint8_t qk0[5] = {0, 15, 7, 8, 3};
  for (int t = 0; t < 5; ++t) hb.at(false, t, 0, 0) = k0[t];
  for (int t = 0; t < 32; ++t) hb.at(false, t, 0, 1) = 1.0f;

  const Slots s = encode(WarmFormat::kInt4, hb);
  ASSERT_EQ(s.k.size(), 128u + 16u + 8u);
  ASSERT_EQ(s.v.size(), 128u + 64u + 32u);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(nibble(s.v, 0 * 8 + d), qv0[d]) << "V token 0, channel " << d;
    EXPECT_EQ(nibble(s.v, 1 * 8 + d), qv1[d]) << "V token 1, channel " << d;
    EXPECT_EQ(nibble(s.v, 2 * 8 + d), qv2[d]) << "V token 2, channel " << d;
    EXPECT_EQ(nibble(s.v, 3 * 8 + d), 0) << "V token 3 (all zero)";
  }
  EXPECT_EQ(u16_at(s.v, 128 + 0), 0x3400);
  EXPECT_EQ(u16_at(s.v, 128 + 2), 0x2c44);
  EXPECT_EQ(u16_at(s.v, 128 + 4), 0x2d0a);
  EXPECT_EQ(u16_at(s.v, 128 + 6), 0x0000);
  EXPECT_EQ(static_cast<int8_t>(s.v[192 + 0]), 6);
  EXPECT_EQ(static_cast<int8_t>(s.v[192 + 1]), 0);
  EXPECT_EQ(static_cast<int8_t>(s.v[192 + 2]), -127);
  EXPECT_EQ(static_cast<int8_t>(s.v[192 + 3]), 0);

  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(nibble(s.k, t * 8 + 0), t < 5 ? qk0[t] : 6) << "K channel 0, token " << t;
    EXPECT_EQ(nibble(s.k, t * 8 + 1), 0) << "K channel 1, token " << t;
    for (int d = 2; d < 8; ++d) EXPECT_EQ(nibble(s.k, t * 8 + d), 0);
  }
  EXPECT_EQ(u16_at(s.k, 128 + 0), 0x3400);
  EXPECT_EQ(u16_at(s.k, 128 + 2), 0x2008);
  EXPECT_EQ(static_cast<int8_t>(s.k[144 + 0]), 6);
  EXPECT_EQ(static_cast<int8_t>(s.k[144 + 1]), -127);

  // Decoding: scale * (q - zero), within half a step of the input.
  const float vscale[3] = {0.25f, 0.066650390625f, 0.0787353515625f};
  const int vzero[3] = {6, 0, -127};
  const uint8_t* qv[3] = {qv0, qv1, qv2};
  for (int t = 0; t < 3; ++t) {
    const auto got = decode(WarmFormat::kInt4, true, s, hb, t, 0);
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(got[static_cast<size_t>(d)], vscale[t] * static_cast<float>(qv[t][d] - vzero[t]));
      EXPECT_LE(std::abs(got[static_cast<size_t>(d)] - hb.at(true, t, 0, d)), vscale[t] / 2 + 1e-6f) << t << " " << d;
    }
  }
  for (int t = 0; t < 32; ++t) {
    const auto got = decode(WarmFormat::kInt4, false, s, hb, t, 0);
    EXPECT_EQ(got[0], 0.25f * static_cast<float>((t < 5 ? qk0[t] : 6) - 6));
    EXPECT_EQ(got[1], 0.00787353515625f * 127);
  }
}

// Random groups, K and V, with a span of several blocks (block_size 8 -> span 4): every decoded
// value is within half a step (+ the f16 rounding of the scale at the clamped top level).
TEST(WarmInt4, RandomGroupsDecodeWithinHalfAStep) {
  const int32_t bs = 8, H = 2, D = 64;
  const int32_t span = warm_span(WarmFormat::kInt4, bs);
  ASSERT_EQ(span, 4);
  const int32_t T = span * bs;
  HotBlocks hb(span, bs, H, D);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& x : hb.k) x = u(rng);
  for (auto& x : hb.v) x = u(rng) + 0.5f;
  const Slots s = encode(WarmFormat::kInt4, hb);
  for (int value = 0; value < 2; ++value) {
    for (int h = 0; h < H; ++h) {
      // Group ranges: K per channel over all T tokens, V per token over 32 channels.
      for (int t = 0; t < T; ++t) {
        const auto got = decode(WarmFormat::kInt4, value != 0, s, hb, t, h);
        for (int d = 0; d < D; ++d) {
          float lo = INFINITY, hi = -INFINITY;
          if (value) {
            for (int e = d / 32 * 32; e < d / 32 * 32 + 32; ++e) {
              lo = std::min(lo, hb.at(true, t, h, e));
              hi = std::max(hi, hb.at(true, t, h, e));
            }
          } else {
            for (int r = 0; r < T; ++r) {
              lo = std::min(lo, hb.at(false, r, h, d));
              hi = std::max(hi, hb.at(false, r, h, d));
            }
          }
          const float step = std::max((hi - lo) / 15, std::abs(lo) / 127);
          EXPECT_LE(std::abs(got[static_cast<size_t>(d)] - hb.at(value != 0, t, h, d)), step * (0.5f + 16 * 0x1p-11f))
              << "value " << value << " t " << t << " h " << h << " d " << d;
        }
      }
    }
  }
}

// --- fp8 e4m3 ----------------------------------------------------------------------------------

TEST(Fp8E4m3, DecodesTheSpecValues) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);        // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f);    // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);        // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);           // exponent field 7 = 2^0
  EXPECT_EQ(e4m3_to_f32(0x3f), 1.875f);
  EXPECT_EQ(e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);         // S.1111.000 is a number in e4m3 (no infinity)
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);         // max finite
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  int nans = 0;
  for (int c = 0; c < 256; ++c) nans += std::isnan(e4m3_to_f32(static_cast<uint8_t>(c)));
  EXPECT_EQ(nans, 2) << "only S.1111.111 is NaN";
}

TEST(Fp8E4m3, EveryRepresentableValueRoundTripsBitExactly) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7f || c == 0xff) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Fp8E4m3, RoundsToNearestEven) {
  // Normal range: steps of 1/8 between 1 and 2.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);   // tie between 1.0 (even) and 1.125
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);   // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);     // nearer to 1.125
  EXPECT_EQ(f32_to_e4m3(1.05f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.9375f), 0x40);   // tie between 1.875 and 2.0 (even): carries into the exponent
  EXPECT_EQ(f32_to_e4m3(248.0f), 0x78);    // tie between 240 and 256 (even)
  EXPECT_EQ(f32_to_e4m3(-1.0625f), 0xb8);
  // Subnormal range: steps of 2^-9.
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);          // tie between 0 (even) and 2^-9
  EXPECT_EQ(f32_to_e4m3(0x1.8p-10f), 0x01);        // 0.75 * 2^-9
  EXPECT_EQ(f32_to_e4m3(0x1p-11f), 0x00);          // 0.25 * 2^-9
  EXPECT_EQ(f32_to_e4m3(1.5f * 0x1p-9f), 0x02);    // tie between 1 and 2 (even)
  EXPECT_EQ(f32_to_e4m3(2.5f * 0x1p-9f), 0x02);    // tie between 2 (even) and 3
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-9f), 0x03);
  EXPECT_EQ(f32_to_e4m3(7.5f * 0x1p-9f), 0x08);    // tie between the largest subnormal and 2^-6
  EXPECT_EQ(f32_to_e4m3(-5 * 0x1p-9f), 0x85);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);
}

TEST(Fp8E4m3, SaturatesBeyondTheLargestFiniteValueAndKeepsNaN) {
  // The warm tier converts x / scale with scale = max|x| / 448, so only rounding takes a value
  // past 448; e4m3 has no infinity and the next code up is NaN, so conversion saturates (the OCP
  // spec's saturating mode) rather than turning a large key into NaN.
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(500.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(3e38f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-449.0f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3(440.0f), 0x7e);   // 440 is nearer to 448 than to 416
  EXPECT_EQ(f32_to_e4m3(420.0f), 0x7d);   // 416
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(NAN))));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(-NAN))));
}

TEST(WarmFp8, BlockScaleMapsTheLargestValueTo448) {
  // H = 1, D = 8, block_size 2: data u8 [2][1][8], then the f32 scale per head at offset 16.
  HotBlocks hb(1, 2, 1, 8);
  // max|x| = 3.5: scale = 3.5 / 448 = 2^-7 exactly, so codes are e4m3(x * 128).
  const float row0[8] = {3.5f, -3.5f, 1.0f, 0.001f, 0.0f, -0.25f, 2.0f, 1e-5f};
  // x * 128 = 448, -448, 128 (2^7: exponent field 14), 0.128 (nearest 0.125 = 2^-3: field 4),
  // 0, -32 (2^5: field 12), 256 (field 15), 0.00128 (subnormal: 0.655 * 2^-9 -> 1).
  const uint8_t c0[8] = {0x7e, 0xfe, 0x70, 0x20, 0x00, 0xe0, 0x78, 0x01};
  for (int d = 0; d < 8; ++d) {
    hb.at(false, 0, 0, d) = row0[d];
    hb.at(true, 1, 0, d) = row0[d] / 4;  // V: scale 2^-9, same codes
  }
  const Slots s = encode(WarmFormat::kFp8, hb);
  ASSERT_EQ(s.k.size(), 20u);
  float ks, vs;
  std::memcpy(&ks, s.k.data() + 16, 4);
  std::memcpy(&vs, s.v.data() + 16, 4);
  EXPECT_EQ(ks, 0x1p-7f);
  EXPECT_EQ(vs, 0x1p-9f);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(s.k[static_cast<size_t>(d)], c0[d]) << d;
    EXPECT_EQ(s.k[static_cast<size_t>(8 + d)], 0) << d;
    EXPECT_EQ(s.v[static_cast<size_t>(8 + d)], c0[d]) << d;
  }
  const auto got = decode(WarmFormat::kFp8, false, s, hb, 0, 0);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(got[static_cast<size_t>(d)], ks * e4m3_to_f32(c0[d]));
  EXPECT_EQ(got[0], 3.5f);
}

TEST(WarmFp8, RandomBlocksDecodeWithinHalfAStep) {
  const int32_t bs = 16, H = 2, D = 64;
  HotBlocks hb(1, bs, H, D);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& x : hb.k) x = u(rng);
  for (auto& x : hb.v) x = u(rng) * u(rng) * u(rng);
  const Slots s = encode(WarmFormat::kFp8, hb);
  for (int value = 0; value < 2; ++value) {
    for (int h = 0; h < H; ++h) {
      float scale;
      std::memcpy(&scale, (value ? s.v : s.k).data() + bs * H * D + 4 * h, 4);
      for (int t = 0; t < bs; ++t) {
        const auto got = decode(WarmFormat::kFp8, value != 0, s, hb, t, h);
        for (int d = 0; d < D; ++d) {
          const float x = hb.at(value != 0, t, h, d);
          // Half a step: 2^-4 relative for normals (3 mantissa bits), 2^-10 * scale for subnormals.
          const float bound = std::max(std::abs(x) * 0x1p-4f, scale * 0x1p-10f) * (1 + 1e-6f);
          EXPECT_LE(std::abs(got[static_cast<size_t>(d)] - x), bound) << value << " " << t << " " << h << " " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
