// Weighted dominant resource fairness (--scheduling drf) on the fake model: tenants of different
// demand shapes (memory-heavy: long contexts held for many steps; compute-heavy: short prompts
// computed and gone) kept backlogged get equal dominant shares (KV blocks held, tokens per step)
// within 10%; weights scale them; a light tenant's first token waits a bounded number of steps
// while a heavy one floods; Jain's index reports the equality.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "sched/fake_engine.h"

namespace strata {
namespace {

using test::FakeEngine;

struct Shape {
  std::string tenant;
  int32_t prompt = 0;
  int32_t max_tokens = 0;
};

struct Measured {
  double kv = 0;       // mean share of the hot blocks held
  double compute = 0;  // mean share of the step's token budget
  double dominant() const { return std::max(kv, compute); }
};

// Keeps `backlog` waiting sequences of every shape in the system for `steps` steps and measures,
// after `warmup` steps, each tenant's mean KV and compute shares from the plans themselves.
std::map<std::string, Measured> run_saturated(SchedulerConfig sc, int32_t blocks, const std::vector<Shape>& shapes,
                                              int steps, int warmup, int backlog, double* jain = nullptr) {
  FakeEngine e(sc, blocks);
  std::map<std::string, Measured> m;
  std::map<SeqId, std::string> tenant_of;
  TokenId next_token = 1;
  double jain_sum = 0;
  for (int step = 0; step < steps; ++step) {
    for (const Shape& sh : shapes) {
      int waiting = 0;
      for (const auto& [id, t] : tenant_of) {
        if (t == sh.tenant && e.sched_.has(id) && e.sched_.seq(id).status == SeqStatus::kWaiting) ++waiting;
      }
      for (; waiting < backlog; ++waiting) {
        // Distinct prompts: no prefix sharing between requests.
        tenant_of[e.add(sh.prompt, sh.max_tokens, 0, sh.tenant, next_token)] = sh.tenant;
        next_token = (next_token + 97) % 900 + 1;
      }
    }
    const SchedulerOutput out = e.step();
    if (step < warmup) continue;
    for (const auto& sc_seq : out.seqs) {
      m[tenant_of.at(sc_seq.id)].compute += static_cast<double>(sc_seq.n_new) / sc.max_batched_tokens;
    }
    for (const auto& [id, t] : tenant_of) {
      if (e.sched_.has(id) && e.sched_.seq(id).status == SeqStatus::kRunning) {
        m[t].kv += static_cast<double>(e.kv_.block_table(id).size()) / blocks;
      }
    }
    jain_sum += e.sched_.fairness_index();
  }
  const int n = steps - warmup;
  for (auto& [t, x] : m) {
    x.kv /= n;
    x.compute /= n;
  }
  if (jain) *jain = jain_sum / n;
  return m;
}

SchedulerConfig drf_config() {
  SchedulerConfig sc;
  sc.policy = SchedulingPolicy::kDrf;
  sc.preempt = PreemptMode::kRecompute;
  sc.max_batched_tokens = 16;
  sc.max_seqs = 64;
  sc.watermark = 0.02;
  return sc;
}

const Shape kMemoryHeavy{"mem", 40, 40};  // 20 blocks held for ~40 steps, ~1 token a step
const Shape kComputeHeavy{"cpu", 16, 1};  // 16 tokens computed in a step, 5 blocks for 2 steps

TEST(Drf, TwoTenantsOfDifferentShapesGetEqualDominantShares) {
  double jain = 0;
  const auto m = run_saturated(drf_config(), 96, {kMemoryHeavy, kComputeHeavy}, 3000, 500, 4, &jain);
  const Measured& mem = m.at("mem");
  const Measured& cpu = m.at("cpu");
  // The shapes are what the test says they are: each tenant's dominant resource differs.
  EXPECT_GT(mem.kv, mem.compute);
  EXPECT_GT(cpu.compute, cpu.kv);
  EXPECT_NEAR(mem.dominant(), cpu.dominant(), 0.1 * std::max(mem.dominant(), cpu.dominant()))
      << "mem kv " << mem.kv << " compute " << mem.compute << "; cpu kv " << cpu.kv << " compute " << cpu.compute;
  EXPECT_GT(jain, 0.95);
  // Saturation: together the tenants use most of the dominant resources.
  EXPECT_GT(mem.kv + cpu.kv, 0.5);
  EXPECT_GT(mem.compute + cpu.compute, 0.5);
}

TEST(Drf, FcfsDoesNotEqualiseTheSameLoad) {
  // The same load in arrival order: the dominant shares drift apart, which is what the test above
  // rules out under drf (and so shows it can fail).
  SchedulerConfig sc = drf_config();
  sc.policy = SchedulingPolicy::kFcfs;
  const auto m = run_saturated(sc, 96, {kMemoryHeavy, kComputeHeavy}, 3000, 500, 4);
  const double a = m.at("mem").dominant(), b = m.at("cpu").dominant();
  EXPECT_GT(std::abs(a - b), 0.1 * std::max(a, b)) << "mem " << a << " cpu " << b;
}

TEST(Drf, ThreeTenantsOfDifferentShapesGetEqualDominantShares) {
  const Shape mixed{"mixed", 24, 8};
  double jain = 0;
  const auto m = run_saturated(drf_config(), 128, {kMemoryHeavy, kComputeHeavy, mixed}, 4000, 600, 4, &jain);
  double lo = 1, hi = 0;
  for (const auto& [t, x] : m) {
    lo = std::min(lo, x.dominant());
    hi = std::max(hi, x.dominant());
  }
  EXPECT_LE(hi - lo, 0.1 * hi) << "mem " << m.at("mem").dominant() << " cpu " << m.at("cpu").dominant() << " mixed "
                               << m.at("mixed").dominant();
  EXPECT_GT(jain, 0.95);
}

TEST(Drf, WeightsScaleTheDominantShares) {
  SchedulerConfig sc = drf_config();
  sc.tenant_weights = {{"mem", 2.0}, {"cpu", 1.0}};
  const auto m = run_saturated(sc, 96, {kMemoryHeavy, kComputeHeavy}, 3000, 500, 4);
  const double ratio = m.at("mem").dominant() / m.at("cpu").dominant();
  EXPECT_NEAR(ratio, 2.0, 0.2) << "mem " << m.at("mem").dominant() << " cpu " << m.at("cpu").dominant();
}

// Steps from a light tenant's arrival to its first token while a heavy tenant floods the queue.
int light_first_token_steps(SchedulingPolicy policy) {
  SchedulerConfig sc = drf_config();
  sc.policy = policy;
  FakeEngine e(sc, 64);
  for (int i = 0; i < 60; ++i) e.add(24, 16, 0, "heavy", 10 * i + 1);
  int worst = 0;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 20; ++i) e.step();
    const SeqId light = e.add(8, 4, 0, "light", 700 + round);
    int steps = 0;
    while (e.generated_[light] == 0 && steps < 5000) {
      e.step();
      ++steps;
    }
    worst = std::max(worst, steps);
  }
  return worst;
}

TEST(Drf, ALightTenantsFirstTokenWaitsBoundedStepsWhileAHeavyOneFloods) {
  const int drf = light_first_token_steps(SchedulingPolicy::kDrf);
  const int fcfs = light_first_token_steps(SchedulingPolicy::kFcfs);
  // Admitted ahead of the heavy queue as soon as a running heavy sequence's blocks come free: at
  // most the life of one heavy request (2 prompt steps + 16 decode steps), plus its own prompt step.
  EXPECT_LE(drf, 20);
  EXPECT_GT(fcfs, 4 * drf) << "the flood must delay the light tenant without drf";
}

TEST(Drf, JainsIndexIsOneForEqualSharesAndOneOverNForOneTenant) {
  DrfAccount a({}, 1);
  a.end_step({{"x", 8}, {"y", 8}}, 16, {}, 10);
  EXPECT_DOUBLE_EQ(a.jain_index({"x", "y"}), 1.0);
  a.end_step({{"x", 16}}, 16, {}, 10);
  EXPECT_DOUBLE_EQ(a.jain_index({"x", "y"}), 0.5);
  a.end_step({{"x", 4}}, 16, {{"y", 5}}, 10);  // x: compute 0.25; y: kv 0.5
  EXPECT_DOUBLE_EQ(a.dominant_share("x"), 0.25);
  EXPECT_DOUBLE_EQ(a.dominant_share("y"), 0.5);
  EXPECT_DOUBLE_EQ(a.jain_index({"x", "y"}), 0.75 * 0.75 / (2 * (0.25 * 0.25 + 0.5 * 0.5)));
}

}  // namespace
}  // namespace strata
