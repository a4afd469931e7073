#include "sample/logit_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

// The whole-vocabulary loops are compiled for AVX-512, AVX2 and baseline x86-64, and the best the
// CPU supports is picked at load time (GCC function multiversioning): about 2.3x faster on AVX2
// than SSE2. Each lane does the same IEEE operations and every sum is grouped the same way in all
// versions, with FMA contraction off (src/sample/CMakeLists.txt), so they return identical bits.
// Not under ThreadSanitizer: GCC instruments the ifunc resolvers, which the dynamic loader runs
// before the TSan runtime is up (a crash at start-up).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(STRATA_TSAN)
#define STRATA_VOCAB_LOOP __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STRATA_VOCAB_LOOP
#endif

namespace strata {
namespace {

constexpr size_t kLanes = 16;
static_assert(kLogitBlock == 4 * kLanes, "the block loops below are written for 4 rows of 16 lanes");
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// `x > m ? x : m` rather than std::max: a NaN x then leaves m alone.
[[gnu::always_inline]] inline float max_keep(float m, float x) { return x > m ? x : m; }

// Max of one block (n <= kLogitBlock). Full blocks are one fixed-shape loop the compiler
// vectorizes; only the vocabulary's last block can be partial.
[[gnu::always_inline]] inline float block_max_of(const float* x, size_t n) {
  float m = kNegInf;
  if (n == kLogitBlock) {
    float lane[kLanes];
    for (size_t l = 0; l < kLanes; ++l) {
      lane[l] = max_keep(max_keep(max_keep(max_keep(kNegInf, x[l]), x[l + kLanes]), x[l + 2 * kLanes]),
                         x[l + 3 * kLanes]);
    }
    for (size_t l = 0; l < kLanes; ++l) m = max_keep(m, lane[l]);
    return m;
  }
  for (size_t i = 0; i < n; ++i) m = max_keep(m, x[i]);
  return m;
}

// Sum of one block's terms (n <= kLogitBlock): terms of lane l are i = l mod 16, added in index
// order, then the lanes pairwise, whatever the vector width the compiler picked.
[[gnu::always_inline]] inline float block_exp_sum(const float* x, size_t n, float shift, float scale) {
  if (n != kLogitBlock) {
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) sum += exp_weight(x[i], shift, scale);
    return sum;
  }
  float e[kLogitBlock];
  for (size_t i = 0; i < kLogitBlock; ++i) {
    const float s = (x[i] - shift) * scale;
    const bool live = s >= kExpMinArg;  // false for NaN and -inf
    e[i] = exp_approx(live ? s : kExpMinArg) * (live ? 1.0f : 0.0f);
  }
  float lane[kLanes];
  for (size_t l = 0; l < kLanes; ++l) lane[l] = ((e[l] + e[l + kLanes]) + e[l + 2 * kLanes]) + e[l + 3 * kLanes];
  for (size_t width = kLanes / 2; width > 0; width /= 2)
    for (size_t l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

}  // namespace

STRATA_VOCAB_LOOP float max_logit(std::span<const float> x, std::span<float> block_max) {
  STRATA_DCHECK(block_max.size() == logit_blocks(x.size()));
  float m = kNegInf;
  for (size_t b = 0; b < block_max.size(); ++b) {
    const size_t begin = b * kLogitBlock;
    block_max[b] = block_max_of(x.data() + begin, std::min(kLogitBlock, x.size() - begin));
    m = max_keep(m, block_max[b]);
  }
  return m;
}

TokenId argmax_index(std::span<const float> x, std::span<const float> block_max, float max) {
  for (size_t b = 0; b < block_max.size(); ++b) {
    if (block_max[b] != max) continue;
    const size_t end = std::min(x.size(), (b + 1) * kLogitBlock);
    for (size_t i = b * kLogitBlock; i < end; ++i)
      if (x[i] == max) return static_cast<TokenId>(i);
  }
  STRATA_CHECK(false, "argmax_index: {} does not occur in the logits", max);
}

TokenId greedy_token(std::span<const float> x, std::span<float> block_max) {
  const float max = max_logit(x, block_max);
  return std::isfinite(max) ? argmax_index(x, block_max, max) : -1;
}

STRATA_VOCAB_LOOP double exp_sum(std::span<const float> x, float shift, float scale, std::span<double> block_sum) {
  STRATA_DCHECK(block_sum.size() == logit_blocks(x.size()));
  double total = 0.0;
  for (size_t b = 0; b < block_sum.size(); ++b) {
    const size_t begin = b * kLogitBlock;
    block_sum[b] = block_exp_sum(x.data() + begin, std::min(kLogitBlock, x.size() - begin), shift, scale);
    total += block_sum[b];
  }
  return total;
}

}  // namespace strata
