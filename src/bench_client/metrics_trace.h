// Server gauges sampled while a serving benchmark runs: KV usage (all RAM tiers and per tier),
// queue depths, the preemption counter and, on strata with --controller pid, the controller's
// knobs and pressures, read from /metrics every --kv-sample-ms. `bench serve` summarises the KV
// usage in its report and writes the whole series as CSV with --kv-trace.
//
// Names read (the first present wins; anything missing is an empty cell / nullopt):
//   kv_usage     strata_kv_usage_ratio, vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc (0..1)
//   kv_hot/warm/cold  strata_kv_tier_usage_ratio{tier=...}
//   running, waiting, swapped  strata_requests_{running,waiting,swapped}, vllm:num_requests_{running,waiting,swapped}
//   preemptions  strata_preemptions_total, vllm:num_preemptions_total
//   kv_demand    strata_controller_kv_demand_ratio (the memory loop's projected KV demand)
//   batch_reserve, max_batched_tokens, max_seqs  strata_controller_knob{knob=...}
//   memory_pressure, latency_pressure  strata_controller_output{loop="kv_demand"|"interactive_tpot"}
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/prometheus_text.h"

namespace strata::bench {

struct TracePoint {
  double t_s = 0;     // since the run's first arrival
  size_t server = 0;  // index into the base URLs
  std::optional<double> kv_usage, kv_hot, kv_warm, kv_cold;
  std::optional<double> running, waiting, swapped, preemptions;
  std::optional<double> kv_demand, batch_reserve, max_batched_tokens, max_seqs, memory_pressure, latency_pressure;
};

// The gauges of one /metrics scrape (t_s and server left 0).
TracePoint trace_point(const MetricSamples& m);

// "t_s,server,kv_usage,kv_hot,kv_warm,kv_cold,running,waiting,swapped,preemptions_total,
// kv_demand,batch_reserve,max_batched_tokens,max_seqs,memory_pressure,latency_pressure" and one row per point
// in the given order; missing values are empty cells.
std::string trace_csv(const std::vector<TracePoint>& points);

struct KvUsageSummary {
  size_t samples = 0;  // points with a KV usage; the rest is 0 when there are none
  double mean = 0, p50 = 0, p90 = 0, max = 0;
  double share_at_or_above_90 = 0;  // of the samples with usage >= 0.9
};

// Over every point with a KV usage (all servers pooled).
KvUsageSummary summarize_kv_usage(const std::vector<TracePoint>& points);

}  // namespace strata::bench
