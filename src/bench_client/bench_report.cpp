#include "bench_client/bench_report.h"

#include <algorithm>
#include <cstdint>
#include <map>

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

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

std::optional<double> hit_rate(const std::optional<PrefixCacheDelta>& d) {
  if (!d || !(d->queried_tokens > 0)) return std::nullopt;
  return d->hit_tokens / d->queried_tokens;
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
  // Per QoS class, by name.
  struct ClassSamples {
    std::vector<double> ttft, tpot, e2e;
  };
  std::map<std::string, std::pair<QosClassReport, ClassSamples>> classes;
  for (const auto& rec : run.records) {
    if (rec.qos.empty()) continue;
    auto& [cr, cs] = classes[rec.qos];
    cr.name = rec.qos;
    ++cr.requests;
    const StreamResult& s = rec.result;
    if (!s.ok) {
      ++cr.failed;
      continue;
    }
    ++cr.completed;
    cr.total_output_tokens += rec.output_tokens;
    cs.e2e.push_back(1000 * s.e2e_s);
    if (s.text_chunks > 0) cs.ttft.push_back(1000 * s.ttft_s);
    if (s.text_chunks > 0 && rec.output_tokens > 1) cs.tpot.push_back(1000 * (s.e2e_s - s.ttft_s) / (rec.output_tokens - 1));
  }
  for (auto& [name, entry] : classes) {
    auto& [cr, cs] = entry;
    if (run.duration_s > 0) {
      cr.request_throughput = static_cast<double>(cr.completed) / run.duration_s;
      cr.output_tok_s = static_cast<double>(cr.total_output_tokens) / run.duration_s;
    }
    cr.ttft_ms = summarize(std::move(cs.ttft));
    cr.tpot_ms = summarize(std::move(cs.tpot));
    cr.e2e_ms = summarize(std::move(cs.e2e));
    r.qos_classes.push_back(std::move(cr));
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));

  // Per server: its requests, and its own scrapes and probes; the totals sum and pool them.
  const size_t n_servers = run.servers.size();
  r.servers.resize(n_servers);
  std::vector<std::vector<double>> server_ttft(n_servers);
  std::vector<size_t> last_conversation(n_servers, SIZE_MAX);
  for (const auto& rec : run.records) {
    if (rec.server >= n_servers) continue;
    ServerReport& sr = r.servers[rec.server];
    ++sr.requests;
    // Records come conversation by conversation, so a change of conversation is a new one.
    if (last_conversation[rec.server] != rec.conversation) ++sr.conversations;
    last_conversation[rec.server] = rec.conversation;
    if (!rec.result.ok) {
      ++sr.failed;
      continue;
    }
    ++sr.completed;
    sr.total_output_tokens += rec.output_tokens;
    if (rec.result.text_chunks > 0) server_ttft[rec.server].push_back(1000 * rec.result.ttft_s);
  }
  std::vector<double> health;
  std::vector<TracePoint> trace;
  for (size_t i = 0; i < n_servers; ++i) {
    const ServerRun& in = run.servers[i];
    ServerReport& sr = r.servers[i];
    sr.base_url = in.base_url;
    if (run.duration_s > 0) {
      sr.request_throughput = static_cast<double>(sr.completed) / run.duration_s;
      sr.output_tok_s = static_cast<double>(sr.total_output_tokens) / run.duration_s;
    }
    sr.ttft_ms = summarize(std::move(server_ttft[i]));
    if (in.metrics_before && in.metrics_after) sr.prefix_cache = prefix_cache_delta(*in.metrics_before, *in.metrics_after);
    sr.prefix_hit_rate = hit_rate(sr.prefix_cache);
    if (in.metrics_before && in.metrics_after) sr.preemptions = preemptions_delta(*in.metrics_before, *in.metrics_after);
    if (sr.preemptions) r.preemptions = r.preemptions.value_or(0) + *sr.preemptions;
    trace.insert(trace.end(), in.trace.begin(), in.trace.end());
    if (sr.prefix_cache) {
      if (!r.prefix_cache) r.prefix_cache = PrefixCacheDelta{};
      r.prefix_cache->hit_tokens += sr.prefix_cache->hit_tokens;
      r.prefix_cache->queried_tokens += sr.prefix_cache->queried_tokens;
    }
    for (double h : in.health_ms) sr.health_max_ms = std::max(sr.health_max_ms, h);
    sr.health_ms = summarize(in.health_ms);
    sr.health_failures = in.health_failures;
    health.insert(health.end(), in.health_ms.begin(), in.health_ms.end());
    r.health_max_ms = std::max(r.health_max_ms, sr.health_max_ms);
    r.health_failures += in.health_failures;
  }
  r.prefix_hit_rate = hit_rate(r.prefix_cache);
  r.health_ms = summarize(std::move(health));
  r.kv_usage = summarize_kv_usage(trace);
  return r;
}

std::optional<double> preemptions_delta(const MetricSamples& before, const MetricSamples& after) {
  for (const char* name : {"strata_preemptions_total", "vllm:num_preemptions_total"}) {
    const auto a = before.sum(name), b = after.sum(name);
    if (a && b) return *b - *a;
  }
  return std::nullopt;
}

std::optional<PrefixCacheDelta> prefix_cache_delta(const MetricSamples& before, const MetricSamples& after) {
  for (const auto& names : kPrefixCounters) {
    const auto h0 = before.sum(names.hits), q0 = before.sum(names.queries);
    const auto h1 = after.sum(names.hits), q1 = after.sum(names.queries);
    if (!h0 || !q0 || !h1 || !q1) continue;
    return PrefixCacheDelta{*h1 - *h0, *q1 - *q0};
  }
  return std::nullopt;
}

std::optional<double> prefix_hit_rate_delta(const MetricSamples& before, const MetricSamples& after) {
  return hit_rate(prefix_cache_delta(before, after));
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
  line("Preemptions (server):", r.preemptions ? fmt::format("{:.0f}", *r.preemptions) : "n/a");
  section(" Time to First Token ");
  dist("TTFT", r.ttft_ms);
  section(" Time per Output Token (excl. 1st token) ");
  dist("TPOT", r.tpot_ms);
  section(" Inter-token Latency ");
  dist("ITL", r.itl_ms);
  section(" End-to-end Latency ");
  dist("E2EL", r.e2e_ms);
  for (const QosClassReport& c : r.qos_classes) {
    section(fmt::format(" QoS class {} ", c.name));
    line("Requests (failed):", fmt::format("{} ({})", c.requests, c.failed));
    line("Request throughput (req/s):", num(c.request_throughput));
    line("Output token throughput (tok/s):", num(c.output_tok_s));
    line("Median TTFT (ms):", num(c.ttft_ms.median));
    line("P99 TTFT (ms):", num(c.ttft_ms.p99));
    line("Median TPOT (ms):", num(c.tpot_ms.median));
    line("P99 TPOT (ms):", num(c.tpot_ms.p99));
    line("P99 E2EL (ms):", num(c.e2e_ms.p99));
  }
  if (r.kv_usage.samples > 0) {
    section(" KV usage sampled from /metrics ");
    line("Samples:", std::to_string(r.kv_usage.samples));
    line("Mean / median:", fmt::format("{:.1f}% / {:.1f}%", 100 * r.kv_usage.mean, 100 * r.kv_usage.p50));
    line("P90 / max:", fmt::format("{:.1f}% / {:.1f}%", 100 * r.kv_usage.p90, 100 * r.kv_usage.max));
    line("Samples at or above 90%:", fmt::format("{:.1f}%", 100 * r.kv_usage.share_at_or_above_90));
  }
  if (r.health_ms.count > 0) {
    section(" GET /health during the run ");
    line("Probes (failed):", fmt::format("{} ({})", r.health_ms.count, r.health_failures));
    dist("answer", r.health_ms);
    line("Max answer (ms):", num(r.health_max_ms));
  }
  if (r.servers.size() > 1) {
    for (size_t i = 0; i < r.servers.size(); ++i) {
      const ServerReport& sr = r.servers[i];
      section(fmt::format(" Server {} of {} ", i + 1, r.servers.size()));
      s += sr.base_url + "\n";
      line("Requests (failed):", fmt::format("{} ({})", sr.requests, sr.failed));
      line("Conversations:", std::to_string(sr.conversations));
      line("Request throughput (req/s):", num(sr.request_throughput));
      line("Output token throughput (tok/s):", num(sr.output_tok_s));
      line("Median TTFT (ms):", num(sr.ttft_ms.median));
      line("P99 TTFT (ms):", num(sr.ttft_ms.p99));
      line("Prefix cache hit rate:", sr.prefix_hit_rate ? fmt::format("{:.1f}%", 100 * *sr.prefix_hit_rate) : "n/a");
      if (sr.health_ms.count > 0) {
        line("GET /health probes (failed):", fmt::format("{} ({})", sr.health_ms.count, sr.health_failures));
        line("GET /health P99 / max (ms):", fmt::format("{} / {}", num(sr.health_ms.p99, 1), num(sr.health_max_ms, 1)));
      }
    }
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
  j["prefix_hit_rate"] = optional_json(r.prefix_hit_rate);
  if (r.health_ms.count > 0) {
    j["health_ms"] = summary_json(r.health_ms);
    j["health_max_ms"] = r.health_max_ms;
    j["health_probes"] = r.health_ms.count;
    j["health_failures"] = r.health_failures;
  }
  j["prefix_hit_tokens"] = r.prefix_cache ? nlohmann::ordered_json(r.prefix_cache->hit_tokens) : nlohmann::ordered_json(nullptr);
  j["prefix_queried_tokens"] =
      r.prefix_cache ? nlohmann::ordered_json(r.prefix_cache->queried_tokens) : nlohmann::ordered_json(nullptr);
  j["preemptions"] = optional_json(r.preemptions);
  if (r.kv_usage.samples > 0) {
    j["kv_usage"] = {{"samples", r.kv_usage.samples}, {"mean", r.kv_usage.mean}, {"p50", r.kv_usage.p50},
                     {"p90", r.kv_usage.p90}, {"max", r.kv_usage.max}, {"share_at_or_above_90", r.kv_usage.share_at_or_above_90}};
  } else {
    j["kv_usage"] = nullptr;
  }
  nlohmann::ordered_json classes = nlohmann::ordered_json::object();
  for (const QosClassReport& c : r.qos_classes) {
    nlohmann::ordered_json o;
    o["requests"] = c.requests;
    o["completed"] = c.completed;
    o["failed"] = c.failed;
    o["total_output_tokens"] = c.total_output_tokens;
    o["request_throughput"] = c.request_throughput;
    o["output_tok_s"] = c.output_tok_s;
    o["ttft_ms"] = summary_json(c.ttft_ms);
    o["tpot_ms"] = summary_json(c.tpot_ms);
    o["e2e_ms"] = summary_json(c.e2e_ms);
    classes[c.name] = std::move(o);
  }
  j["qos_classes"] = std::move(classes);
  nlohmann::ordered_json servers = nlohmann::ordered_json::array();
  for (const ServerReport& sr : r.servers) {
    nlohmann::ordered_json o;
    o["base_url"] = sr.base_url;
    o["requests"] = sr.requests;
    o["completed"] = sr.completed;
    o["failed"] = sr.failed;
    o["conversations"] = sr.conversations;
    o["total_output_tokens"] = sr.total_output_tokens;
    o["request_throughput"] = sr.request_throughput;
    o["output_tok_s"] = sr.output_tok_s;
    o["ttft_ms"] = summary_json(sr.ttft_ms);
    o["prefix_hit_rate"] = optional_json(sr.prefix_hit_rate);
    o["prefix_hit_tokens"] = sr.prefix_cache ? nlohmann::ordered_json(sr.prefix_cache->hit_tokens) : nlohmann::ordered_json(nullptr);
    o["prefix_queried_tokens"] =
        sr.prefix_cache ? nlohmann::ordered_json(sr.prefix_cache->queried_tokens) : nlohmann::ordered_json(nullptr);
    o["preemptions"] = optional_json(sr.preemptions);
    if (sr.health_ms.count > 0) {
      o["health_ms"] = summary_json(sr.health_ms);
      o["health_max_ms"] = sr.health_max_ms;
      o["health_probes"] = sr.health_ms.count;
      o["health_failures"] = sr.health_failures;
    }
    servers.push_back(std::move(o));
  }
  j["servers"] = std::move(servers);
  return j;
}

}  // namespace strata::bench
