// Whole-vocabulary passes over logits (max, argmax, exp-sum) and the exp they use.
// Written as fixed 16-lane loops that the compiler vectorizes, with every sum grouped the same
// way whatever the vector width, so results are bit-identical for a given build on any x86-64.
// NaN logits are treated like -inf: never the max, zero probability.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/types.h"

namespace strata {

// Vocabulary passes work in blocks of this many logits and keep one value per block, so later
// passes (top-k, thresholds, the draw) can skip whole blocks.
inline constexpr size_t kLogitBlock = 64;

constexpr size_t logit_blocks(size_t n) { return (n + kLogitBlock - 1) / kLogitBlock; }

// Below this exp underflows the normal range; such terms count as 0.
inline constexpr float kExpMinArg = -87.0f;

// e^x for x in [kExpMinArg, 88] (Cephes' expf: range reduction by ln 2 and a degree-6
// polynomial), relative error about 2e-7, exp_approx(0) == 1 exactly. Plain IEEE arithmetic and
// integer bit tricks, so it vectorizes and gives the same bits everywhere, unlike libm's expf.
inline float exp_approx(float x) {
  // Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer n and leaves n in the low mantissa
  // bits, with no float-to-int conversion (which would keep the loops from vectorizing).
  constexpr float kShifter = 0x1.8p23f;
  const float t = x * 1.44269504088896341f + kShifter;
  const float n = t - kShifter;
  float r = x - n * 0.693359375f;  // ln 2 split in two so that r stays exact
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  // 2^n: n + 127 in the exponent field; the shifter's own bits fall off the top.
  return y * std::bit_cast<float>((std::bit_cast<uint32_t>(t) + 127u) << 23);
}

// Max of `x` (-inf when every value is -inf or NaN); block_max[b] receives the max of block b.
// Precondition: block_max.size() == logit_blocks(x.size()).
float max_logit(std::span<const float> x, std::span<float> block_max);

// Lowest index holding `max` (the result of max_logit over the same x and block_max).
// Precondition: max occurs in x.
TokenId argmax_index(std::span<const float> x, std::span<const float> block_max, float max);

// The greedy pick of x: argmax_index of max_logit, or -1 when the largest value is not finite (every
// value -inf or NaN, or a +inf: what Sampler refuses). The rule Backend::greedy_pick follows on a
// device. Precondition: block_max.size() == logit_blocks(x.size()).
TokenId greedy_token(std::span<const float> x, std::span<float> block_max);

// Sum over i of exp_approx((x[i] - shift) * scale), terms whose argument is below kExpMinArg (or
// NaN) counting 0; block_sum[b] receives block b's part. Returns the total, summed in double.
// Preconditions: block_sum.size() == logit_blocks(x.size()); (x[i] - shift) * scale <= 88.
double exp_sum(std::span<const float> x, float shift, float scale, std::span<double> block_sum);

// The same term as exp_sum adds for one logit.
inline float exp_weight(float x, float shift, float scale) {
  const float s = (x - shift) * scale;
  return s >= kExpMinArg ? exp_approx(s) : 0.0f;
}

}  // namespace strata
