#include "bench_client/metrics_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <map>

#include "bench_client/latency_stats.h"

namespace strata::bench {
namespace {

std::optional<double> first_of(const MetricSamples& m, std::initializer_list<const char*> names,
                               const std::map<std::string, std::string>& labels = {}) {
  for (const char* n : names) {
    if (auto v = m.find(n, labels)) return v;
  }
  return std::nullopt;
}

std::string cell(const std::optional<double>& v) { return v ? fmt::format("{}", *v) : std::string(); }

}  // namespace

TracePoint trace_point(const MetricSamples& m) {
  TracePoint p;
  p.kv_usage = first_of(m, {"strata_kv_usage_ratio", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"});
  p.kv_hot = m.find("strata_kv_tier_usage_ratio", {{"tier", "hot"}});
  p.kv_warm = m.find("strata_kv_tier_usage_ratio", {{"tier", "warm"}});
  p.kv_cold = m.find("strata_kv_tier_usage_ratio", {{"tier", "cold"}});
  p.running = first_of(m, {"strata_requests_running", "vllm:num_requests_running"});
  p.waiting = first_of(m, {"strata_requests_waiting", "vllm:num_requests_waiting"});
  p.swapped = first_of(m, {"strata_requests_swapped", "vllm:num_requests_swapped"});
  p.preemptions = first_of(m, {"strata_preemptions_total", "vllm:num_preemptions_total"});
  p.kv_demand = m.find("strata_controller_kv_demand_ratio");
  p.batch_reserve = m.find("strata_controller_knob", {{"knob", "batch_reserve"}});
  p.max_batched_tokens = m.find("strata_controller_knob", {{"knob", "max_batched_tokens"}});
  p.max_seqs = m.find("strata_controller_knob", {{"knob", "max_seqs"}});
  p.memory_pressure = m.find("strata_controller_output", {{"loop", "kv_demand"}});
  p.latency_pressure = m.find("strata_controller_output", {{"loop", "interactive_tpot"}});
  return p;
}

std::string trace_csv(const std::vector<TracePoint>& points) {
  std::string s =
      "t_s,server,kv_usage,kv_hot,kv_warm,kv_cold,running,waiting,swapped,preemptions_total,kv_demand,batch_reserve,"
      "max_batched_tokens,"
      "max_seqs,memory_pressure,latency_pressure\n";
  for (const TracePoint& p : points) {
    s += fmt::format("{:.3f},{}", p.t_s, p.server);
    for (const auto* v : {&p.kv_usage, &p.kv_hot, &p.kv_warm, &p.kv_cold, &p.running, &p.waiting, &p.swapped, &p.preemptions,
                          &p.kv_demand, &p.batch_reserve, &p.max_batched_tokens, &p.max_seqs, &p.memory_pressure, &p.latency_pressure}) {
      s += ',';
      s += cell(*v);
    }
    s += '\n';
  }
  return s;
}

KvUsageSummary summarize_kv_usage(const std::vector<TracePoint>& points) {
  std::vector<double> v;
  for (const TracePoint& p : points) {
    if (p.kv_usage) v.push_back(*p.kv_usage);
  }
  KvUsageSummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.samples = v.size();
  double sum = 0;
  size_t high = 0;
  for (double x : v) {
    sum += x;
    high += x >= 0.9;
  }
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = percentile_of_sorted(v, 50);
  s.p90 = percentile_of_sorted(v, 90);
  s.max = v.back();
  s.share_at_or_above_90 = static_cast<double>(high) / static_cast<double>(v.size());
  return s;
}

}  // namespace strata::bench
