// --preempt auto (sched/preempt_cost.h): the choice between swap and recompute follows the
// measured costs — 2 x the victim's bytes over the cold tier's bandwidth against its computed
// tokens over the prefill rate — with rates that are exponential moving averages of what was
// observed; in the scheduler the victim is swapped or recomputed accordingly, and finishes.
#include <gtest/gtest.h>

#include <cmath>

#include "sched/preempt_cost.h"
#include "fake_engine.h"

namespace strata {
namespace {

using test::FakeEngine;

TEST(PreemptCostModel, BeforeAnyPrefillMeasurementItSwaps) {
  PreemptCostModel m;
  EXPECT_EQ(m.bandwidth(), kDefaultColdBytesPerS);
  EXPECT_FALSE(m.measured_transfer());
  EXPECT_EQ(m.prefill_rate(), 0);
  EXPECT_TRUE(std::isinf(m.recompute_seconds(10)));
  EXPECT_EQ(m.choose(uint64_t{1} << 40, 1), PreemptMode::kSwap);
}

TEST(PreemptCostModel, TheCheaperOfTwoTransfersAndARecomputeWins) {
  PreemptCostModel m(1e9);                 // 1 GB/s until measured
  m.observe_forward(1000, 1.0);            // 1000 tokens/s
  EXPECT_DOUBLE_EQ(m.prefill_rate(), 1000);
  // 100 MB: out and back = 0.2 s. 100 tokens = 0.1 s (recompute), 500 tokens = 0.5 s (swap).
  EXPECT_DOUBLE_EQ(m.swap_seconds(100'000'000), 0.2);
  EXPECT_EQ(m.choose(100'000'000, 100), PreemptMode::kRecompute);
  EXPECT_EQ(m.choose(100'000'000, 500), PreemptMode::kSwap);
  EXPECT_EQ(m.choose(100'000'000, 200), PreemptMode::kSwap) << "a tie swaps";
  // A measured cold tier 10x faster than the default makes the 100-token victim a swap too.
  m.observe_transfer(10'000'000'000, 1.0);
  EXPECT_TRUE(m.measured_transfer());
  EXPECT_DOUBLE_EQ(m.bandwidth(), 1e10);
  EXPECT_EQ(m.choose(100'000'000, 100), PreemptMode::kSwap);
  // Nothing to recompute: recompute unless there is nothing to move either.
  EXPECT_EQ(m.choose(1, 0), PreemptMode::kRecompute);
  EXPECT_EQ(m.choose(0, 0), PreemptMode::kSwap);
}

TEST(PreemptCostModel, RatesAreMovingAveragesOfWhatWasObserved) {
  PreemptCostModel m;
  m.observe_forward(2000, 1.0);  // first sample: taken as it is
  m.observe_forward(1000, 1.0);  // then 0.8 old + 0.2 new
  EXPECT_DOUBLE_EQ(m.prefill_rate(), 0.8 * 2000 + 0.2 * 1000);
  m.observe_forward(PreemptCostModel::kMinRateTokens - 1, 1e-9);  // a small step says nothing about prefill
  EXPECT_DOUBLE_EQ(m.prefill_rate(), 1800);
  m.observe_transfer(4e9, 2.0);
  m.observe_transfer(1e9, 1.0);
  EXPECT_DOUBLE_EQ(m.bandwidth(), 0.8 * 2e9 + 0.2 * 1e9);
  m.observe_transfer(0, 1.0);   // ignored
  m.observe_transfer(100, 0.0);  // ignored
  EXPECT_DOUBLE_EQ(m.bandwidth(), 1.8e9);
  m.set_default_bandwidth(5e9);  // a measured transfer wins over the default
  EXPECT_DOUBLE_EQ(m.bandwidth(), 1.8e9);
}

// The scene of SchedulerPlan.SwapOutPlansSpillsAndResumePlansFetches, with a host cold tier and
// --preempt auto: two sequences fill the 4 blocks, the first one's next token preempts the second.
struct AutoScene {
  explicit AutoScene(bool cheap_recompute) : e(config(), kv()) {
    PreemptCostModel& c = e.sched_.preempt_costs();
    c.set_default_bandwidth(1e9);
    // The victim holds 2 blocks (128 bytes: 256 bytes moved, 2.56e-7 s) and 7 computed tokens.
    if (cheap_recompute) c.observe_forward(1'000'000'000, 1.0);  // 7 tokens: 7e-9 s
    else c.observe_forward(32, 1.0);                             // 7 tokens: 0.22 s
    a = e.add(8, 3);
    b = e.add(7, 3, 0, "", 100);
  }
  static SchedulerConfig config() {
    SchedulerConfig sc;
    sc.preempt = PreemptMode::kAuto;
    sc.watermark = 0;
    return sc;
  }
  static KvConfig kv() {
    KvConfig c = test::kv_cfg(4);
    c.host_bytes = 64 * 1024;
    return c;
  }
  void finish() {
    for (int guard = 0; guard < 100 && !e.sched_.idle(); ++guard) e.step();
  }
  FakeEngine e;
  SeqId a = 0, b = 0;
};

TEST(PreemptAuto, ASlowRecomputeMakesTheVictimASwap) {
  AutoScene s(false);
  ASSERT_TRUE(s.e.kv_.has_cold_tier());
  ASSERT_EQ(s.e.step().seqs.size(), 2u);
  EXPECT_EQ(s.e.kv_.swap_out_bytes(s.b), 2 * s.e.storage_.capacity().hot_block_bytes);
  SchedulerOutput out = s.e.step();
  ASSERT_EQ(out.preempted, std::vector<SeqId>{s.b});
  EXPECT_EQ(s.e.sched_.seq(s.b).status, SeqStatus::kSwapped);
  EXPECT_EQ(s.e.kv_.stats().swap_outs, 1);
  EXPECT_EQ(s.e.kv_.stats().host.used, 2) << "the blocks went to the host tier";
  s.finish();
  EXPECT_TRUE(s.e.sched_.idle());
  EXPECT_EQ(s.e.kv_.stats().swap_ins, 1);
}

TEST(PreemptAuto, AFastRecomputeMakesTheVictimARecompute) {
  AutoScene s(true);
  ASSERT_EQ(s.e.step().seqs.size(), 2u);
  SchedulerOutput out = s.e.step();
  ASSERT_EQ(out.preempted, std::vector<SeqId>{s.b});
  EXPECT_EQ(s.e.sched_.seq(s.b).status, SeqStatus::kWaiting);
  EXPECT_EQ(s.e.sched_.seq(s.b).num_computed, 0);
  EXPECT_EQ(s.e.kv_.stats().swap_outs, 0);
  s.finish();
  EXPECT_TRUE(s.e.sched_.idle());
}

TEST(PreemptAuto, EitherChoiceFinishesEverySequenceWithAllItsTokens) {
  for (bool cheap : {false, true}) {
    AutoScene s(cheap);
    s.finish();
    EXPECT_EQ(s.e.finished_.size(), 2u) << "cheap recompute: " << cheap;
    EXPECT_EQ(s.e.generated_[s.a], 3);
    EXPECT_EQ(s.e.generated_[s.b], 3);
    EXPECT_EQ(s.e.kv_.stats().host.used, 0) << "nothing left in the host tier";
  }
}

}  // namespace
}  // namespace strata
