// The engine monitor (engine/monitor.h) on a deterministic clock: rates and the prefix-hit rate
// over the sliding window (the oldest sample inside it is the base, samples older than it leave),
// per-tier usage and fragmentation from KvStats, mean step phases and steps per second, TTFT/TPOT
// percentiles per QoS class that expire with the window, the transfer bandwidth per link and
// direction, the configured tenants' sequences and shares, and the nearest-rank quantile.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "engine/monitor.h"
#include "sched/fake_engine.h"

namespace strata {
namespace {

Clock::time_point at(double s) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
}

// A scheduler with nothing queued, for the queue gauges.
struct Idle {
  KvConfig kc = test::kv_cfg(8);
  KvStorage storage{test::kFakeGeometry, kc};
  KvManager kv{test::kFakeGeometry, kc, storage.capacity(), 7};
  Scheduler sched{SchedulerConfig{}, kv};
};

KvStats counters(int64_t queried, int64_t hit, uint64_t bytes_in, uint64_t bytes_out) {
  KvStats k;
  k.prefix_queried_tokens = queried;
  k.prefix_hit_tokens = hit;
  k.spill_bytes_in = bytes_in;
  k.spill_bytes_out = bytes_out;
  return k;
}

TEST(Monitor, RatesAndHitRateAreOverTheWindow) {
  Idle idle;
  Monitor m(MonitorConfig{30, {}});
  m.sample(at(0), counters(0, 0, 0, 0), {}, 0, idle.sched);
  EXPECT_EQ(m.snapshot().preemptions_per_s, 0);
  EXPECT_EQ(m.snapshot().prefix_hit_rate, 0);  // nothing looked up yet
  m.sample(at(10), counters(100, 25, 600, 400), {}, 20, idle.sched);
  EXPECT_DOUBLE_EQ(m.snapshot().preemptions_per_s, 2.0);   // 20 in 10 s
  EXPECT_DOUBLE_EQ(m.snapshot().swap_bytes_per_s, 100.0);  // 1000 bytes, both directions
  EXPECT_DOUBLE_EQ(m.snapshot().prefix_hit_rate, 0.25);
  // 40 s later nothing moved: the sample at 0 s left the window, the base is the one at 10 s.
  m.sample(at(50), counters(100, 25, 600, 400), {}, 20, idle.sched);
  EXPECT_EQ(m.snapshot().preemptions_per_s, 0);
  EXPECT_EQ(m.snapshot().swap_bytes_per_s, 0);
  EXPECT_EQ(m.snapshot().prefix_hit_rate, 0);
  // New activity counts from that base: 30 preemptions over 50 .. 60 and the 40 s before.
  m.sample(at(60), counters(300, 200, 600, 400), {}, 50, idle.sched);
  EXPECT_DOUBLE_EQ(m.snapshot().preemptions_per_s, 30.0 / 50.0);
  EXPECT_DOUBLE_EQ(m.snapshot().prefix_hit_rate, 175.0 / 200.0);
}

TEST(Monitor, TierUsageAndFragmentationComeFromTheKvStats) {
  Idle idle;
  Monitor m;
  KvStats k;
  k.block_size = 16;
  k.hot = {10, 4, 1, 5, 1000, 500};
  k.warm = {8, 2, 0, 6, 800, 200};
  k.cold = {0, 0, 0, 0, 0, 0};
  k.fragmented_slots = 16;  // e.g. 4 last blocks with 4 empty slots each
  m.sample(at(1), k, {}, 0, idle.sched);
  const MonitorSnapshot& s = m.snapshot();
  EXPECT_DOUBLE_EQ(s.kv_usage_hot, 0.4);
  EXPECT_DOUBLE_EQ(s.kv_usage_warm, 0.25);
  EXPECT_EQ(s.kv_usage_cold, 0);  // no cold tier: 0, not a division by zero
  EXPECT_DOUBLE_EQ(s.kv_fragmentation, 16.0 / (4 * 16));
  EXPECT_DOUBLE_EQ(s.kv_usage, k.usage_ratio());
  EXPECT_EQ(s.queues[0].waiting + s.queues[0].running + s.queues[1].waiting + s.queues[1].running, 0);
}

TEST(Monitor, StepPhasesAreMeansAndStepsPerSecondCountTheWindow) {
  Idle idle;
  Monitor m(MonitorConfig{10, {}});
  m.on_step(at(0), 0.1, 0.5, 0.0);
  m.on_step(at(1), 0.3, 0.7, 0.2);
  m.on_step(at(2), 0.2, 0.6, 0.4);
  m.sample(at(3), KvStats{}, {}, 0, idle.sched);
  EXPECT_NEAR(m.snapshot().step_kv_s, 0.2, 1e-12);
  EXPECT_NEAR(m.snapshot().step_compute_s, 0.6, 1e-12);
  EXPECT_NEAR(m.snapshot().step_wait_s, 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(m.snapshot().steps_per_s, 1.0);  // 3 steps since the first, 3 s ago
  // Past the window the steps are gone.
  m.sample(at(20), KvStats{}, {}, 0, idle.sched);
  EXPECT_EQ(m.snapshot().steps_per_s, 0);
  EXPECT_EQ(m.snapshot().step_compute_s, 0);
}

TEST(Monitor, LatencyPercentilesArePerClassAndExpire) {
  Idle idle;
  Monitor m(MonitorConfig{30, {}});
  for (int i = 1; i <= 100; ++i) m.on_first_token(QosClass::kInteractive, at(1), i * 0.001);
  for (int i = 1; i <= 10; ++i) m.on_finish(QosClass::kBatch, at(2), i * 0.01);
  m.sample(at(5), KvStats{}, {}, 0, idle.sched);
  const QosLatency& in = m.snapshot().latency[static_cast<size_t>(QosClass::kInteractive)];
  const QosLatency& ba = m.snapshot().latency[static_cast<size_t>(QosClass::kBatch)];
  EXPECT_EQ(in.ttft_samples, 100);
  EXPECT_NEAR(in.ttft_p50_s, 0.050, 1e-12);
  EXPECT_NEAR(in.ttft_p99_s, 0.099, 1e-12);
  EXPECT_EQ(in.tpot_samples, 0);
  EXPECT_EQ(ba.ttft_samples, 0);
  EXPECT_EQ(ba.tpot_samples, 10);
  EXPECT_NEAR(ba.tpot_p50_s, 0.05, 1e-12);
  EXPECT_NEAR(ba.tpot_p90_s, 0.09, 1e-12);
  EXPECT_NEAR(ba.tpot_p99_s, 0.10, 1e-12);
  m.sample(at(40), KvStats{}, {}, 0, idle.sched);  // both older than 30 s now
  EXPECT_EQ(m.snapshot().latency[0].ttft_samples, 0);
  EXPECT_EQ(m.snapshot().latency[0].ttft_p99_s, 0);
  EXPECT_EQ(m.snapshot().latency[1].tpot_samples, 0);
}

TEST(Monitor, QuantileIsTheNearestRank) {
  std::vector<double> v;
  EXPECT_EQ(quantile(v, 0.5), 0);
  v = {3, 1, 2};
  EXPECT_EQ(quantile(v, 0.5), 2);
  EXPECT_EQ(quantile(v, 0.0), 1);
  EXPECT_EQ(quantile(v, 1.0), 3);
  v = {5, 4, 3, 2, 1, 10, 9, 8, 7, 6};
  EXPECT_EQ(quantile(v, 0.9), 9);
  EXPECT_EQ(quantile(v, 0.91), 10);
}

TEST(Monitor, TransferBandwidthPerLinkAndDirectionOverTheWindow) {
  Idle idle;
  Monitor m(MonitorConfig{30, {}});
  TransferTotals t;
  m.sample(at(0), counters(0, 0, 0, 0), t, 0, idle.sched);
  EXPECT_EQ(m.snapshot().cold_write_bytes_per_s, 0);
  EXPECT_EQ(m.snapshot().to_device_bytes_per_s, 0);
  // In 4 s: 4000 bytes spilled and 1000 fetched; 800 published to the remote pool and 2000 read
  // from it; 12000 bytes copied down from the device and 6000 up.
  t.remote_written = 800;
  t.remote_read = 2000;
  t.to_host = 12000;
  t.to_device = 6000;
  m.sample(at(4), counters(0, 0, 1000, 4000), t, 0, idle.sched);
  const MonitorSnapshot& s = m.snapshot();
  EXPECT_DOUBLE_EQ(s.cold_write_bytes_per_s, 1000.0);
  EXPECT_DOUBLE_EQ(s.cold_read_bytes_per_s, 250.0);
  EXPECT_DOUBLE_EQ(s.swap_bytes_per_s, 1250.0);
  EXPECT_DOUBLE_EQ(s.remote_write_bytes_per_s, 200.0);
  EXPECT_DOUBLE_EQ(s.remote_read_bytes_per_s, 500.0);
  EXPECT_DOUBLE_EQ(s.to_host_bytes_per_s, 3000.0);
  EXPECT_DOUBLE_EQ(s.to_device_bytes_per_s, 1500.0);
  // Only device traffic after that, 60 s later: the samples at 0 and 4 s left the window and the
  // base is the last one before it (4 s); the other links fall to 0.
  t.to_device += 5600;
  m.sample(at(60), counters(0, 0, 1000, 4000), t, 0, idle.sched);
  EXPECT_EQ(m.snapshot().cold_write_bytes_per_s, 0);
  EXPECT_EQ(m.snapshot().remote_read_bytes_per_s, 0);
  EXPECT_EQ(m.snapshot().to_host_bytes_per_s, 0);
  EXPECT_DOUBLE_EQ(m.snapshot().to_device_bytes_per_s, 100.0);  // 5600 bytes over 56 s
  // A counter that restarts lower (a new remote pool connection) reads as no traffic, not as a
  // negative or wrapped rate.
  t.remote_read = 0;
  m.sample(at(61), counters(0, 0, 1000, 4000), t, 0, idle.sched);
  EXPECT_EQ(m.snapshot().remote_read_bytes_per_s, 0);
}

TEST(Monitor, ReportsTheConfiguredTenantsOnly) {
  SchedulerConfig sc;
  test::FakeEngine e(sc, 64);
  e.add(8, 4, 0, "alice");
  e.add(8, 4, 0, "alice", 100);
  e.add(8, 4, 0, "bob", 200);
  e.add(8, 4, 0, "mallory-set-this-user-field", 300);
  e.step();
  e.add(8, 4, 0, "alice", 400);  // waiting
  MonitorConfig cfg;
  cfg.tenants = {"bob", "alice", "carol"};
  Monitor m(cfg);
  m.sample(at(1), e.kv_.stats(), {}, 0, e.sched_);
  const std::vector<TenantLoad>& t = m.snapshot().tenants;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "bob");
  EXPECT_EQ(t[0].sequences.running, 1);
  EXPECT_EQ(t[1].name, "alice");
  EXPECT_EQ(t[1].sequences.running, 2);
  EXPECT_EQ(t[1].sequences.waiting, 1);
  EXPECT_EQ(t[2].name, "carol");
  EXPECT_EQ(t[2].sequences.running + t[2].sequences.waiting, 0);
  EXPECT_EQ(t[2].dominant_share, 0);
  // Alice holds twice Bob's blocks and tokens: her dominant share is larger.
  EXPECT_GT(t[1].dominant_share, t[0].dominant_share);
  EXPECT_GT(t[0].dominant_share, 0);
}

}  // namespace
}  // namespace strata
