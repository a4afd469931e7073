// The memory controller (sched/controller.h): its PID loop on its own (bounds, slew, anti-windup)
// and the whole controller on a simulated plant, the fake model of the scheduler tests with steps
// as the clock: a step change in load settles near the projected-KV-demand target within a stated
// number of steps without oscillating, saturation and anti-windup behave, the knobs stay within
// bounds, and against static admission it preempts less (batch load: never) at a stated cost in
// throughput, with interactive arrivals admitted at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <chrono>
#include <numeric>
#include <vector>

#include "sched/controller.h"
#include "sched/fake_engine.h"

namespace strata {
namespace {

using test::FakeEngine;

TEST(PidLoop, OutputStaysWithinBoundsAndSlew) {
  PidLoop pid({2.0, 0.5, 0.1, 0.0, 1.0, 0.05});
  double prev = pid.output();
  for (int i = 0; i < 200; ++i) {
    const double e = std::sin(i * 0.3) * 3;  // swings far beyond what the bounds allow
    const double out = pid.update(e, 1);
    EXPECT_GE(out, 0.0);
    EXPECT_LE(out, 1.0);
    EXPECT_LE(std::abs(out - prev), 0.05 + 1e-12);
    prev = out;
  }
}

TEST(PidLoop, AntiWindupLeavesSaturationAsSoonAsTheErrorTurns) {
  PidLoop::Config c{0.5, 0.2, 0.0, 0.0, 1.0, 1.0};
  PidLoop with(c);
  // A long positive error holds the output at its top bound.
  for (int i = 0; i < 500; ++i) with.update(1.0, 1);
  EXPECT_DOUBLE_EQ(with.output(), 1.0);
  // The integral stopped growing once the output was held (ki * I alone is near the bound).
  EXPECT_LE(c.ki * with.integral(), 1.0 + c.ki);
  // The error turns: the output leaves the bound at the first update, not after hundreds.
  with.update(-0.5, 1);
  EXPECT_LT(with.output(), 1.0);
  int steps_to_half = 0;
  while (with.output() > 0.5 && steps_to_half < 1000) {
    with.update(-0.5, 1);
    ++steps_to_half;
  }
  EXPECT_LE(steps_to_half, 10);
}

TEST(PidLoop, ANegativeErrorAtTheBottomBoundDoesNotWindUpEither) {
  PidLoop pid({0.5, 0.2, 0.0, 0.0, 1.0, 1.0});
  for (int i = 0; i < 500; ++i) pid.update(-1.0, 1);
  EXPECT_DOUBLE_EQ(pid.output(), 0.0);
  pid.update(0.5, 1);
  EXPECT_GT(pid.output(), 0.0);
}

ControllerKnobs base_knobs(const SchedulerConfig& sc, int32_t hot_tokens) {
  return {0.0, sc.max_batched_tokens, sc.max_seqs, hot_tokens};
}

TEST(MemoryController, KnobsStayBetweenTheirBaseAndBoundUnderAnySignal) {
  ControllerConfig cfg;
  cfg.enabled = true;
  const ControllerKnobs base{0.0, 512, 64, 256};
  MemoryController mc(cfg, base);
  const ControllerKnobs b = mc.bounds();
  EXPECT_DOUBLE_EQ(b.batch_reserve, 0.3);
  EXPECT_EQ(b.max_batched_tokens, 128);
  EXPECT_EQ(b.max_seqs, 16);
  EXPECT_EQ(b.hot_tokens, 64);
  for (int i = 0; i < 400; ++i) {
    ControllerSignals s;
    s.kv_demand = (i / 50) % 2 ? 1.2 : 0.0;
    s.has_tpot = i % 3 != 0;
    s.interactive_tpot_s = (i / 70) % 2 ? 5.0 : 0.001;
    const ControllerKnobs k = mc.update(s, 0.1);
    EXPECT_GE(k.batch_reserve, base.batch_reserve);
    EXPECT_LE(k.batch_reserve, b.batch_reserve);
    EXPECT_LE(k.max_batched_tokens, base.max_batched_tokens);
    EXPECT_GE(k.max_batched_tokens, b.max_batched_tokens);
    EXPECT_LE(k.max_seqs, base.max_seqs);
    EXPECT_GE(k.max_seqs, b.max_seqs);
    EXPECT_LE(k.hot_tokens, base.hot_tokens);
    EXPECT_GE(k.hot_tokens, b.hot_tokens);
  }
  // Full pressure on both loops for long enough reaches the bounds; none at all returns to the base.
  for (int i = 0; i < 200; ++i) mc.update({1.2, true, 10.0}, 0.1);
  EXPECT_EQ(mc.knobs(), b);
  for (int i = 0; i < 200; ++i) mc.update({0.0, false, 0.0}, 0.1);
  EXPECT_EQ(mc.knobs(), base);
}

// The simulated plant: the fake engine under a load of `rate` new requests per step (prompts of
// 16..48 tokens, 16..48 tokens each; a share `interactive` of them in the interactive class, the
// rest batch), the controller updated every step (dt = 1 step) when `controlled`: its gate on batch
// admissions (Scheduler::set_batch_admission) and its knobs applied as the engine applies them.
struct PlantRun {
  std::vector<double> demand;    // projected KV demand / hot blocks after each step
  std::vector<double> usage;     // KV usage after each step
  std::vector<double> pressure;  // the memory loop's output after each step
  int64_t preemptions = 0;
  int64_t generated = 0;
  std::vector<int> interactive_ttft;  // steps from arrival to the first token
  bool knobs_in_bounds = true;
};

// The projected demand the controller holds (uncontrolled, the heavy load plans far past the pool).
constexpr double kTarget = 0.9;
constexpr int32_t kHorizon = 1000;  // past every request's length: the projection is exact

ControllerConfig plant_controller() {
  ControllerConfig cfg;
  cfg.enabled = true;
  cfg.kv_target = kTarget;
  cfg.horizon_tokens = kHorizon;
  // Per step. Much higher gains (kp 8, ki 0.5) oscillate and much lower ones (kp 0.02,
  // ki 0.0002) do not settle in time: both fail the settling test.
  cfg.memory = {0.3, 0.03, 0.0, 0.0, 1.0, 0.05};
  cfg.reserve_max = 0.5;
  return cfg;
}

PlantRun run_plant(bool controlled, const std::vector<std::pair<int, double>>& phases, double interactive = 0,
                   const ControllerConfig& ccfg = plant_controller()) {
  SchedulerConfig sc;
  sc.preempt = PreemptMode::kRecompute;
  sc.max_batched_tokens = 64;
  sc.max_seqs = 64;
  sc.watermark = 0.01;
  FakeEngine e(sc, 256);
  int step = 0;
  e.decorate = [&](Sequence& s) {
    s.qos = s.tenant == "i" ? QosClass::kInteractive : QosClass::kBatch;
    s.arrival = Clock::time_point(std::chrono::milliseconds(step));
  };
  MemoryController mc(ccfg, base_knobs(sc, e.kv_.hot_tokens()));
  if (controlled) e.sched_.set_batch_admission(ccfg.horizon_tokens, 0);
  const ControllerKnobs bounds = mc.bounds();
  PlantRun r;
  double arrivals = 0;
  TokenId next = 1;
  uint64_t lcg = 42;
  std::map<SeqId, int> arrived;  // interactive sequences waiting for their first token
  for (const auto& [steps, rate] : phases) {
    for (int i = 0; i < steps; ++i, ++step) {
      for (arrivals += rate; arrivals >= 1; arrivals -= 1) {
        // Mixed lengths (a fixed pseudo-random sequence): one length for all would admit and
        // finish requests in cohorts, a plant that oscillates on its own.
        lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
        const int32_t prompt = 16 + static_cast<int32_t>((lcg >> 33) % 33);
        const int32_t gen = 16 + static_cast<int32_t>((lcg >> 45) % 33);
        const bool is_interactive = static_cast<double>((lcg >> 20) % 1000) < 1000 * interactive;
        const SeqId id = e.add(prompt, gen, 0, is_interactive ? "i" : "", next);
        if (is_interactive) arrived[id] = step;
        next = (next + 97) % 900 + 1;
      }
      e.step();
      for (auto it = arrived.begin(); it != arrived.end();) {
        if (e.generated_[it->first] > 0) {
          r.interactive_ttft.push_back(step + 1 - it->second);
          it = arrived.erase(it);
        } else {
          ++it;
        }
      }
      const double demand = static_cast<double>(e.sched_.projected_demand_blocks(kHorizon)) / e.kv_.num_hot_blocks();
      r.demand.push_back(demand);
      r.usage.push_back(e.kv_.stats().usage_ratio());
      if (controlled) {
        const ControllerKnobs k = mc.update({demand, false, 0.0}, 1);
        e.sched_.set_batch_admission(ccfg.horizon_tokens, k.batch_reserve);
        e.sched_.set_max_batched_tokens(k.max_batched_tokens);
        e.sched_.set_max_seqs(k.max_seqs);
        e.kv_.set_hot_tokens(k.hot_tokens);
        r.knobs_in_bounds = r.knobs_in_bounds && k.batch_reserve >= 0 && k.batch_reserve <= bounds.batch_reserve &&
                            k.max_batched_tokens >= bounds.max_batched_tokens && k.max_batched_tokens <= sc.max_batched_tokens &&
                            k.max_seqs >= bounds.max_seqs && k.max_seqs <= sc.max_seqs;
      }
      r.pressure.push_back(mc.state().memory_pressure);
    }
  }
  r.preemptions = e.sched_.total_preemptions();
  for (const auto& [id, n] : e.generated_) r.generated += n;
  return r;
}

// Mean of v over [from, to).
double mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(to), 0.0) /
         static_cast<double>(to - from);
}

constexpr int kLight = 300, kHeavy = 1200;
constexpr double kLightRate = 0.1, kHeavyRate = 1.0;  // the heavy rate is past the plant's capacity
constexpr size_t kSettleSteps = 300;                  // stated settling time after the step change
constexpr size_t kWindow = 50;                        // signals are averaged over windows of this many steps

// Whether the projected demand of `r` settles: every window after the settling time averages
// within 0.04 of the target, and the memory loop's output, averaged the same way, moves by less
// than a tenth of its range between windows (no oscillation).
::testing::AssertionResult settles(const PlantRun& r) {
  const size_t end = r.demand.size();
  for (size_t w = kLight + kSettleSteps; w + kWindow <= end; w += kWindow) {
    const double m = mean(r.demand, w, w + kWindow);
    if (std::abs(m - kTarget) > 0.04) return ::testing::AssertionFailure() << "window at " << w << ": demand " << m;
  }
  for (size_t w = kLight + kSettleSteps; w + 2 * kWindow <= end; w += kWindow) {
    const double d = std::abs(mean(r.pressure, w + kWindow, w + 2 * kWindow) - mean(r.pressure, w, w + kWindow));
    if (d >= 0.1) return ::testing::AssertionFailure() << "window at " << w << ": output moved " << d;
  }
  return ::testing::AssertionSuccess();
}

TEST(MemoryController, AStepChangeInLoadSettlesNearTheTargetWithoutOscillating) {
  const PlantRun open = run_plant(false, {{kLight, kLightRate}, {kHeavy, kHeavyRate}});
  const PlantRun closed = run_plant(true, {{kLight, kLightRate}, {kHeavy, kHeavyRate}});
  const size_t end = closed.usage.size();
  // Uncontrolled, the heavy load fills the pool, plans past the target (preemptions keep it near
  // the pool: measured 0.98) and preempts.
  EXPECT_GT(mean(open.demand, kLight + kSettleSteps, end), kTarget + 0.05);
  EXPECT_GT(mean(open.usage, kLight + kSettleSteps, end), 0.9);
  EXPECT_GT(open.preemptions, 0);
  EXPECT_TRUE(settles(closed));
  EXPECT_TRUE(closed.knobs_in_bounds);
  // Batch work admitted by its projected demand never grows into a full pool.
  EXPECT_EQ(closed.preemptions, 0);
  // The price: fewer sequences at once in this memory-bound plant (no preemption wastes work here
  // but token budget). Stated bound: at most 10% fewer tokens (measured 6.5%).
  EXPECT_GE(static_cast<double>(closed.generated), 0.9 * static_cast<double>(open.generated));
}

TEST(MemoryController, GainsFarFromTheDefaultsFailToSettle) {
  // The settling test can fail: gains much higher oscillate, much lower are too slow.
  for (PidLoop::Config g : {PidLoop::Config{8.0, 0.5, 0.0, 0.0, 1.0, 0.05}, PidLoop::Config{0.02, 0.0002, 0.0, 0.0, 1.0, 0.05}}) {
    ControllerConfig cfg = plant_controller();
    cfg.memory = g;
    EXPECT_FALSE(settles(run_plant(true, {{kLight, kLightRate}, {kHeavy, kHeavyRate}}, 0, cfg))) << g.kp;
  }
}

TEST(MemoryController, InteractiveArrivalsTakeTheReserveInsteadOfPreempting) {
  // 30% of the load is interactive: it ignores the gate and the reserve and preempts batch work
  // when it does not fit. Under control the reserve is mostly there for it (measured 45
  // preemptions against 363).
  const PlantRun open = run_plant(false, {{kLight, kLightRate}, {kHeavy, kHeavyRate}}, 0.3);
  const PlantRun closed = run_plant(true, {{kLight, kLightRate}, {kHeavy, kHeavyRate}}, 0.3);
  ASSERT_GT(open.interactive_ttft.size(), 200u);
  EXPECT_LT(closed.preemptions * 4, open.preemptions);
  EXPECT_TRUE(closed.knobs_in_bounds);
  // Interactive requests are admitted first either way; under control their p99 TTFT is no worse
  // (measured 2 steps against 3) and within 2 steps.
  auto p99 = [](const PlantRun& r) {
    std::vector<int> t = r.interactive_ttft;
    std::sort(t.begin(), t.end());
    return t[t.size() * 99 / 100];
  };
  EXPECT_LE(p99(closed), p99(open));
  EXPECT_LE(p99(closed), 2);
}

}  // namespace
}  // namespace strata
