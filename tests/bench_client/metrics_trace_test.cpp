// The gauges bench serve samples from /metrics during a run (strata's names and vLLM's), their CSV
// form, and the KV usage summary.
#include "bench_client/metrics_trace.h"

#include <gtest/gtest.h>

namespace strata::bench {
namespace {

TEST(MetricsTrace, ReadsStrataGaugesAndTheControllersKnobs) {
  const TracePoint p = trace_point(parse_prometheus_text(
      "strata_kv_usage_ratio 0.75\n"
      "strata_kv_tier_usage_ratio{tier=\"hot\"} 0.8\nstrata_kv_tier_usage_ratio{tier=\"warm\"} 0.25\n"
      "strata_kv_tier_usage_ratio{tier=\"cold\"} 0\n"
      "strata_requests_running 5\nstrata_requests_waiting 7\nstrata_requests_swapped 1\nstrata_preemptions_total 12\n"
      "strata_controller_kv_demand_ratio 0.875\n"
      "strata_controller_knob{knob=\"batch_reserve\"} 0.125\nstrata_controller_knob{knob=\"max_batched_tokens\"} 384\n"
      "strata_controller_knob{knob=\"max_seqs\"} 48\nstrata_controller_knob{knob=\"hot_tokens\"} 0\n"
      "strata_controller_output{loop=\"kv_demand\"} 0.4\nstrata_controller_output{loop=\"interactive_tpot\"} 0\n"));
  EXPECT_EQ(p.kv_usage, 0.75);
  EXPECT_EQ(p.kv_hot, 0.8);
  EXPECT_EQ(p.kv_warm, 0.25);
  EXPECT_EQ(p.kv_cold, 0);
  EXPECT_EQ(p.running, 5);
  EXPECT_EQ(p.waiting, 7);
  EXPECT_EQ(p.swapped, 1);
  EXPECT_EQ(p.preemptions, 12);
  EXPECT_EQ(p.kv_demand, 0.875);
  EXPECT_EQ(p.batch_reserve, 0.125);
  EXPECT_EQ(p.max_batched_tokens, 384);
  EXPECT_EQ(p.max_seqs, 48);
  EXPECT_EQ(p.memory_pressure, 0.4);
  EXPECT_EQ(p.latency_pressure, 0);
}

TEST(MetricsTrace, ReadsVllmNamesAndLeavesTheRestEmpty) {
  const TracePoint p = trace_point(parse_prometheus_text(
      "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\nvllm:num_requests_running{model_name=\"m\"} 3\n"
      "vllm:num_requests_waiting{model_name=\"m\"} 2\nvllm:num_preemptions_total{model_name=\"m\"} 9\n"));
  EXPECT_EQ(p.kv_usage, 0.5);
  EXPECT_EQ(p.running, 3);
  EXPECT_EQ(p.waiting, 2);
  EXPECT_EQ(p.preemptions, 9);
  EXPECT_FALSE(p.kv_hot.has_value());
  EXPECT_FALSE(p.swapped.has_value());
  EXPECT_FALSE(p.batch_reserve.has_value());
  EXPECT_FALSE(p.kv_demand.has_value());
  EXPECT_EQ(trace_point(parse_prometheus_text("vllm:gpu_cache_usage_perc 0.25\n")).kv_usage, 0.25);
  EXPECT_FALSE(trace_point(parse_prometheus_text("")).kv_usage.has_value());
}

TEST(MetricsTrace, CsvHasAHeaderAndEmptyCellsForMissingValues) {
  TracePoint a;
  a.t_s = 0.25;
  a.kv_usage = 0.5;
  a.running = 2;
  a.preemptions = 0;
  TracePoint b = a;
  b.t_s = 1.5;
  b.server = 1;
  b.batch_reserve = 0.3;
  EXPECT_EQ(trace_csv({a, b}),
            "t_s,server,kv_usage,kv_hot,kv_warm,kv_cold,running,waiting,swapped,preemptions_total,kv_demand,"
            "batch_reserve,max_batched_tokens,max_seqs,memory_pressure,latency_pressure\n"
            "0.250,0,0.5,,,,2,,,0,,,,,,\n"
            "1.500,1,0.5,,,,2,,,0,,0.3,,,,\n");
  EXPECT_EQ(trace_csv({}).find('\n'), trace_csv({}).size() - 1) << "the header alone";
}

TEST(MetricsTrace, KvUsageSummaryOverThePointsWithAValue) {
  std::vector<TracePoint> v(5);
  const double usage[] = {0.2, 0.9, 0.4, 1.0};
  for (size_t i = 0; i < 4; ++i) v[i].kv_usage = usage[i];
  const KvUsageSummary s = summarize_kv_usage(v);
  EXPECT_EQ(s.samples, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 0.625);
  EXPECT_DOUBLE_EQ(s.p50, 0.65);
  EXPECT_DOUBLE_EQ(s.p90, 0.97);
  EXPECT_DOUBLE_EQ(s.max, 1.0);
  EXPECT_DOUBLE_EQ(s.share_at_or_above_90, 0.5);
  EXPECT_EQ(summarize_kv_usage({TracePoint{}}).samples, 0u);
}

}  // namespace
}  // namespace strata::bench
