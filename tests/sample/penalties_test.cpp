// Penalties: the formulas on logits, and counts kept incrementally equal counts from scratch.
#include "sample/penalties.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace strata {
namespace {

TEST(Penalties, RepetitionDividesPositiveAndMultipliesNonPositiveLogits) {
  std::vector<float> logits = {3.0f, -2.0f, 0.0f, 5.0f, -1.0f};
  const TokenCounts counts = {{0, 1}, {1, 4}, {2, 1}, {4, 2}};
  apply_repetition_penalty(logits, counts, 1.5f);
  EXPECT_FLOAT_EQ(logits[0], 3.0f / 1.5f);
  EXPECT_FLOAT_EQ(logits[1], -2.0f * 1.5f);
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
  EXPECT_FLOAT_EQ(logits[3], 5.0f);  // not in the history
  EXPECT_FLOAT_EQ(logits[4], -1.0f * 1.5f);  // once per token, however often it occurred

  // A penalty below 1 rewards repetition.
  std::vector<float> boost = {3.0f, -2.0f};
  apply_repetition_penalty(boost, {{0, 1}, {1, 1}}, 0.5f);
  EXPECT_FLOAT_EQ(boost[0], 6.0f);
  EXPECT_FLOAT_EQ(boost[1], -1.0f);
}

TEST(Penalties, PresenceOnceAndFrequencyPerOccurrence) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  const TokenCounts counts = {{0, 1}, {1, 3}, {3, 10}};
  apply_presence_frequency_penalties(logits, counts, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(logits[0], 1.0f - 0.5f - 0.25f * 1);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.25f * 3);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f - 0.5f - 0.25f * 10);
  // Negative values encourage repetition.
  std::vector<float> more = {0.0f};
  apply_presence_frequency_penalties(more, {{0, 2}}, -1.0f, -0.5f);
  EXPECT_FLOAT_EQ(more[0], 2.0f);
}

TokenCounts count_from_scratch(const std::vector<TokenId>& tokens, size_t first) {
  TokenCounts c;
  for (size_t i = first; i < tokens.size(); ++i) ++c[tokens[i]];
  return c;
}

TEST(PenaltyTracker, IncrementalCountsEqualCountsFromScratch) {
  std::mt19937 gen(3);
  std::uniform_int_distribution<TokenId> token(0, 30);
  for (int32_t window : {0, 1, 5, 40, 1000}) {
    std::vector<TokenId> prompt(25);
    for (TokenId& t : prompt) t = token(gen);
    std::vector<TokenId> generated;
    PenaltyTracker tracker(window, true, true);
    for (int step = 0; step < 120; ++step) {
      tracker.update(prompt, generated);
      std::vector<TokenId> all = prompt;
      all.insert(all.end(), generated.begin(), generated.end());
      const size_t first = window > 0 && all.size() > static_cast<size_t>(window) ? all.size() - window : 0;
      ASSERT_EQ(tracker.window_counts(), count_from_scratch(all, first)) << "window " << window << " step " << step;
      ASSERT_EQ(tracker.generated_counts(), count_from_scratch(generated, 0)) << "window " << window;
      // Usually one new token per step, sometimes several (the caller may skip calls).
      const int add = step % 7 == 3 ? 3 : 1;
      for (int i = 0; i < add; ++i) generated.push_back(token(gen));
    }
  }
}

TEST(PenaltyTracker, FirstCallMayAlreadyHaveGeneratedTokens) {
  PenaltyTracker tracker(3, true, true);
  const std::vector<TokenId> prompt = {1, 2, 3, 4};
  const std::vector<TokenId> generated = {5, 5};
  tracker.update(prompt, generated);
  EXPECT_EQ(tracker.window_counts(), (TokenCounts{{4, 1}, {5, 2}}));
  EXPECT_EQ(tracker.generated_counts(), (TokenCounts{{5, 2}}));
}

TEST(PenaltyTracker, KeepsOnlyWhatIsAskedFor) {
  PenaltyTracker tracker(0, false, true);
  const std::vector<TokenId> prompt = {1, 2};
  const std::vector<TokenId> generated = {3};
  tracker.update(prompt, generated);
  EXPECT_TRUE(tracker.window_counts().empty());
  EXPECT_EQ(tracker.generated_counts(), (TokenCounts{{3, 1}}));
}

TEST(PenaltyTrackerDeathTest, RejectsAShrinkingHistory) {
  PenaltyTracker tracker(0, true, true);
  const std::vector<TokenId> prompt = {1, 2};
  const std::vector<TokenId> generated = {3, 4};
  tracker.update(prompt, generated);
  EXPECT_DEATH(tracker.update(prompt, std::span<const TokenId>(generated).first(1)), "generated tokens shrank");
  EXPECT_DEATH(tracker.update(std::span<const TokenId>(prompt).first(1), generated), "prompt changed");
}

}  // namespace
}  // namespace strata
