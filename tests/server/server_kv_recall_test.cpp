// /metrics of eviction within sequences through a real `strata serve`: with --kv-recall the
// recalled tokens are counted (strata_kv_recalled_tokens_total, whole blocks); with --kv-budget
// auto the elastic budget and the lowest it reached are gauges, bounded once one long generation
// fills the pool.
#include <gtest/gtest.h>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::Json;
using test::metrics;
using test::ServerProcess;

void complete(ServerProcess& s, int max_tokens) {
  const Json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], max_tokens);
}

TEST(ServerKvRecall, RecalledTokensAreCountedOnMetrics) {
  ServerProcess::Options o;
  o.args = {"--kv-evict", "h2o", "--kv-budget", "48", "--kv-recall", "--kv-block-size", "16"};
  ServerProcess s(o);
  auto m = metrics(s);
  EXPECT_EQ(m["strata_kv_recalled_tokens_total"], 0);
  complete(s, 200);
  m = metrics(s);
  EXPECT_EQ(m["strata_kv_budget_tokens"], 48);
  EXPECT_GT(m["strata_kv_evicted_tokens_total"], 0);
  const double recalled = m["strata_kv_recalled_tokens_total"];
  EXPECT_GT(recalled, 0);
  EXPECT_EQ(static_cast<int64_t>(recalled) % 16, 0) << "whole blocks";
  EXPECT_EQ(m.count("strata_kv_budget_min_tokens"), 0u) << "only with --kv-budget auto";
}

TEST(ServerKvRecall, TheElasticBudgetIsAGaugeBoundedWhenThePoolFills) {
  ServerProcess::Options o;
  // 12 blocks of 16 tokens: one generation of 300 tokens fills them.
  o.args = {"--kv-evict", "h2o", "--kv-budget", "auto", "--kv-blocks", "12", "--kv-block-size", "16"};
  ServerProcess s(o);
  auto m = metrics(s);
  EXPECT_EQ(m["strata_kv_budget_tokens"], 0) << "unbounded while the pool has room";
  EXPECT_EQ(m["strata_kv_budget_min_tokens"], 0);
  complete(s, 300);
  m = metrics(s);
  EXPECT_GE(m["strata_kv_budget_min_tokens"], 4 + 64) << "never below sinks + the floor";
  EXPECT_LT(m["strata_kv_budget_min_tokens"], 12 * 16);
  EXPECT_GT(m["strata_kv_evicted_tokens_total"], 0);
  EXPECT_EQ(m["strata_preemptions_total"], 0);
}

}  // namespace
}  // namespace strata
