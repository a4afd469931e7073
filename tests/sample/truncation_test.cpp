// Candidate selection against brute force: top-k, thresholds, and the top-p prefix.
#include "sample/truncation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sample/logit_kernels.h"

namespace strata {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits on a coarse grid so that ties are common, with some -inf and NaN.
std::vector<float> tied_logits(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> step(-20, 20);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = 0.5f * static_cast<float>(step(gen));
    if (i % 89 == 3) v[i] = -kInf;
    if (i % 113 == 9) v[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

std::vector<Candidate> ranked(const std::vector<float>& logits) {
  std::vector<Candidate> all;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > -kInf) all.push_back({logits[i], static_cast<TokenId>(i), 0.0f});
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
  return all;
}

TEST(Truncation, TopKIsTheRankOrderPrefixWithLowerIdsWinningTies) {
  for (size_t n : {1u, 10u, 64u, 300u, 5000u}) {
    const std::vector<float> logits = tied_logits(n, static_cast<uint32_t>(n));
    std::vector<float> block_max(logit_blocks(n));
    max_logit(logits, block_max);
    const std::vector<Candidate> all = ranked(logits);
    for (size_t k : {1u, 2u, 5u, 40u, 64u, 1000u, 100000u}) {
      std::vector<Candidate> got;
      select_top_k(logits, block_max, k, got);
      const size_t want = std::min(k, all.size());
      ASSERT_EQ(got.size(), want) << n << " " << k;
      for (size_t i = 0; i < want; ++i) {
        ASSERT_EQ(got[i].token, all[i].token) << n << " " << k << " at " << i;
        ASSERT_EQ(got[i].logit, all[i].logit);
      }
    }
  }
}

TEST(Truncation, SelectAtLeastKeepsEveryTokenAtOrAboveTheThresholdInIdOrder) {
  const std::vector<float> logits = tied_logits(1000, 5);
  std::vector<float> block_max(logit_blocks(logits.size()));
  max_logit(logits, block_max);
  for (float t : {-kInf, -10.0f, 0.0f, 4.5f, 9.5f, 11.0f}) {
    std::vector<Candidate> got;
    select_at_least(logits, block_max, t, got);
    std::vector<TokenId> want;
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] >= t) want.push_back(static_cast<TokenId>(i));
    std::vector<TokenId> got_ids;
    for (const Candidate& c : got) got_ids.push_back(c.token);
    EXPECT_EQ(got_ids, want) << t;
  }
}

// The reference: sort by rank, walk until the cumulative weight reaches the target.
std::vector<TokenId> brute_force_top_p(std::vector<Candidate> cands, double target) {
  std::sort(cands.begin(), cands.end(), ranks_before);
  std::vector<TokenId> kept;
  double cum = 0.0;
  for (const Candidate& c : cands) {
    kept.push_back(c.token);
    cum += c.weight;
    if (cum >= target) break;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

void expect_keep_top_p(const std::vector<Candidate>& cands, double target, const std::string& where) {
  std::vector<Candidate> work = cands;
  std::vector<Candidate> scratch;
  keep_top_p(work, target, scratch);
  // Same set as the reference...
  std::vector<TokenId> got;
  for (const Candidate& c : work) got.push_back(c.token);
  std::vector<TokenId> got_sorted = got;
  std::sort(got_sorted.begin(), got_sorted.end());
  ASSERT_EQ(got_sorted, brute_force_top_p(cands, target)) << where;
  // ...in the input's order.
  std::vector<TokenId> input_order;
  for (const Candidate& c : cands)
    if (std::binary_search(got_sorted.begin(), got_sorted.end(), c.token)) input_order.push_back(c.token);
  ASSERT_EQ(got, input_order) << where;
}

TEST(Truncation, KeepTopPKeepsTheShortestRankPrefixReachingTheTarget) {
  std::mt19937 gen(17);
  for (size_t n : {1u, 5u, 31u, 33u, 200u, 5000u, 40000u}) {
    for (int trial = 0; trial < 3; ++trial) {
      // Weights as the sampler makes them (exp of the logits), with many ties.
      std::vector<float> logits = tied_logits(n, static_cast<uint32_t>(n * 10 + trial));
      std::vector<Candidate> cands;
      for (size_t i = 0; i < n; ++i)
        if (logits[i] > -kInf) cands.push_back({logits[i], static_cast<TokenId>(i), exp_weight(logits[i], 10.0f, 1.0f)});
      if (trial == 2) std::shuffle(cands.begin(), cands.end(), gen);  // any input order works
      if (cands.empty()) continue;
      double total = 0.0;
      for (const Candidate& c : cands) total += c.weight;
      for (double p : {1e-9, 0.1, 0.5, 0.9, 0.999, 1.0, 1.0 + 1e-9}) {
        expect_keep_top_p(cands, p * total, std::to_string(n) + " trial " + std::to_string(trial) + " p " +
                                                std::to_string(p));
      }
    }
  }
}

TEST(Truncation, KeepTopPHandlesSignedZerosAndDistinctFloatsAsTheRankOrderDoes) {
  // -0 and +0 tie (lower id first); neighbouring floats differ only in the lowest key bits.
  const float tiny = std::nextafter(1.0f, 2.0f);
  const std::vector<Candidate> cands = {
      {0.0f, 0, 1.0f}, {-0.0f, 1, 1.0f}, {1.0f, 2, 1.0f}, {tiny, 3, 1.0f}, {-0.0f, 4, 1.0f}, {0.0f, 5, 1.0f},
  };
  for (double target : {0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0}) {
    expect_keep_top_p(cands, target, "target " + std::to_string(target));
  }
}

}  // namespace
}  // namespace strata
