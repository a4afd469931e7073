#include "bench_client/bench_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::bench {
namespace {

struct CounterPair {
  const char* hits;
  const char* queries;
};

constexpr CounterPair kPrefixCounters[] = {
    {"strata_prefix_cache_hit_tokens_total", "strata_prefix_cache_queried_tokens_total"},
    {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
};

nlohmann::ordered_json summary_json(const LatencySummary& s) {
  return {{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}};
}

}  // namespace

BenchReport make_report(const BenchRun& run) {
  BenchReport r;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& rec : run.records) {
    const StreamResult& s = rec.result;
    if (!s.ok) {
      if (r.failed++ == 0) r.first_error = s.error;
      continue;
    }
    ++r.completed;
    r.requests_with_usage += rec.usage_reported;
    r.total_input_tokens += rec.prompt_tokens;
    r.total_output_tokens += rec.output_tokens;
    e2e.push_back(1000 * s.e2e_s);
    if (s.text_chunks > 0) ttft.push_back(1000 * s.ttft_s);
    if (s.text_chunks > 0 && rec.output_tokens > 1) tpot.push_back(1000 * (s.e2e_s - s.ttft_s) / (rec.output_tokens - 1));
    for (double g : s.itl_s) itl.push_back(1000 * g);
  }
  r.duration_s = run.duration_s;
  if (run.duration_s > 0) {
    r.request_throughput = static_cast<double>(r.completed) / run.duration_s;
    r.output_tok_s = static_cast<double>(r.total_output_tokens) / run.duration_s;
    r.total_tok_s = static_cast<double>(r.total_input_tokens + r.total_output_tokens) / run.duration_s;
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
  if (run.metrics_before && run.metrics_after) r.prefix_hit_rate = prefix_hit_rate_delta(*run.metrics_before, *run.metrics_after);
  for (double h : run.health_ms) r.health_max_ms = std::max(r.health_max_ms, h);
  r.health_ms = summarize(run.health_ms);
  r.health_failures = run.health_failures;
  return r;
}

std::optional<double> prefix_hit_rate_delta(const MetricSamples& before, const MetricSamples& after) {
  for (const auto& names : kPrefixCounters) {
    const auto h0 = before.sum(names.hits), q0 = before.sum(names.queries);
    const auto h1 = after.sum(names.hits), q1 = after.sum(names.queries);
    if (!h0 || !q0 || !h1 || !q1) continue;
    const double queried = *q1 - *q0;
    if (!(queried > 0)) return std::nullopt;
    return (*h1 - *h0) / queried;
  }
  return std::nullopt;
}

std::string format_report(const BenchReport& r) {
  std::string s;
  auto line = [&](std::string_view label, const std::string& value) { s += fmt::format("{:<40}{:>12}\n", label, value); };
  auto num = [](double v, int digits = 2) { return fmt::format("{:.{}f}", v, digits); };
  auto section = [&](std::string_view title) { s += fmt::format("{:-^52}\n", title); };
  auto dist = [&](std::string_view name, const LatencySummary& d) {
    line(fmt::format("Mean {} (ms):", name), num(d.mean));
    line(fmt::format("Median {} (ms):", name), num(d.median));
    line(fmt::format("P99 {} (ms):", name), num(d.p99));
  };
  s += fmt::format("{:=^52}\n", " Serving Benchmark Result ");
  line("Successful requests:", std::to_string(r.completed));
  line("Failed requests:", std::to_string(r.failed));
  line("Benchmark duration (s):", num(r.duration_s));
  line("Total input tokens:", std::to_string(r.total_input_tokens));
  line("Total generated tokens:", std::to_string(r.total_output_tokens));
  line("Request throughput (req/s):", num(r.request_throughput));
  line("Output token throughput (tok/s):", num(r.output_tok_s));
  line("Total token throughput (tok/s):", num(r.total_tok_s));
  line("Prefix cache hit rate:", r.prefix_hit_rate ? fmt::format("{:.1f}%", 100 * *r.prefix_hit_rate) : "n/a");
  section(" Time to First Token ");
  dist("TTFT", r.ttft_ms);
  section(" Time per Output Token (excl. 1st token) ");
  dist("TPOT", r.tpot_ms);
  section(" Inter-token Latency ");
  dist("ITL", r.itl_ms);
  section(" End-to-end Latency ");
  dist("E2EL", r.e2e_ms);
  if (r.health_ms.count > 0) {
    section(" GET /health during the run ");
    line("Probes (failed):", fmt::format("{} ({})", r.health_ms.count, r.health_failures));
    dist("answer", r.health_ms);
    line("Max answer (ms):", num(r.health_max_ms));
  }
  s += std::string(52, '=') + "\n";
  if (r.completed > 0 && r.requests_with_usage < r.completed) {
    s += fmt::format("note: {} of {} responses had no usage; their tokens were counted from the stream\n",
                     r.completed - r.requests_with_usage, r.completed);
  }
  if (r.failed > 0) s += fmt::format("first error: {}\n", r.first_error);
  return s;
}

nlohmann::ordered_json report_to_json(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["first_error"] = r.failed ? nlohmann::ordered_json(r.first_error) : nlohmann::ordered_json(nullptr);
  j["duration_s"] = r.duration_s;
  j["total_input_tokens"] = r.total_input_tokens;
  j["total_output_tokens"] = r.total_output_tokens;
  j["requests_with_usage"] = r.requests_with_usage;
  j["request_throughput"] = r.request_throughput;
  j["output_tok_s"] = r.output_tok_s;
  j["total_tok_s"] = r.total_tok_s;
  j["ttft_ms"] = summary_json(r.ttft_ms);
  j["tpot_ms"] = summary_json(r.tpot_ms);
  j["itl_ms"] = summary_json(r.itl_ms);
  j["e2e_ms"] = summary_json(r.e2e_ms);
  j["prefix_hit_rate"] = r.prefix_hit_rate ? nlohmann::ordered_json(*r.prefix_hit_rate) : nlohmann::ordered_json(nullptr);
  if (r.health_ms.count > 0) {
    j["health_ms"] = summary_json(r.health_ms);
    j["health_max_ms"] = r.health_max_ms;
    j["health_probes"] = r.health_ms.count;
    j["health_failures"] = r.health_failures;
  }
  return j;
}

}  // namespace strata::bench
