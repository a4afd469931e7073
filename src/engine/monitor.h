// The monitor: live signals of the engine for /metrics, the status page and the controller
// (sched/controller.h). The engine samples it after every step and every 100 ms of wall time when
// idle; rates and percentiles are over a sliding window of wall time (MonitorConfig::window_s).
//   KV usage per tier (used slots / slots), internal fragmentation (empty token slots in partly
//   filled last blocks / token slots of the used hot blocks), the prefix-cache hit rate (hit /
//   queried prompt tokens in the window), preemptions and swap bytes (cold tier in + out) per
//   second, the transfer bandwidth used (bytes per second each way between the RAM tiers and the
//   cold tier, the remote pool, and on a GPU between device and host), the step time split into
//   compute (the forward pass), KV (schedule + KV ops) and wait (between steps), queue depths per
//   QoS class, TTFT / TPOT percentiles per QoS class, and the sequences and dominant share of each
//   tenant named in the configuration (API keys, --tenant-weight; not the free-form `user`).
// Thread-safety: engine thread only; MonitorSnapshot is a plain value copied into EngineStats.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/ids.h"
#include "kv/kv_stats.h"
#include "sched/scheduler.h"

namespace strata {

struct QosLatency {
  int64_t ttft_samples = 0;  // first tokens in the window
  double ttft_p50_s = 0, ttft_p99_s = 0;
  int64_t tpot_samples = 0;  // finished requests with >= 2 tokens in the window
  double tpot_p50_s = 0, tpot_p90_s = 0, tpot_p99_s = 0;
};

struct TenantLoad {
  std::string name;
  SchedulerCounts sequences;
  double dominant_share = 0;  // sched/drf.h
};

// Bytes moved since start that the KV manager does not count (it counts the cold tier's:
// KvStats::spill_bytes_in/out).
struct TransferTotals {
  uint64_t remote_read = 0, remote_written = 0;  // RemoteKvStats (value bytes)
  uint64_t to_host = 0, to_device = 0;           // KvStorage::transfers() on a device backend
};

struct MonitorSnapshot {
  double kv_usage = 0;       // KvStats::usage_ratio (held bytes of the RAM tiers)
  double kv_usage_hot = 0, kv_usage_warm = 0, kv_usage_cold = 0;  // used / slots per tier
  double kv_fragmentation = 0;
  double prefix_hit_rate = 0;    // in the window; 0 when nothing was looked up
  double preemptions_per_s = 0;
  double swap_bytes_per_s = 0;   // cold tier, both directions
  // Transfer bandwidth in the window (bytes per second).
  double cold_write_bytes_per_s = 0, cold_read_bytes_per_s = 0;      // RAM tiers -> cold, cold -> RAM
  double remote_write_bytes_per_s = 0, remote_read_bytes_per_s = 0;  // to / from the remote pool
  double to_host_bytes_per_s = 0, to_device_bytes_per_s = 0;         // device -> host, host -> device
  double step_compute_s = 0;     // mean per step in the window
  double step_kv_s = 0;          // scheduling and KV ops before the forward pass
  double step_wait_s = 0;        // between a step's end and the next one's start
  double steps_per_s = 0;
  std::array<SchedulerCounts, kNumQosClasses> queues{};
  std::array<QosLatency, kNumQosClasses> latency{};
  double fairness_index = 1;     // Jain's index over tenants' dominant shares (sched/drf.h)
  std::vector<TenantLoad> tenants;  // MonitorConfig::tenants, in that order
};

struct MonitorConfig {
  double window_s = 30;
  // Tenants reported one by one (operator-configured names, so that a client's `user` field
  // cannot grow the metrics without bound).
  std::vector<std::string> tenants;
};

class Monitor {
 public:
  explicit Monitor(MonitorConfig cfg = {});

  // One step ran: its phases' durations (seconds).
  void on_step(Clock::time_point now, double kv_s, double compute_s, double wait_s);
  void on_first_token(QosClass c, Clock::time_point now, double ttft_s);
  void on_finish(QosClass c, Clock::time_point now, double tpot_s);

  // Takes a sample of the gauges and counters and recomputes the snapshot.
  void sample(Clock::time_point now, const KvStats& kv, const TransferTotals& transfers, int64_t preemptions,
              const Scheduler& sched);

  const MonitorSnapshot& snapshot() const { return snap_; }

 private:
  struct Counters {
    Clock::time_point t;
    int64_t preemptions = 0;
    uint64_t cold_written = 0, cold_read = 0;
    TransferTotals transfers;
    int64_t prefix_queried = 0, prefix_hit = 0;
  };
  struct StepSample {
    Clock::time_point t;
    int64_t kv_ns, compute_ns, wait_ns;
  };
  struct Timed {
    Clock::time_point t;
    double v;
  };
  void prune(Clock::time_point now);

  MonitorConfig cfg_;
  std::deque<Counters> counters_;
  std::deque<StepSample> steps_;
  // The sums of steps_' phases, kept as steps enter and leave so that a sample costs the same
  // however many steps the window holds (integers: adding and removing leaves no rounding drift).
  int64_t steps_kv_ns_ = 0, steps_compute_ns_ = 0, steps_wait_ns_ = 0;
  std::array<std::deque<Timed>, kNumQosClasses> ttft_, tpot_;
  MonitorSnapshot snap_;
};

// The q-quantile (0..1) of `v` by nearest rank; 0 for an empty one. Sorts v.
double quantile(std::vector<double>& v, double q);

}  // namespace strata
