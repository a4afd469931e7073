// The eviction policies (kv/evict_policy.h): which slots each one drops, from positions and
// scores chosen so that a wrong rule keeps a different set; the configuration checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kv/evict_policy.h"

namespace strata {
namespace {

EvictConfig config(EvictKind k, int32_t budget, int32_t sinks, int32_t recent) {
  EvictConfig c;
  c.kind = k;
  c.budget = budget;
  c.sinks = sinks;
  c.recent = recent;
  return c;
}

std::vector<int32_t> kept_positions(const std::vector<int32_t>& positions, const std::vector<int32_t>& drop) {
  std::vector<int32_t> kept;
  for (size_t i = 0; i < positions.size(); ++i) {
    if (!std::binary_search(drop.begin(), drop.end(), static_cast<int32_t>(i))) kept.push_back(positions[i]);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

// The rule of EvictPolicy::keep_sinks_recent_heavy written the plain way, with full sorts: the
// pinned slots; the `sinks` earliest positions, earliest first; the `recent` latest, latest first;
// the heaviest scores (the later position on ties); the latest of the rest; each while fewer than
// `keep` are kept. The policy selects instead of sorting; the two must keep the same slots.
std::vector<int32_t> reference_drop(const std::vector<int32_t>& pos, const std::vector<float>& scores,
                                    const std::vector<uint8_t>& pinned, int32_t keep, int32_t sinks, int32_t recent) {
  const auto n = static_cast<int32_t>(pos.size());
  if (n <= keep) return {};
  std::vector<uint8_t> kept(pos.size(), 0);
  int32_t n_kept = 0;
  auto take = [&](int32_t i) {
    if (!kept[static_cast<size_t>(i)]) {
      kept[static_cast<size_t>(i)] = 1;
      ++n_kept;
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    if (!pinned.empty() && pinned[static_cast<size_t>(i)]) take(i);
  }
  std::vector<int32_t> order(pos.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pos[a] < pos[b]; });
  for (int32_t i = 0; i < n && i < sinks && n_kept < keep; ++i) take(order[i]);
  for (int32_t i = n - 1; i >= 0 && i >= n - recent && n_kept < keep; --i) take(order[i]);
  if (!scores.empty()) {
    std::vector<int32_t> rest;
    for (int32_t i = 0; i < n; ++i) {
      if (!kept[i]) rest.push_back(i);
    }
    std::sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
      return scores[a] != scores[b] ? scores[a] > scores[b] : pos[a] > pos[b];
    });
    for (int32_t i : rest) {
      if (n_kept < keep) take(i);
    }
  }
  for (int32_t i = n - 1; i >= 0 && n_kept < keep; --i) take(order[i]);
  std::vector<int32_t> drop;
  for (int32_t i = 0; i < n; ++i) {
    if (!kept[i]) drop.push_back(i);
  }
  return drop;
}

TEST(EvictPolicy, SelectionKeepsWhatTheFullSortRuleKeeps) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t n = std::uniform_int_distribution<int32_t>(1, 80)(rng);
    // Distinct positions with gaps, in a shuffled slot order (as after compactions).
    std::vector<int32_t> pos(static_cast<size_t>(n));
    int32_t p = 0;
    for (int32_t& x : pos) x = (p += std::uniform_int_distribution<int32_t>(1, 3)(rng));
    std::shuffle(pos.begin(), pos.end(), rng);
    // Few distinct scores, so ties are common.
    std::vector<float> scores(pos.size());
    for (float& x : scores) x = static_cast<float>(std::uniform_int_distribution<int>(0, 4)(rng));
    std::vector<uint8_t> pinned;
    if (trial % 3 == 0) {
      pinned.resize(pos.size());
      for (uint8_t& x : pinned) x = std::uniform_int_distribution<int>(0, 9)(rng) == 0;
    }
    const int32_t budget = std::uniform_int_distribution<int32_t>(1, n + 2)(rng);
    const int32_t sinks = std::uniform_int_distribution<int32_t>(0, std::min(8, budget - 1))(rng);
    const int32_t recent = std::uniform_int_distribution<int32_t>(-1, budget - sinks - 1)(rng);
    const EvictConfig cfg = config(trial % 2 ? EvictKind::kH2o : EvictKind::kWindow, budget, sinks, recent);
    ASSERT_NO_THROW(cfg.validate());
    const auto policy = make_evict_policy(cfg);
    const int32_t keep = std::uniform_int_distribution<int32_t>(0, budget)(rng);
    const bool window = cfg.kind == EvictKind::kWindow;
    const auto want = reference_drop(pos, window ? std::vector<float>{} : scores, pinned, keep, sinks,
                                     window ? keep : cfg.recent_for(keep));
    ASSERT_EQ(policy->choose(EvictCandidates{pos, scores, pinned}, keep), want)
        << "trial " << trial << ": n " << n << ", keep " << keep << ", sinks " << sinks << ", recent " << recent;
  }
}

TEST(EvictPolicy, WindowKeepsTheSinksAndTheMostRecentPositions) {
  // Slots out of position order, as after a compaction.
  const std::vector<int32_t> pos = {0, 1, 9, 3, 8, 5, 6, 7, 4, 2};
  const std::vector<float> scores(10, 0.0f);
  const auto p = make_evict_policy(config(EvictKind::kWindow, 5, 2, -1));
  const auto drop = p->choose(EvictCandidates{pos, scores, {}}, 5);
  EXPECT_TRUE(std::is_sorted(drop.begin(), drop.end()));
  EXPECT_EQ(drop.size(), 5u);
  EXPECT_EQ(kept_positions(pos, drop), (std::vector<int32_t>{0, 1, 7, 8, 9}));
}

TEST(EvictPolicy, WindowIgnoresScores) {
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5};
  const std::vector<float> scores = {0, 0, 100, 100, 0, 0};
  const auto p = make_evict_policy(config(EvictKind::kWindow, 3, 1, -1));
  EXPECT_EQ(kept_positions(pos, p->choose(EvictCandidates{pos, scores, {}}, 3)), (std::vector<int32_t>{0, 4, 5}));
}

TEST(EvictPolicy, H2oKeepsSinksRecentAndTheHeaviestHitters) {
  std::vector<int32_t> pos(12);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> scores(12, 0.1f);
  scores[3] = 5.0f;   // heavy
  scores[6] = 4.0f;   // heavy
  scores[7] = 0.5f;   // lighter than both
  scores[0] = 0.0f;   // a sink needs no score
  scores[11] = 0.0f;  // recent needs none either
  const auto p = make_evict_policy(config(EvictKind::kH2o, 5, 1, 2));
  const auto drop = p->choose(EvictCandidates{pos, scores, {}}, 5);
  EXPECT_EQ(kept_positions(pos, drop), (std::vector<int32_t>{0, 3, 6, 10, 11}));
}

TEST(EvictPolicy, H2oBreaksTiesTowardTheLaterToken) {
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5};
  const std::vector<float> scores = {0, 1, 1, 1, 0, 0};
  const auto p = make_evict_policy(config(EvictKind::kH2o, 3, 1, 1));
  EXPECT_EQ(kept_positions(pos, p->choose(EvictCandidates{pos, scores, {}}, 3)), (std::vector<int32_t>{0, 3, 5}));
}

TEST(EvictPolicy, PinnedSlotsAreNeverDropped) {
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> scores = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> pinned = {0, 1, 1, 0, 0, 0, 0, 0};
  const auto p = make_evict_policy(config(EvictKind::kH2o, 4, 1, 1));
  const auto drop = p->choose(EvictCandidates{pos, scores, pinned}, 4);
  EXPECT_EQ(kept_positions(pos, drop), (std::vector<int32_t>{0, 1, 2, 7}));
}

TEST(EvictPolicy, NothingIsDroppedWithinTheBudget) {
  const std::vector<int32_t> pos = {0, 1, 2};
  const std::vector<float> scores = {0, 0, 0};
  for (EvictKind k : {EvictKind::kWindow, EvictKind::kH2o, EvictKind::kSnapKv}) {
    EXPECT_TRUE(make_evict_policy(config(k, 3, 1, 1))->choose(EvictCandidates{pos, scores, {}}, 3).empty());
  }
}

TEST(EvictPolicy, H2oScoresAreAnExponentialMovingAverage) {
  const auto p = make_evict_policy(config(EvictKind::kH2o, 8, 1, 1));
  std::vector<float> scores = {1.0f, 0.5f, 0.0f};
  const std::vector<float> mass = {0.0f, 1.0f, 0.5f};
  const std::vector<int32_t> pos = {0, 1, 2};
  p->update_scores(scores, mass, pos, 10, 1, 4);
  EXPECT_FLOAT_EQ(scores[0], 0.9f);
  EXPECT_FLOAT_EQ(scores[1], 0.45f + 0.1f);
  EXPECT_FLOAT_EQ(scores[2], 0.05f);
  EXPECT_EQ(p->importance_rows(0, 16, 100), std::optional<int32_t>(0));  // column sums of every row
  EXPECT_TRUE(p->may_evict(0, 16, 100));
}

TEST(EvictPolicy, SnapKvVotesWithThePromptsLastWindowOnly) {
  EvictConfig c = config(EvictKind::kSnapKv, 64, 4, 8);
  c.snap_window = 32;
  const auto p = make_evict_policy(c);
  // A prompt of 100 tokens in chunks of 40: [0,40) has no voter, [40,80) from row 28 (position
  // 68), [80,100) every row; decoding: every row.
  EXPECT_EQ(p->importance_rows(0, 40, 100), std::nullopt);
  EXPECT_EQ(p->importance_rows(40, 40, 100), std::optional<int32_t>(28));
  EXPECT_EQ(p->importance_rows(80, 20, 100), std::optional<int32_t>(0));
  EXPECT_EQ(p->importance_rows(100, 1, 100), std::optional<int32_t>(0));
  // The prompt is kept whole until its end.
  EXPECT_FALSE(p->may_evict(40, 40, 100));
  EXPECT_TRUE(p->may_evict(80, 20, 100));
  EXPECT_TRUE(p->may_evict(100, 1, 100));
}

TEST(EvictPolicy, SnapKvPoolsTheVotesOverNeighbouringPositions) {
  EvictConfig c = config(EvictKind::kSnapKv, 4, 0, 0);
  c.snap_pool = 3;
  const auto p = make_evict_policy(c);
  auto& snap = dynamic_cast<const SnapKvPolicy&>(*p);
  // Positions with a hole at 3 (evicted): 4's window {3,4,5} holds 4 and 5 only.
  const std::vector<int32_t> pos = {0, 1, 2, 4, 5, 6};
  const std::vector<float> votes = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 3.0f};
  EXPECT_EQ(snap.pooled(pos, votes), (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f, 3.0f, 3.0f}));
  // Across the prompt's end: the votes add up, then become their pooled form.
  std::vector<float> scores = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> last = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f};
  p->update_scores(scores, last, pos, 4, 2, 6);
  EXPECT_EQ(scores, (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f, 3.0f, 3.0f}));
}

TEST(EvictPolicy, ConfigurationErrorsNameTheirFlag) {
  auto message = [](const EvictConfig& c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(config(EvictKind::kNone, 128, 4, -1)).find("--kv-budget needs an eviction policy"), std::string::npos);
  EXPECT_NE(message(config(EvictKind::kH2o, 0, 4, -1)).find("--kv-evict h2o needs --kv-budget"), std::string::npos);
  EXPECT_NE(message(config(EvictKind::kWindow, 4, 4, -1)).find("--kv-budget (4) must be larger than --kv-sinks (4)"),
            std::string::npos);
  EXPECT_NE(message(config(EvictKind::kH2o, 16, 4, 12)).find("--kv-sinks + --kv-recent"), std::string::npos);
  EXPECT_NE(message(config(EvictKind::kH2o, 16, -1, 2)).find("--kv-sinks must be >= 0"), std::string::npos);
  EXPECT_NE(message(config(EvictKind::kH2o, 16, 1, -3)).find("--kv-recent must be >= 0"), std::string::npos);
  EXPECT_EQ(message(config(EvictKind::kH2o, 16, 4, 4)), "");
  EXPECT_EQ(message(config(EvictKind::kNone, 0, 4, -1)), "");
  EXPECT_EQ(config(EvictKind::kH2o, 132, 4, -1).recent_for(132), 64);
  EXPECT_EQ(config(EvictKind::kWindow, 132, 4, 10).recent_for(132), 128);
  EXPECT_EQ(evict_kind_from_name("snapkv"), EvictKind::kSnapKv);
  EXPECT_EQ(evict_kind_from_name("H2O"), std::nullopt);
}

}  // namespace
}  // namespace strata
