// The scheduler with a deterministic fake model (no weights): token budget and chunk sizes,
// decode first, watermark admission, victim order, no thrash, priority preemption, fairness.
#include <gtest/gtest.h>

#include <map>

#include "sched/fake_engine.h"

namespace strata {
namespace {

using test::FakeEngine;
using test::kv_cfg;

TEST(Scheduler, ChunkedPrefillRespectsTheTokenBudgetAndDecodesGoFirst) {
  SchedulerConfig sc;
  sc.max_batched_tokens = 32;
  FakeEngine e(sc, 256);
  const SeqId a = e.add(5, 10);
  auto out = e.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].n_new, 5);
  EXPECT_TRUE(out.seqs[0].logits);
  const SeqId b = e.add(100, 3, 0, "", 500);
  out = e.step();
  // a decodes first (1 token), then b's first chunk takes the rest of the budget.
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].id, a);
  EXPECT_EQ(out.seqs[0].n_new, 1);
  EXPECT_EQ(out.seqs[1].id, b);
  EXPECT_EQ(out.seqs[1].n_new, 31);
  EXPECT_FALSE(out.seqs[1].logits);
  EXPECT_EQ(out.n_tokens, 32);
  std::vector<int32_t> chunks;
  while (e.sched_.has(b) && !e.sched_.seq(b).prompt_done()) {
    out = e.step();
    for (const auto& s : out.seqs) {
      if (s.id == b) chunks.push_back(s.n_new);
      EXPECT_LE(out.n_tokens, 32);
    }
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{31, 31, 7}));
  for (int guard = 0; guard < 10000 && !e.sched_.idle(); ++guard) e.step();
  ASSERT_TRUE(e.sched_.idle());
  EXPECT_EQ(e.kv_.stats().hot.used, 0);
}

TEST(Scheduler, MaxSeqsLimitsTheBatch) {
  SchedulerConfig sc;
  sc.max_seqs = 3;
  FakeEngine e(sc, 256);
  for (int i = 0; i < 5; ++i) e.add(4, 5, 0, "", 10 * i + 1);
  auto out = e.step();
  EXPECT_EQ(out.seqs.size(), 3u);
  EXPECT_EQ(e.sched_.counts().waiting, 2);
  for (int guard = 0; guard < 10000 && !e.sched_.idle(); ++guard) EXPECT_LE(e.step().seqs.size(), 3u);
}

TEST(Scheduler, AdmissionKeepsAWatermarkOfFreeBlocks) {
  SchedulerConfig sc;
  sc.watermark = 0.25;  // 4 of 16 blocks stay free for running sequences
  FakeEngine e(sc, 16);
  for (int i = 0; i < 4; ++i) e.add(16, 2, 0, "", 100 * i + 1);  // 4 blocks each + 1 for the decode
  auto out = e.step();
  // Each admission needs 4 blocks and must leave 4 free: 16 -> 12 -> 8 -> 4; the 4th waits.
  EXPECT_EQ(out.seqs.size(), 3u);
  EXPECT_EQ(e.sched_.counts().waiting, 1);
  EXPECT_GE(e.kv_.num_available_blocks(), 4);
  for (int guard = 0; guard < 10000 && !e.sched_.idle(); ++guard) e.step();
  ASSERT_TRUE(e.sched_.idle());
  EXPECT_EQ(e.finished_.size(), 4u);
}

TEST(Scheduler, PreemptsTheLowestPriorityLatestArrivalAndDoesNotThrash) {
  for (PreemptMode mode : {PreemptMode::kRecompute}) {
    SchedulerConfig sc;
    sc.policy = SchedulingPolicy::kPriority;
    sc.preempt = mode;
    sc.watermark = 0;
    FakeEngine e(sc, 12);
    const SeqId hi = e.add(7, 40, 5, "", 1);
    const SeqId lo_early = e.add(7, 40, 1, "", 100);
    const SeqId lo_late = e.add(7, 40, 1, "", 200);
    // 3 x 2 blocks; growing to 4 blocks each needs 12: somebody must go.
    SeqId first_victim = -1;
    std::map<SeqId, int> preempted;
    for (int step = 0; step < 400 && !e.sched_.idle(); ++step) {
      auto out = e.step();
      for (SeqId v : out.preempted) {
        if (first_victim < 0) first_victim = v;
        ++preempted[v];
      }
    }
    EXPECT_EQ(first_victim, lo_late);
    EXPECT_EQ(preempted.count(hi), 0u) << "the high-priority sequence is never the victim";
    EXPECT_EQ(e.finished_.size(), 3u);
    EXPECT_EQ(e.generated_[hi], 40);
    EXPECT_EQ(e.generated_[lo_early], 40);
    EXPECT_EQ(e.generated_[lo_late], 40);
    EXPECT_EQ(e.kv_.stats().hot.used, 0);
  }
}

TEST(Scheduler, AResumedSequenceIsNotPreemptedBeforeItMakesProgress) {
  SchedulerConfig sc;
  sc.preempt = PreemptMode::kRecompute;
  sc.watermark = 0;
  FakeEngine e(sc, 10);
  std::vector<SeqId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(e.add(6, 30, 0, "", 50 * i + 1));
  // Track, per sequence, whether it was preempted again before generating a token since the last
  // preemption: that is thrashing.
  std::map<SeqId, int> gen_at_preempt;
  for (int step = 0; step < 2000 && !e.sched_.idle(); ++step) {
    auto out = e.step();
    for (SeqId v : out.preempted) {
      const int now = e.generated_[v];
      auto it = gen_at_preempt.find(v);
      if (it != gen_at_preempt.end()) {
        EXPECT_GT(now, it->second) << "sequence " << v << " thrashed";
      }
      gen_at_preempt[v] = now;
    }
  }
  EXPECT_TRUE(e.sched_.idle());
  EXPECT_GT(e.sched_.total_preemptions(), 0);
  EXPECT_EQ(e.kv_.stats().hot.used, 0);
}

TEST(Scheduler, AHigherPriorityArrivalPreemptsLowerPriorityRunningSequences) {
  SchedulerConfig sc;
  sc.policy = SchedulingPolicy::kPriority;
  sc.preempt = PreemptMode::kRecompute;
  sc.watermark = 0;
  FakeEngine e(sc, 8);
  const SeqId lo1 = e.add(12, 8, 0, "", 1);  // 20 tokens: 5 of the 8 blocks at most
  const SeqId lo2 = e.add(12, 8, 0, "", 100);
  e.step();
  EXPECT_EQ(e.sched_.counts().running, 2);
  const SeqId hi = e.add(12, 4, 9, "", 300);
  auto out = e.step();
  ASSERT_FALSE(out.preempted.empty());
  EXPECT_EQ(out.preempted[0], lo2) << "the latest lower-priority arrival goes first";
  bool hi_scheduled = false;
  for (const auto& s : out.seqs) hi_scheduled = hi_scheduled || s.id == hi;
  EXPECT_TRUE(hi_scheduled);
  for (int guard = 0; guard < 10000 && !e.sched_.idle(); ++guard) e.step();
  ASSERT_TRUE(e.sched_.idle());
  EXPECT_EQ(e.generated_[hi], 4);
  EXPECT_EQ(e.generated_[lo1], 8);
  EXPECT_EQ(e.generated_[lo2], 8);
}

TEST(Scheduler, FcfsDoesNotLetALaterRequestOvertake) {
  SchedulerConfig sc;
  sc.watermark = 0;
  FakeEngine e(sc, 8);
  e.add(20, 2, 0, "", 1);   // 5 blocks + growth
  e.step();
  const SeqId big = e.add(16, 2, 0, "", 100);   // needs 4: waits
  const SeqId small = e.add(2, 2, 0, "", 300);  // would fit, but must not overtake
  auto out = e.step();
  for (const auto& s : out.seqs) EXPECT_NE(s.id, small);
  for (int guard = 0; guard < 10000 && !e.sched_.idle(); ++guard) e.step();
  ASSERT_TRUE(e.sched_.idle());
  auto pos = [&](SeqId id) { return std::find(e.finished_.begin(), e.finished_.end(), id) - e.finished_.begin(); };
  EXPECT_LT(pos(big), pos(small));
}

TEST(Scheduler, FairSharingBoundsTheServiceGapBetweenTenants) {
  SchedulerConfig sc;
  sc.policy = SchedulingPolicy::kFair;
  sc.max_seqs = 4;
  sc.max_batched_tokens = 64;
  sc.fair_w_in = 1;
  sc.fair_w_out = 2;
  FakeEngine e(sc, 1024);
  // Tenant "heavy" sends 10x the requests of "light"; both stay backlogged throughout.
  for (int i = 0; i < 100; ++i) e.add(16, 16, 0, "heavy", 1 + i);
  for (int i = 0; i < 10; ++i) e.add(16, 16, 0, "light", 5000 + i);
  // While both are backlogged, the virtual counters (service weighted as VTC charges it) stay
  // within a bound: one step of the largest admission plus one request's worth of decode tokens
  // per running slot (the VTC paper's bound is 2 * max(w_in * L_in, w_out * L_out) per tenant).
  const double bound = 2 * std::max(sc.fair_w_in * 16 * 4, sc.fair_w_out * 16 * 4) + sc.fair_w_in * 64;
  double max_gap = 0;
  for (int step = 0; step < 10000; ++step) {
    bool light_backlogged = false, heavy_backlogged = false;
    for (SeqId id = 1; id < e.next_id_; ++id) {
      if (!e.sched_.has(id)) continue;
      (e.sched_.seq(id).tenant == "light" ? light_backlogged : heavy_backlogged) = true;
    }
    if (!light_backlogged || !heavy_backlogged) break;
    max_gap = std::max(max_gap, std::abs(e.sched_.fairness().counter("heavy") - e.sched_.fairness().counter("light")));
    e.step();
  }
  EXPECT_LE(max_gap, bound);
  EXPECT_GT(e.served_["light"], 0);
}

TEST(Scheduler, ALightTenantsFirstTokenWaitsBoundedStepsUnderAHeavyLoad) {
  SchedulerConfig sc;
  sc.policy = SchedulingPolicy::kFair;
  sc.max_seqs = 4;
  sc.max_batched_tokens = 64;
  FakeEngine e(sc, 1024);
  for (int i = 0; i < 200; ++i) e.add(16, 16, 0, "heavy", 1 + i);
  for (int i = 0; i < 30; ++i) e.step();  // heavy is well into its backlog
  const SeqId light = e.add(16, 4, 0, "light", 9000);
  int steps = 0;
  while (e.generated_[light] == 0 && steps < 1000) {
    e.step();
    ++steps;
  }
  // With FCFS it would wait for ~190 heavy requests; with VTC it is admitted as soon as a slot
  // frees: within one request's lifetime (16 decodes + its prompt step).
  EXPECT_LE(steps, 20);

  SchedulerConfig fcfs = sc;
  fcfs.policy = SchedulingPolicy::kFcfs;
  FakeEngine f(fcfs, 1024);
  for (int i = 0; i < 200; ++i) f.add(16, 16, 0, "heavy", 1 + i);
  for (int i = 0; i < 30; ++i) f.step();
  const SeqId light_fcfs = f.add(16, 4, 0, "light", 9000);
  int fcfs_steps = 0;
  while (f.generated_[light_fcfs] == 0 && fcfs_steps < 5000) {
    f.step();
    ++fcfs_steps;
  }
  EXPECT_GT(fcfs_steps, 10 * steps) << "the test must show what fairness changes";
}

TEST(Scheduler, SwapPreemptionResumesWithoutRecomputation) {
  const std::string dir = ::testing::TempDir();
  SchedulerConfig sc;
  sc.preempt = PreemptMode::kSwap;
  sc.watermark = 0;
  KvConfig kc = kv_cfg(10);
  kc.spill_dir = dir;
  kc.spill_bytes = 1 << 20;
  FakeEngine e(sc, kc);
  Scheduler& sched = e.sched_;
  KvManager& kv = e.kv_;
  for (int i = 0; i < 3; ++i) {
    Sequence s;
    s.id = i + 1;
    s.request = s.id;
    s.arrival = Clock::time_point(std::chrono::milliseconds(i));
    for (int t = 0; t < 6; ++t) s.tokens.push_back(1 + 50 * i + t);
    s.n_prompt = 6;
    s.max_tokens = 20;
    sched.add(std::move(s));
  }
  int64_t recomputed = 0, swaps = 0;
  for (int step = 0; step < 1000 && !sched.idle(); ++step) {
    auto out = e.runner_.prepare().out;
    e.runner_.done(out);
    swaps += static_cast<int64_t>(out.resumed.size());
    for (const auto& s : out.seqs) {
      // A resumed sequence continues where it stopped: only its new token is computed.
      if (s.start == 0 && sched.seq(s.id).preemptions > 0) ++recomputed;
      if (!s.logits) continue;
      Sequence& q = sched.seq(s.id);
      sched.append_token(s.id, 9);
      if (q.n_generated() >= q.max_tokens) sched.finish(s.id);
    }
    kv.check_invariants();
  }
  EXPECT_TRUE(sched.idle());
  EXPECT_GT(swaps, 0);
  EXPECT_EQ(recomputed, 0);
  EXPECT_EQ(kv.stats().hot.used, 0);
  EXPECT_EQ(kv.stats().cold.used, 0);
}

// --- The plan as a value: the KV ops a step plans, checked without running a model. ---

const ScheduledSeq* find_seq(const SchedulerOutput& out, SeqId id) {
  for (const ScheduledSeq& sc : out.seqs) {
    if (sc.id == id) return &sc;
  }
  return nullptr;
}

std::vector<KvOp> ops_of(const SchedulerOutput& out, KvOp::Kind kind) {
  std::vector<KvOp> v;
  for (const KvOp& op : out.kv_ops) {
    if (op.kind == kind) v.push_back(op);
  }
  return v;
}

KvConfig cold_kv_cfg(int32_t blocks, const std::string& dir) {
  KvConfig c = kv_cfg(blocks);
  c.spill_dir = dir;
  c.spill_bytes = 1 << 20;
  return c;
}

TEST(SchedulerPlan, ForkedSequencesCopyTheSharedPartialBlockOnce) {
  FakeEngine e(SchedulerConfig{}, 64);
  const SeqId a = e.add(6, 10);  // blocks of 4 tokens: one full, one partial
  e.sched_.seq(a).n_fork_children = 1;
  SchedulerOutput out = e.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_TRUE(out.kv_ops.empty());
  const std::vector<BlockId> shared = out.seqs[0].block_table;
  ASSERT_EQ(shared.size(), 2u);
  const std::vector<SeqId> kids = e.sched_.fork_children(a);
  ASSERT_EQ(kids.size(), 1u);
  e.sched_.append_token(kids[0], 200);  // (the parent got its token in step())

  out = e.plan();
  ASSERT_EQ(out.seqs.size(), 2u);
  ASSERT_EQ(out.kv_ops.size(), 1u) << "one copy: the second writer holds the block alone by then";
  const KvOp& op = out.kv_ops[0];
  EXPECT_EQ(op.kind, KvOp::Kind::kCopy);
  EXPECT_EQ(op.src, (KvSlot{KvTier::kHot, shared[1]}));
  EXPECT_EQ(op.dst.tier, KvTier::kHot);
  EXPECT_NE(op.dst.slot, shared[1]);
  // The first in queue order (the parent) writes first and gets the copy; the child keeps the
  // original blocks.
  EXPECT_EQ(find_seq(out, a)->block_table, (std::vector<BlockId>{shared[0], op.dst.slot}));
  EXPECT_EQ(find_seq(out, kids[0])->block_table, shared);
}

TEST(SchedulerPlan, SwapOutPlansSpillsAndResumePlansFetches) {
  const std::string dir = ::testing::TempDir();
  SchedulerConfig sc;
  sc.preempt = PreemptMode::kSwap;
  sc.watermark = 0;
  FakeEngine e(sc, cold_kv_cfg(4, dir));
  const SeqId a = e.add(8, 3);
  const SeqId b = e.add(7, 3, 0, "", 100);
  SchedulerOutput out = e.step();
  ASSERT_EQ(out.seqs.size(), 2u);
  const std::vector<BlockId> b_blocks = find_seq(out, b)->block_table;
  ASSERT_EQ(b_blocks.size(), 2u);

  // a's next token needs a third block: b, the later arrival, is swapped out.
  out = e.step();
  EXPECT_EQ(out.preempted, std::vector<SeqId>{b});
  EXPECT_NE(find_seq(out, a), nullptr);
  const std::vector<KvOp> spills = ops_of(out, KvOp::Kind::kSpill);
  ASSERT_EQ(spills.size(), 2u);
  ASSERT_EQ(out.kv_ops.size(), 2u);
  std::vector<int32_t> cold_slots;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(spills[i].src, (KvSlot{KvTier::kHot, b_blocks[i]}));
    EXPECT_EQ(spills[i].dst.tier, KvTier::kCold);
    cold_slots.push_back(spills[i].dst.slot);
  }
  EXPECT_NE(cold_slots[0], cold_slots[1]);
  EXPECT_EQ(e.sched_.seq(b).status, SeqStatus::kSwapped);

  // When a finishes, b comes back: one fetch per cold slot, into the blocks of its new table.
  for (int guard = 0; guard < 20; ++guard) {
    out = e.step();
    if (!out.resumed.empty()) break;
  }
  ASSERT_EQ(out.resumed, std::vector<SeqId>{b});
  const std::vector<KvOp> fetches = ops_of(out, KvOp::Kind::kFetch);
  ASSERT_EQ(fetches.size(), 2u);
  const ScheduledSeq* sb = find_seq(out, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start, 7) << "resumed where it stopped";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(fetches[i].src, (KvSlot{KvTier::kCold, cold_slots[i]}));
    EXPECT_EQ(fetches[i].dst, (KvSlot{KvTier::kHot, sb->block_table[i]}));
  }
  for (int guard = 0; guard < 100 && !e.sched_.idle(); ++guard) e.step();
  EXPECT_TRUE(e.sched_.idle());
  EXPECT_EQ(e.kv_.stats().cold_read_failures, 0);
}

TEST(SchedulerPlan, APrefixHitInTheColdTierPlansFetches) {
  const std::string dir = ::testing::TempDir();
  SchedulerConfig sc;
  sc.watermark = 0;
  FakeEngine e(sc, cold_kv_cfg(6, dir));
  const SeqId a = e.add(9, 1);  // two full blocks, cached when it finishes
  SchedulerOutput out = e.step();
  const std::vector<BlockId> a_blocks = find_seq(out, a)->block_table;
  ASSERT_TRUE(e.sched_.idle());

  // b takes every block: a's cached blocks are evicted to the cold tier (tail first: a freed its
  // blocks tail first, so the tail is the least recently used).
  e.add(21, 1, 0, "", 500);
  out = e.step();
  const std::vector<KvOp> spills = ops_of(out, KvOp::Kind::kSpill);
  ASSERT_EQ(spills.size(), 2u);
  EXPECT_EQ(spills[0].src, (KvSlot{KvTier::kHot, a_blocks[1]}));
  EXPECT_EQ(spills[1].src, (KvSlot{KvTier::kHot, a_blocks[0]}));
  ASSERT_TRUE(e.sched_.idle());

  // c has a's prompt: its first two blocks come back from the cold tier, computed already.
  const SeqId c = e.add(9, 1);
  out = e.step();
  const ScheduledSeq* scc = find_seq(out, c);
  ASSERT_NE(scc, nullptr);
  EXPECT_EQ(scc->start, 8);
  EXPECT_EQ(scc->n_new, 1);
  const std::vector<KvOp> fetches = ops_of(out, KvOp::Kind::kFetch);
  ASSERT_EQ(fetches.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(fetches[i].src, (KvSlot{KvTier::kCold, spills[1 - i].dst.slot}));
    EXPECT_EQ(fetches[i].dst, (KvSlot{KvTier::kHot, scc->block_table[i]}));
  }
  EXPECT_EQ(e.kv_.stats().prefix_hit_tokens, 8);
  EXPECT_EQ(e.kv_.stats().cold_read_failures, 0);
}

}  // namespace
}  // namespace strata
