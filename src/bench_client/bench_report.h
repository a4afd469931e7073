// The numbers a serving benchmark reports, computed from a BenchRun: request and token
// throughput, TTFT, TPOT, ITL and end-to-end latency summaries, failures, the server's
// prefix-cache hit rate and preemptions over the run, the same per QoS class when the requests
// carry one (--qos-mix), and the KV usage sampled during the run (--kv-sample-ms). Definitions follow `vllm bench serve`:
//   TTFT  send -> first chunk with generated text
//   TPOT  (e2e - TTFT) / (output tokens - 1), per request with more than one output token
//   ITL   gaps between consecutive chunks with text, pooled over all requests
//   throughputs divide by the run's wall time; only completed requests count.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/bench_runner.h"
#include "bench_client/latency_stats.h"
#include "bench_client/metrics_trace.h"
#include "bench_client/prometheus_text.h"

namespace strata::bench {

// Prefix-cache tokens one server counted between two scrapes.
struct PrefixCacheDelta {
  double hit_tokens = 0;
  double queried_tokens = 0;
};

// One server's share of a run (several --base-url): its requests, their outcome and latency, and
// its own /metrics and /health measurements.
struct ServerReport {
  std::string base_url;
  size_t requests = 0;       // routed to this server (including ones not sent after a failed turn)
  size_t completed = 0;
  size_t failed = 0;
  size_t conversations = 0;  // conversations with at least one request here
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed requests per second of the whole run
  double output_tok_s = 0;
  LatencySummary ttft_ms;
  std::optional<PrefixCacheDelta> prefix_cache;  // nullopt when its /metrics lacks the counters
  std::optional<double> prefix_hit_rate;         // nullopt also when nothing was queried
  LatencySummary health_ms;  // count 0: not probed
  double health_max_ms = 0;
  size_t health_failures = 0;
  std::optional<double> preemptions;  // this server's counter between the scrapes; nullopt when absent
};

// The requests of one QoS class (RequestRecord::qos): the totals' figures over them alone
// (throughputs still divide by the whole run's duration).
struct QosClassReport {
  std::string name;
  size_t requests = 0;
  size_t completed = 0;
  size_t failed = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;
  double output_tok_s = 0;
  LatencySummary ttft_ms, tpot_ms, e2e_ms;
};

struct BenchReport {
  size_t completed = 0;
  size_t failed = 0;
  std::string first_error;           // of the first failed request in dataset order; "" when none
  size_t requests_with_usage = 0;    // completed requests whose response reported usage
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;     // completed requests per second
  double output_tok_s = 0;
  double total_tok_s = 0;            // (input + output) tokens per second
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // Summed over the servers that expose the counters; nullopt when none does.
  std::optional<PrefixCacheDelta> prefix_cache;
  std::optional<double> prefix_hit_rate;  // of the sums; nullopt when n/a or nothing was queried
  // --probe-health-ms: GET /health answer times, pooled over the servers (count 0: not probed).
  LatencySummary health_ms;
  double health_max_ms = 0;
  size_t health_failures = 0;
  // Summed over the servers that expose strata_preemptions_total (or vLLM's
  // vllm:num_preemptions_total), between the scrapes before and after; nullopt when none does.
  std::optional<double> preemptions;
  KvUsageSummary kv_usage;            // of every server's trace (samples 0: not sampled)
  std::vector<QosClassReport> qos_classes;  // one per class the requests carried, by name; empty without
  std::vector<ServerReport> servers;  // one per BenchRun::servers entry, in order
};

BenchReport make_report(const BenchRun& run);

// Hit tokens over queried tokens between two scrapes of the same server, from strata's
// strata_prefix_cache_{hit,queried}_tokens_total counters (or vLLM's vllm:prefix_cache_{hits,
// queries}_total). nullopt when the counters are missing or nothing was queried in between.
std::optional<double> prefix_hit_rate_delta(const MetricSamples& before, const MetricSamples& after);

// The hit and queried tokens between two scrapes from the same counters (queried may be 0);
// nullopt when the counters are missing.
std::optional<PrefixCacheDelta> prefix_cache_delta(const MetricSamples& before, const MetricSamples& after);

// strata_preemptions_total (or vllm:num_preemptions_total) after minus before; nullopt when missing.
std::optional<double> preemptions_delta(const MetricSamples& before, const MetricSamples& after);

// The report as a human reads it (a table in the style of vllm bench serve); with more than one
// server, a section per server follows the totals.
std::string format_report(const BenchReport& r);

// The report as one JSON object: request_throughput, output_tok_s, total_tok_s,
// ttft_ms/tpot_ms/itl_ms/e2e_ms {mean, median, p99}, completed, failed, first_error,
// prefix_hit_rate (null when n/a), prefix_hit_tokens, prefix_queried_tokens (null when n/a),
// duration_s, total_input_tokens, total_output_tokens, requests_with_usage, health_* when probed,
// preemptions (null when n/a), kv_usage {samples, mean, p50, p90, max, share_at_or_above_90}
// (null when not sampled), qos_classes {NAME: {requests, completed, failed, total_output_tokens,
// request_throughput, output_tok_s, ttft_ms, tpot_ms, e2e_ms}} ({} without classes),
// and servers: [{base_url, requests, completed, failed, conversations, total_output_tokens,
// request_throughput, output_tok_s, ttft_ms {mean, median, p99}, prefix_hit_rate,
// prefix_hit_tokens, prefix_queried_tokens, preemptions, health_* when probed}]. The caller adds
// the run parameters.
nlohmann::ordered_json report_to_json(const BenchReport& r);

}  // namespace strata::bench
