// Percentiles as numpy computes them (linear interpolation), and the report's definitions of
// throughput, TTFT, TPOT, ITL, failures and prefix-cache hit rate on hand-made runs.
#include "bench_client/latency_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bench_client/bench_report.h"

namespace strata::bench {
namespace {

TEST(LatencyStats, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 99), 3.97);  // numpy.percentile([1,2,3,4], 99)
  EXPECT_DOUBLE_EQ(percentile_of_sorted(v, 100), 4);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(hundred, 99), 99.01);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(hundred, 50), 50.5);
}

TEST(LatencyStats, SummarizeSortsAndHandlesSmallInputs) {
  const LatencySummary s = summarize({9, 1, 5});
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.median, 5);
  EXPECT_DOUBLE_EQ(s.p99, 8.92);
  const LatencySummary one = summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.p99, 7);
  const LatencySummary none = summarize({});
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.p99, 0);
}

RequestRecord ok_record(double ttft_s, std::vector<double> itl_s, double e2e_s, int32_t prompt, int32_t output, bool usage) {
  RequestRecord r;
  r.result.ok = true;
  r.result.ttft_s = ttft_s;
  r.result.itl_s = std::move(itl_s);
  r.result.e2e_s = e2e_s;
  r.result.text_chunks = static_cast<int32_t>(r.result.itl_s.size()) + 1;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.usage_reported = usage;
  return r;
}

TEST(BenchReport, ThroughputAndLatenciesFollowTheDefinitions) {
  BenchRun run;
  run.duration_s = 2.0;
  run.records.push_back(ok_record(0.100, {0.010, 0.030}, 0.140, 10, 5, true));  // TPOT (140-100)/4 = 10 ms
  run.records.push_back(ok_record(0.200, {0.020}, 0.300, 20, 3, false));        // TPOT (300-200)/2 = 50 ms
  RequestRecord failed;
  failed.result.error = "HTTP 500: boom";
  run.records.push_back(failed);
  RequestRecord failed2;
  failed2.result.error = "second";
  run.records.push_back(failed2);

  const BenchReport r = make_report(run);
  EXPECT_EQ(r.completed, 2u);
  EXPECT_EQ(r.failed, 2u);
  EXPECT_EQ(r.first_error, "HTTP 500: boom");
  EXPECT_EQ(r.requests_with_usage, 1u);
  EXPECT_EQ(r.total_input_tokens, 30);
  EXPECT_EQ(r.total_output_tokens, 8);
  EXPECT_NEAR(r.request_throughput, 1.0, 1e-9);
  EXPECT_NEAR(r.output_tok_s, 4.0, 1e-9);
  EXPECT_NEAR(r.total_tok_s, 19.0, 1e-9);
  EXPECT_NEAR(r.ttft_ms.mean, 150, 1e-9);
  EXPECT_NEAR(r.tpot_ms.mean, 30, 1e-9);
  EXPECT_NEAR(r.tpot_ms.median, 30, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 3u);  // pooled over requests
  EXPECT_NEAR(r.itl_ms.median, 20, 1e-9);
  EXPECT_NEAR(r.e2e_ms.mean, 220, 1e-9);
  EXPECT_FALSE(r.prefix_hit_rate.has_value()) << "no scrapes, no hit rate";

  const auto j = report_to_json(r);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["failed"], 2);
  EXPECT_TRUE(j["prefix_hit_rate"].is_null());
  EXPECT_NEAR(j["tpot_ms"]["median"].get<double>(), 30, 1e-9);
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    for (const char* stat : {"mean", "median", "p99"}) EXPECT_TRUE(j[key].contains(stat)) << key << "." << stat;
  }
  EXPECT_NE(format_report(r).find("first error: HTTP 500: boom"), std::string::npos);
}

TEST(BenchReport, SingleTokenRequestsHaveNoTpotAndSilentOnesNoTtft) {
  BenchRun run;
  run.duration_s = 1;
  run.records.push_back(ok_record(0.05, {}, 0.05, 4, 1, true));
  RequestRecord silent = ok_record(0, {}, 0.02, 4, 0, true);
  silent.result.text_chunks = 0;  // immediate end of generation: no text at all
  run.records.push_back(silent);
  const BenchReport r = make_report(run);
  EXPECT_EQ(r.completed, 2u);
  EXPECT_EQ(r.tpot_ms.count, 0u);
  EXPECT_EQ(r.ttft_ms.count, 1u);
  EXPECT_EQ(r.e2e_ms.count, 2u);
}

TEST(BenchReport, PrefixHitRateIsTheDeltaBetweenScrapes) {
  const MetricSamples before = parse_prometheus_text(
      "strata_prefix_cache_hit_tokens_total 100\nstrata_prefix_cache_queried_tokens_total 400\n");
  const MetricSamples after = parse_prometheus_text(
      "strata_prefix_cache_hit_tokens_total 175\nstrata_prefix_cache_queried_tokens_total 500\n");
  EXPECT_NEAR(prefix_hit_rate_delta(before, after).value(), 0.75, 1e-9);
  EXPECT_FALSE(prefix_hit_rate_delta(after, after).has_value()) << "nothing queried in between";
  const MetricSamples other = parse_prometheus_text("strata_requests_running 1\n");
  EXPECT_FALSE(prefix_hit_rate_delta(other, other).has_value());
  EXPECT_FALSE(prefix_hit_rate_delta(other, after).has_value());

  const MetricSamples v0 = parse_prometheus_text(
      "vllm:prefix_cache_hits_total{model_name=\"m\"} 0\nvllm:prefix_cache_queries_total{model_name=\"m\"} 0\n");
  const MetricSamples v1 = parse_prometheus_text(
      "vllm:prefix_cache_hits_total{model_name=\"m\"} 30\nvllm:prefix_cache_queries_total{model_name=\"m\"} 120\n");
  EXPECT_NEAR(prefix_hit_rate_delta(v0, v1).value(), 0.25, 1e-9);

  BenchRun run;
  run.duration_s = 1;
  ServerRun server;
  server.metrics_before = before;
  server.metrics_after = after;
  run.servers.push_back(server);
  const BenchReport r = make_report(run);
  EXPECT_NEAR(r.prefix_hit_rate.value(), 0.75, 1e-9);
  EXPECT_NE(format_report(r).find("75.0%"), std::string::npos);
}

TEST(BenchReport, QosClassesGetTheirOwnLatenciesAndThroughput) {
  BenchRun run;
  run.duration_s = 4.0;
  auto rec = [](const char* qos, double ttft_s, double e2e_s, int32_t output) {
    RequestRecord r = ok_record(ttft_s, {}, e2e_s, 10, output, true);
    r.qos = qos;
    return r;
  };
  run.records.push_back(rec("interactive", 0.1, 0.5, 5));  // TPOT 100 ms
  run.records.push_back(rec("batch", 2.0, 4.0, 11));        // TPOT 200 ms
  run.records.push_back(rec("batch", 3.0, 4.0, 3));         // TPOT 500 ms
  RequestRecord failed;
  failed.qos = "batch";
  failed.result.error = "HTTP 500";
  run.records.push_back(failed);
  const BenchReport r = make_report(run);
  ASSERT_EQ(r.qos_classes.size(), 2u);
  const QosClassReport& b = r.qos_classes[0];  // by name
  const QosClassReport& i = r.qos_classes[1];
  EXPECT_EQ(b.name, "batch");
  EXPECT_EQ(b.requests, 3u);
  EXPECT_EQ(b.completed, 2u);
  EXPECT_EQ(b.failed, 1u);
  EXPECT_EQ(b.total_output_tokens, 14);
  EXPECT_DOUBLE_EQ(b.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(b.output_tok_s, 3.5);
  EXPECT_DOUBLE_EQ(b.ttft_ms.median, 2500);
  EXPECT_DOUBLE_EQ(b.ttft_ms.p99, 2990);
  EXPECT_DOUBLE_EQ(b.tpot_ms.median, 350);
  EXPECT_EQ(i.name, "interactive");
  EXPECT_EQ(i.completed, 1u);
  EXPECT_DOUBLE_EQ(i.ttft_ms.p99, 100);
  EXPECT_DOUBLE_EQ(i.tpot_ms.median, 100);
  // The totals pool both classes.
  EXPECT_EQ(r.completed, 3u);
  EXPECT_EQ(r.ttft_ms.count, 3u);
  const std::string text = format_report(r);
  EXPECT_NE(text.find("QoS class batch"), std::string::npos) << text;
  EXPECT_NE(text.find("QoS class interactive"), std::string::npos) << text;
  const auto j = report_to_json(r);
  EXPECT_EQ(j["qos_classes"]["batch"]["failed"], 1);
  EXPECT_DOUBLE_EQ(j["qos_classes"]["interactive"]["ttft_ms"]["p99"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(j["qos_classes"]["batch"]["tpot_ms"]["median"].get<double>(), 350);

  // Without classes: no sections, an empty object.
  for (auto& x : run.records) x.qos.clear();
  const BenchReport plain = make_report(run);
  EXPECT_TRUE(plain.qos_classes.empty());
  EXPECT_EQ(format_report(plain).find("QoS class"), std::string::npos);
  EXPECT_TRUE(report_to_json(plain)["qos_classes"].empty());
}

TEST(BenchReport, PreemptionsAreTheCounterDeltaSummedOverServers) {
  BenchRun run;
  run.duration_s = 1;
  ServerRun a, b, c;
  a.metrics_before = parse_prometheus_text("strata_preemptions_total 4\n");
  a.metrics_after = parse_prometheus_text("strata_preemptions_total 11\n");
  b.metrics_before = parse_prometheus_text("vllm:num_preemptions_total{model_name=\"m\"} 1\n");
  b.metrics_after = parse_prometheus_text("vllm:num_preemptions_total{model_name=\"m\"} 3\n");
  c.metrics_before = parse_prometheus_text("other 1\n");
  c.metrics_after = parse_prometheus_text("other 2\n");
  run.servers = {a, b, c};
  const BenchReport r = make_report(run);
  EXPECT_DOUBLE_EQ(r.preemptions.value(), 9);
  EXPECT_DOUBLE_EQ(r.servers[0].preemptions.value(), 7);
  EXPECT_DOUBLE_EQ(r.servers[1].preemptions.value(), 2);
  EXPECT_FALSE(r.servers[2].preemptions.has_value());
  EXPECT_NE(format_report(r).find("Preemptions (server):"), std::string::npos);
  EXPECT_EQ(report_to_json(r)["preemptions"], 9.0);
  EXPECT_TRUE(report_to_json(r)["servers"][2]["preemptions"].is_null());
  run.servers = {c};
  EXPECT_FALSE(make_report(run).preemptions.has_value());
  EXPECT_TRUE(report_to_json(make_report(run))["preemptions"].is_null());
}

TEST(BenchReport, KvUsageIsSummarisedFromEveryServersTrace) {
  BenchRun run;
  run.duration_s = 1;
  ServerRun a, b;
  for (double u : {0.5, 0.95, 1.0}) {
    TracePoint p;
    p.kv_usage = u;
    a.trace.push_back(p);
  }
  TracePoint gap;  // a scrape without the gauge counts for nothing
  a.trace.push_back(gap);
  TracePoint p;
  p.kv_usage = 0.1;
  b.trace.push_back(p);
  run.servers = {a, b};
  const BenchReport r = make_report(run);
  EXPECT_EQ(r.kv_usage.samples, 4u);
  EXPECT_DOUBLE_EQ(r.kv_usage.mean, (0.5 + 0.95 + 1.0 + 0.1) / 4);
  EXPECT_DOUBLE_EQ(r.kv_usage.p50, 0.725);
  EXPECT_DOUBLE_EQ(r.kv_usage.max, 1.0);
  EXPECT_DOUBLE_EQ(r.kv_usage.share_at_or_above_90, 0.5);
  EXPECT_NE(format_report(r).find("KV usage sampled"), std::string::npos);
  EXPECT_EQ(report_to_json(r)["kv_usage"]["samples"], 4);
  run.servers = {ServerRun{}};
  EXPECT_TRUE(report_to_json(make_report(run))["kv_usage"].is_null());
  EXPECT_EQ(format_report(make_report(run)).find("KV usage sampled"), std::string::npos);
}

TEST(BenchReport, RampArrivalsSpeedUpFromOneRateToTheOther) {
  // From 1/s to 3/s: T = 2n / 4 = 1000 s for n = 2000; the first half of T expects
  // (1 + 2) / 2 * 500 = 750 arrivals and the second (2 + 3) / 2 * 500 = 1250.
  const auto a = ramp_arrival_times(2000, 1, 3, 7);
  EXPECT_EQ(a, ramp_arrival_times(2000, 1, 3, 7));
  ASSERT_EQ(a.size(), 2000u);
  EXPECT_EQ(a.front(), 0);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  const auto first_half = std::lower_bound(a.begin(), a.end(), 500.0) - a.begin();
  EXPECT_NEAR(static_cast<double>(first_half), 750, 5 * std::sqrt(750.0));
  EXPECT_NEAR(a.back(), 1000, 5 * std::sqrt(2000.0) / 3);  // the count's spread over the last rate
  // Gaps in the first and last tenth: mean about 1/1.1 s and 1/2.9 s.
  const double early = a[199] / 199, late = (a[1999] - a[1800]) / 199;
  EXPECT_GT(early / late, 2.0);
  // A ramp down mirrors it; a flat "ramp" is the plain Poisson process of that rate.
  const auto down = ramp_arrival_times(2000, 3, 1, 7);
  EXPECT_NEAR(static_cast<double>(std::lower_bound(down.begin(), down.end(), 500.0) - down.begin()), 1250, 5 * std::sqrt(1250.0));
  const auto flat = ramp_arrival_times(500, 4, 4, 9);
  const auto poisson = arrival_times(500, 4, 9);
  for (size_t i = 0; i < flat.size(); ++i) EXPECT_NEAR(flat[i], poisson[i], 1e-9 * (1 + poisson[i]));
}

TEST(BenchReport, ArrivalTimesArePoissonFromTheSeedOrAllAtOnce) {
  EXPECT_EQ(arrival_times(4, 0, 1), (std::vector<double>{0, 0, 0, 0}));
  const auto a = arrival_times(2000, 50, 7);
  EXPECT_EQ(a, arrival_times(2000, 50, 7));
  EXPECT_NE(a, arrival_times(2000, 50, 8));
  EXPECT_EQ(a.front(), 0);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  // 1999 exponential gaps of mean 1/50 s: the mean is within a few standard errors of 0.02.
  const double mean_gap = a.back() / 1999.0;
  EXPECT_NEAR(mean_gap, 0.02, 0.02 * 5 / std::sqrt(1999.0));
}

}  // namespace
}  // namespace strata::bench
