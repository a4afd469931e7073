// Reading /metrics of any server: the exposition format with comments, labels, escapes,
// histograms, special values and timestamps; malformed lines are skipped, not fatal.
#include "bench_client/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata::bench {
namespace {

const char* kExposition =
    "# HELP strata_kv_bytes KV bytes held (used and cached blocks) per tier.\n"
    "# TYPE strata_kv_bytes gauge\n"
    "strata_kv_bytes{tier=\"hot\"} 1048576\n"
    "strata_kv_bytes{tier=\"warm\"} 2.5e+05\n"
    "strata_kv_bytes{tier=\"cold\"} 0\n"
    "strata_prefix_cache_hit_tokens_total 96\n"
    "strata_prefix_cache_queried_tokens_total 128 1712345678000\n"
    "strata_time_to_first_token_seconds_bucket{le=\"0.001\"} 3\r\n"
    "strata_time_to_first_token_seconds_bucket{le=\"+Inf\"} 10\n"
    "weird{path=\"C:\\\\dir\",msg=\"say \\\"hi\\\"\\nbye\", empty=\"\"} -Inf\n"
    "vllm:num_requests_running{model_name=\"m\"} NaN\n"
    "  \n"
    "this line is broken\n"
    "broken_labels{a=\"unterminated} 1\n"
    "no_value{a=\"1\"}\n";

TEST(PrometheusText, ParsesSamplesWithLabelsAndValues) {
  size_t skipped = 99;
  const MetricSamples m = parse_prometheus_text(kExposition, &skipped);
  EXPECT_EQ(skipped, 3u);
  ASSERT_EQ(m.samples().size(), 9u);
  EXPECT_EQ(m.find("strata_kv_bytes", {{"tier", "hot"}}), 1048576.0);
  EXPECT_EQ(m.find("strata_kv_bytes", {{"tier", "warm"}}), 250000.0);
  EXPECT_EQ(m.find("strata_kv_bytes", {{"tier", "cold"}}), 0.0);
  EXPECT_EQ(m.find("strata_kv_bytes", {{"tier", "remote"}}), std::nullopt);
  EXPECT_EQ(m.find("strata_prefix_cache_queried_tokens_total"), 128.0) << "the timestamp is not the value";
  EXPECT_EQ(m.find("strata_time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 10.0);
  EXPECT_EQ(m.find("strata_missing"), std::nullopt);
}

TEST(PrometheusText, UnescapesLabelValuesAndReadsSpecialValues) {
  const MetricSamples m = parse_prometheus_text(kExposition);
  const auto* weird = [&]() -> const MetricSample* {
    for (const auto& s : m.samples())
      if (s.name == "weird") return &s;
    return nullptr;
  }();
  ASSERT_NE(weird, nullptr);
  EXPECT_EQ(weird->labels.at("path"), "C:\\dir");
  EXPECT_EQ(weird->labels.at("msg"), "say \"hi\"\nbye");
  EXPECT_EQ(weird->labels.at("empty"), "");
  EXPECT_TRUE(std::isinf(weird->value) && weird->value < 0);
  const auto nan = m.find("vllm:num_requests_running", {{"model_name", "m"}});
  ASSERT_TRUE(nan.has_value());
  EXPECT_TRUE(std::isnan(*nan));
}

TEST(PrometheusText, SumAddsEveryLabelSet) {
  const MetricSamples m = parse_prometheus_text(kExposition);
  EXPECT_EQ(m.sum("strata_kv_bytes"), 1048576.0 + 250000.0);
  EXPECT_EQ(m.sum("strata_prefix_cache_hit_tokens_total"), 96.0);
  EXPECT_EQ(m.sum("strata_missing"), std::nullopt);
}

TEST(PrometheusText, EmptyAndCommentOnlyTextsHaveNoSamples) {
  size_t skipped = 5;
  EXPECT_TRUE(parse_prometheus_text("", &skipped).samples().empty());
  EXPECT_EQ(skipped, 0u);
  EXPECT_TRUE(parse_prometheus_text("# HELP x y\n# TYPE x counter\n").samples().empty());
}

}  // namespace
}  // namespace strata::bench
