// Vocabulary passes: exp accuracy, max/argmax, exp-sums, and their fixed summation order.
#include "sample/logit_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> logits_with_specials(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = dist(gen);
    if (i % 97 == 5) v[i] = -kInf;
    if (i % 131 == 7) v[i] = kNaN;
  }
  return v;
}

TEST(LogitKernels, ExpApproxIsWithinTwoTenthsOfAMillionthOfExp) {
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  double worst = 0.0;
  for (float x = kExpMinArg; x <= 10.0f; x += 0.000731f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(exp_approx(x) - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
  // Monotone over a fine grid near 0, where the weights of the likeliest tokens live.
  float prev = 0.0f;
  for (float x = -2.0f; x <= 0.0f; x = std::nextafter(x, 1.0f) + 1e-6f) {
    const float y = exp_approx(x);
    ASSERT_GE(y, prev) << x;
    prev = y;
  }
}

TEST(LogitKernels, ExpWeightIsZeroForNaNAndMinusInfinity) {
  EXPECT_EQ(exp_weight(kNaN, 0.0f, 1.0f), 0.0f);
  EXPECT_EQ(exp_weight(-kInf, 0.0f, 1.0f), 0.0f);
  EXPECT_EQ(exp_weight(-100.0f, 0.0f, 1.0f), 0.0f);  // below kExpMinArg
  EXPECT_GT(exp_weight(-86.0f, 0.0f, 1.0f), 0.0f);
}

TEST(LogitKernels, MaxAndArgmaxMatchAScan) {
  for (size_t n : {1u, 2u, 63u, 64u, 65u, 128u, 1000u, 128256u}) {
    std::vector<float> x = logits_with_specials(n, static_cast<uint32_t>(n));
    if (n == 1) x[0] = 0.5f;
    std::vector<float> block_max(logit_blocks(n));
    const float m = max_logit(x, block_max);
    float want = -kInf;
    size_t want_index = 0;
    for (size_t i = 0; i < n; ++i) {
      if (x[i] > want) {
        want = x[i];
        want_index = i;
      }
    }
    EXPECT_EQ(m, want) << n;
    EXPECT_EQ(argmax_index(x, block_max, m), static_cast<TokenId>(want_index)) << n;
    for (size_t b = 0; b < block_max.size(); ++b) {
      float bm = -kInf;
      for (size_t i = b * kLogitBlock; i < std::min(n, (b + 1) * kLogitBlock); ++i) bm = x[i] > bm ? x[i] : bm;
      ASSERT_EQ(block_max[b], bm) << n << " block " << b;
    }
  }
  std::vector<float> nothing = {kNaN, -kInf, kNaN};
  std::vector<float> bm(1);
  EXPECT_EQ(max_logit(nothing, bm), -kInf);
}

// greedy_token: the argmax (lowest index on ties), -1 where no finite value is the largest.
TEST(LogitKernels, GreedyTokenIsTheArgmaxOrMinusOneWithoutAFiniteMax) {
  std::vector<float> bm(logit_blocks(200));
  std::vector<float> x(200, -1.0f);
  x[70] = 2.0f, x[150] = 2.0f, x[3] = kNaN;
  EXPECT_EQ(greedy_token(x, bm), 70);
  x[199] = kInf;
  EXPECT_EQ(greedy_token(x, bm), -1);  // +inf: not finite
  std::fill(x.begin(), x.end(), -kInf);
  EXPECT_EQ(greedy_token(x, bm), -1);
  std::fill(x.begin(), x.end(), kNaN);
  EXPECT_EQ(greedy_token(x, bm), -1);
  x[5] = -1e30f;
  EXPECT_EQ(greedy_token(x, bm), 5);
}

TEST(LogitKernels, ExpSumMatchesADoubleSum) {
  for (size_t n : {1u, 64u, 100u, 32000u, 152064u}) {
    const std::vector<float> x = logits_with_specials(n, 9);
    // Shifted by the max, as the sampler does: the largest terms then have arguments near 0, where
    // rounding the float argument (x - shift) * scale costs least.
    float shift = -kInf;
    for (float v : x) shift = v > shift ? v : shift;
    for (float scale : {1.0f, 0.5f, 3.0f}) {
      std::vector<double> block_sum(logit_blocks(n));
      const double got = exp_sum(x, shift, scale, block_sum);
      double want = 0.0;
      for (float v : x)
        if (v > -kInf) want += std::exp((static_cast<double>(v) - shift) * scale);
      EXPECT_NEAR(got, want, 1e-6 * want) << n << " scale " << scale;
      double blocks = 0.0;
      for (double b : block_sum) blocks += b;
      EXPECT_EQ(blocks, got);
    }
  }
}

TEST(LogitKernels, ExpSumUsesTheSameSummationOrderAsPlainScalarCode) {
  // The vocabulary loops run as AVX-512, AVX2 or SSE2 code depending on the CPU. Their block sums
  // must equal, bit for bit, this scalar statement of the grouping (lane l = i mod 16 summed in
  // index order, then lanes pairwise), or the same seed would give different tokens on
  // different machines.
  const size_t n = 32000 + 17;
  const std::vector<float> x = logits_with_specials(n, 4);
  const float shift = 9.0f;
  const float scale = 1.25f;
  std::vector<double> block_sum(logit_blocks(n));
  exp_sum(x, shift, scale, block_sum);
  for (size_t b = 0; b < block_sum.size(); ++b) {
    const size_t begin = b * kLogitBlock;
    const size_t len = std::min(kLogitBlock, n - begin);
    float want = 0.0f;
    if (len == kLogitBlock) {
      float lane[16];
      for (size_t l = 0; l < 16; ++l) {
        lane[l] = ((exp_weight(x[begin + l], shift, scale) + exp_weight(x[begin + l + 16], shift, scale)) +
                   exp_weight(x[begin + l + 32], shift, scale)) +
                  exp_weight(x[begin + l + 48], shift, scale);
      }
      for (size_t w = 8; w > 0; w /= 2)
        for (size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
      want = lane[0];
    } else {
      for (size_t i = begin; i < begin + len; ++i) want += exp_weight(x[i], shift, scale);
    }
    ASSERT_EQ(block_sum[b], static_cast<double>(want)) << "block " << b;
  }
}

}  // namespace
}  // namespace strata
