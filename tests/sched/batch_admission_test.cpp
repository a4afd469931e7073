// Batch admission by projected KV demand (Scheduler::set_batch_admission, the pid controller's
// gate) on the fake model: the projection counts the blocks held and the blocks running sequences
// will still need to reach max_tokens; a batch sequence whose admission would plan past
// (1 - reserve) of the pool waits, interactive ones do not, nothing waits when nothing runs, and a
// batch-only load under the gate never preempts where the static admission does.
#include <gtest/gtest.h>

#include "sched/fake_engine.h"

namespace strata {
namespace {

using test::FakeEngine;

SchedulerConfig config() {
  SchedulerConfig sc;
  sc.preempt = PreemptMode::kRecompute;
  sc.max_batched_tokens = 64;
  sc.max_seqs = 16;
  sc.watermark = 0;
  return sc;
}

void all_batch(FakeEngine& e) {
  e.decorate = [](Sequence& s) { s.qos = s.tenant == "i" ? QosClass::kInteractive : QosClass::kBatch; };
}

TEST(BatchAdmission, ProjectedDemandCountsHeldBlocksAndGrowthToMaxTokens) {
  FakeEngine e(config(), 32);  // blocks of 4 tokens
  all_batch(e);
  e.sched_.set_batch_admission(1000, 0);
  e.add(8, 9);  // 8 prompt tokens + 8 more with slots (the last sampled token gets none): 4 blocks at the end
  e.step();     // prompt computed: 2 blocks held, 1 token generated (9 tokens, 8 with slots)
  EXPECT_EQ(e.sched_.projected_demand_blocks(1000), 4);
  // Within a horizon of 4 more tokens: 12 tokens with slots, 3 blocks.
  EXPECT_EQ(e.sched_.projected_demand_blocks(4), 3);
  for (int i = 0; i < 4; ++i) e.step();
  EXPECT_EQ(e.sched_.projected_demand_blocks(1000), 4);  // what grew was already counted
}

TEST(BatchAdmission, ABatchSequenceThatWouldOutgrowThePoolWaitsWhereStaticAdmissionTakesIt) {
  for (bool gated : {false, true}) {
    FakeEngine e(config(), 16);
    all_batch(e);
    if (gated) e.sched_.set_batch_admission(1000, 0);
    const SeqId a = e.add(8, 33);  // 40 tokens with slots at the end: 10 blocks
    e.step();
    const SeqId b = e.add(8, 33, 0, "", 500);  // fits now (2 blocks), not beside a's growth
    e.step();
    EXPECT_EQ(e.sched_.seq(a).status, SeqStatus::kRunning);
    EXPECT_EQ(e.sched_.seq(b).status, gated ? SeqStatus::kWaiting : SeqStatus::kRunning) << gated;
  }
}

TEST(BatchAdmission, InteractiveSequencesIgnoreTheGateAndTheReserve) {
  FakeEngine e(config(), 16);
  all_batch(e);
  e.sched_.set_batch_admission(1000, 0.5);
  e.add(8, 33);
  e.step();
  const SeqId i = e.add(8, 33, 0, "i", 500);
  e.step();
  EXPECT_EQ(e.sched_.seq(i).status, SeqStatus::kRunning);
}

TEST(BatchAdmission, TheReserveKeepsThatShareOfThePoolOutOfBatchPlans) {
  // a plans 4 blocks of 32; b plans 4 more. Reserve 0.8: 8 > 0.2 * 32, b waits; 0.5: it starts.
  for (double reserve : {0.8, 0.5}) {
    FakeEngine e(config(), 32);
    all_batch(e);
    e.sched_.set_batch_admission(1000, reserve);
    e.add(8, 9);
    e.step();
    const SeqId b = e.add(8, 9, 0, "", 500);
    e.step();
    EXPECT_EQ(e.sched_.seq(b).status, reserve > 0.6 ? SeqStatus::kWaiting : SeqStatus::kRunning) << reserve;
  }
}

TEST(BatchAdmission, NothingRunningTheGateYields) {
  // Its own growth alone is more than the pool leaves after the reserve: it starts all the same.
  FakeEngine e(config(), 16);
  all_batch(e);
  e.sched_.set_batch_admission(1000, 0.9);
  const SeqId a = e.add(8, 49);
  e.step();
  EXPECT_EQ(e.sched_.seq(a).status, SeqStatus::kRunning);
  while (!e.sched_.idle()) e.step();
  EXPECT_EQ(e.generated_[a], 49);
}

TEST(BatchAdmission, ABatchLoadUnderTheGateNeverPreemptsAndFinishesEverything) {
  int64_t preemptions[2] = {0, 0};
  for (bool gated : {false, true}) {
    FakeEngine e(config(), 48);
    all_batch(e);
    if (gated) e.sched_.set_batch_admission(1000, 0);
    uint64_t lcg = 7;
    for (int i = 0; i < 40; ++i) {
      lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
      e.add(8 + static_cast<int32_t>((lcg >> 33) % 17), 8 + static_cast<int32_t>((lcg >> 45) % 41), 0, "",
            static_cast<TokenId>(1 + 20 * i));
    }
    for (int s = 0; s < 5000 && !e.sched_.idle(); ++s) e.step();
    EXPECT_TRUE(e.sched_.idle()) << gated;
    EXPECT_EQ(e.finished_.size(), 40u) << gated;
    preemptions[gated] = e.sched_.total_preemptions();
  }
  EXPECT_GT(preemptions[0], 0);  // the static admission overcommits this pool
  EXPECT_EQ(preemptions[1], 0);
}

}  // namespace
}  // namespace strata
