// The projected KV demand (sched/kv_demand.h) as a pure function: the peak of the demand curve,
// where finished sequences free their blocks, within the horizon, with the warm tier's and an
// eviction budget's caps, and a candidate's blocks taken now.
#include <gtest/gtest.h>

#include <vector>

#include "sched/kv_demand.h"

namespace strata {
namespace {

const DemandShape kShape{4, INT32_MAX};  // blocks of 4 tokens

DemandCurve decoding(int32_t from, int32_t last, int32_t held) {
  DemandCurve c;
  c.from = from;
  c.first = from;
  c.last = last;
  c.held = held;
  return c;
}

TEST(KvDemand, NothingRunningIsWhatIsHeld) {
  EXPECT_EQ(peak_demand(7, {}, 100, kShape), 7);
}

TEST(KvDemand, StaggeredSequencesPeakBelowTheSumOfTheirFinalSizes) {
  // a: 8 tokens (2 blocks), ends at 16 (4 blocks) after 8 steps; b: 16 tokens (4 blocks), ends at
  // 40 (10 blocks) after 24 steps. Sum of final sizes: 14; but a is gone before b grows past 24.
  const std::vector<DemandCurve> c = {decoding(8, 16, 2), decoding(16, 40, 4)};
  // Step 8: a at 16 (+2), b at 24 (+2) -> 6 + 4 = 10. Step 24: a freed (-2), b at 40 (+6) -> 10.
  EXPECT_EQ(peak_demand(6, c, 1000, kShape), 10);
  // A horizon of 4 steps: a at 12 (+1), b at 20 (+1).
  EXPECT_EQ(peak_demand(6, c, 4, kShape), 8);
}

TEST(KvDemand, ThePeakIsWhereTheLongerOneStillGrowsWhileTheShortOneHolds) {
  // a ends after 40 steps at 48 tokens (12 blocks), b after 4 steps: the peak is at step 4 with
  // both alive, or at 40 with a alone; a's growth dominates.
  const std::vector<DemandCurve> c = {decoding(8, 48, 2), decoding(8, 12, 2)};
  // Step 4: a 12 (+1), b 12 (+1) -> 4 + 2 = 6. Step 40: a 48 (+10), b freed (-2) -> 12.
  EXPECT_EQ(peak_demand(4, c, 1000, kShape), 12);
}

TEST(KvDemand, APromptBeingPrefilledCountsAtOnce) {
  DemandCurve c = decoding(4, 20, 1);
  c.first = 16;  // 12 prompt tokens still to come: needed at step 0
  EXPECT_EQ(peak_demand(1, std::vector<DemandCurve>{c}, 0, kShape), 4);
  EXPECT_EQ(peak_demand(1, std::vector<DemandCurve>{c}, 4, kShape), 5);
}

TEST(KvDemand, ACandidateAddsWhatItTakesNowAndFreesItWhenItEnds) {
  DemandCurve cand = decoding(8, 12, 2);
  cand.extra = 2;  // not yet in `used`
  const std::vector<DemandCurve> c = {decoding(8, 40, 2), cand};
  // Step 4: 2 + (a +1) + (cand 2 + 1) = 6; step 32: a at 40 (+8) and cand gone -> 10.
  EXPECT_EQ(peak_demand(2, c, 1000, kShape), 10);
  EXPECT_EQ(peak_demand(2, c, 4, kShape), 6);
}

TEST(KvDemand, CapsOfTheWarmTierAndOfAnEvictionBudget) {
  DemandCurve c = decoding(8, 400, 2);
  EXPECT_EQ(peak_demand(2, std::vector<DemandCurve>{c}, 1000, kShape), 100);
  EXPECT_EQ(peak_demand(2, std::vector<DemandCurve>{c}, 1000, DemandShape{4, 5}), 5);  // only 5 hot blocks per sequence
  c.max_blocks = 9;                                               // an eviction budget of ~32 tokens
  EXPECT_EQ(peak_demand(2, std::vector<DemandCurve>{c}, 1000, kShape), 9);
}

}  // namespace
}  // namespace strata
