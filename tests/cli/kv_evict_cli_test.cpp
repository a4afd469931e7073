// Black-box tests of eviction within sequences (--kv-evict, --kv-budget, --kv-sinks, --kv-recent,
// --kv-recall, --kv-recall-blocks)
// through the `strata` binary on stories260K: every bad value exits 2 naming its flag before the
// model loads; each policy holds its budget exactly (the tokens evicted are the tokens computed
// minus the budget) and reports it in `generate --json`; a budget the sequence never reaches
// changes no token; `eval ppl` reports the policy, the budget and the tokens evicted, and holds
// the budget during the window; with --kv-recall both report the tokens recalled.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kModel = shared_path("models/stories260K.gguf");
const std::string kText = std::string(STRATA_SOURCE_DIR) + "/tests/data/stories260K-t1.txt";

struct BadFlag {
  std::vector<std::string> args;
  std::string message;
};

TEST(KvEvictCli, BadValuesExitTwoNamingTheirFlag) {
  const std::vector<BadFlag> cases = {
      {{"--kv-evict", "lru"}, "--kv-evict 'lru' is not one of none, window, h2o, snapkv"},
      {{"--kv-evict", "H2O", "--kv-budget", "64"}, "--kv-evict 'H2O'"},
      {{"--kv-evict", "h2o"}, "--kv-evict h2o needs --kv-budget N"},
      {{"--kv-budget", "64"}, "--kv-budget needs an eviction policy"},
      {{"--kv-evict", "window", "--kv-budget", "-3"}, "--kv-budget must be >= 0"},
      {{"--kv-evict", "window", "--kv-budget", "4"}, "--kv-budget (4) must be larger than --kv-sinks (4)"},
      {{"--kv-evict", "h2o", "--kv-budget", "16", "--kv-recent", "12"}, "--kv-sinks + --kv-recent"},
      {{"--kv-evict", "h2o", "--kv-budget", "16", "--kv-sinks", "-1"}, "--kv-sinks must be >= 0"},
      {{"--kv-evict", "snapkv", "--kv-budget", "16", "--kv-recent", "-2"}, "--kv-recent must be >= 0"},
      {{"--kv-evict", "h2o", "--kv-budget", "many"}, "--kv-budget"},
      {{"--kv-recall"}, "--kv-recall needs an eviction policy"},
      {{"--kv-budget", "auto"}, "--kv-budget auto needs an eviction policy"},
      {{"--kv-evict", "h2o", "--kv-budget", "64", "--kv-recall", "--kv-recall-choice", "lru"},
       "--kv-recall-choice 'lru' is not one of quest, recent"},
      {{"--kv-evict", "h2o", "--kv-budget", "12x"}, "--kv-budget must be a number of tokens or auto, got '12x'"},
      {{"--kv-evict", "h2o", "--kv-budget", "Auto"}, "--kv-budget must be a number of tokens or auto, got 'Auto'"},
      {{"--kv-evict", "h2o", "--kv-budget", "auto", "--kv-budget-floor", "0"}, "--kv-budget-floor must be >= 1, got 0"},
      {{"--kv-evict", "h2o", "--kv-budget", "64", "--kv-recall", "--kv-recall-blocks", "0"},
       "--kv-recall-blocks must be >= 1, got 0"},
      {{"--kv-evict", "h2o", "--kv-budget", "64", "--kv-recall", "--kv-recall-blocks", "x"}, "--kv-recall-blocks"},
  };
  const std::vector<std::vector<std::string>> commands = {
      {"generate", "-p", "Once", "-n", "1"}, {"serve", "--port", "0"}, {"eval", "ppl", "--file", kText}};
  for (const auto& cmd : commands) {
    for (const auto& c : cases) {
      std::vector<std::string> argv = {strata_bin()};
      argv.insert(argv.end(), cmd.begin(), cmd.end());
      for (const char* a : {"--model", "/nonexistent.gguf", "-t", "1"}) argv.emplace_back(a);
      argv.insert(argv.end(), c.args.begin(), c.args.end());
      std::string joined = cmd[0];
      for (const auto& a : c.args) joined += " " + a;
      SCOPED_TRACE(joined);
      auto r = run_command(argv, 60);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << r.err;
      EXPECT_EQ(r.err.find("/nonexistent.gguf"), std::string::npos) << "the flag is checked before the model: " << r.err;
    }
  }
}

Json generate(const std::string& prompt, int n, std::vector<std::string> extra) {
  std::vector<std::string> argv = {strata_bin(), "generate", "--model", kModel, "-t", "1", "-p", prompt,
                                   "-n", std::to_string(n), "--temperature", "0", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run_command(argv, 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return Json();
  return Json::parse(r.out);
}

TEST(KvEvictCli, EveryPolicyHoldsItsBudgetAndReportsIt) {
  const auto ref = test::greedy_references()[0];
  const int n = 160, budget = 48;
  for (const char* policy : {"window", "h2o", "snapkv"}) {
    SCOPED_TRACE(policy);
    const Json j = generate(ref.prompt, n, {"--kv-evict", policy, "--kv-budget", std::to_string(budget)});
    ASSERT_TRUE(j.contains("kv")) << j.dump();
    EXPECT_EQ(j["tokens"].size(), static_cast<size_t>(n));
    EXPECT_EQ(j["kv"]["evict"], policy);
    EXPECT_EQ(j["kv"]["budget"], budget);
    // Every computed token (the prompt and all generated but the last) beyond the budget.
    const auto computed = static_cast<int64_t>(j["prompt_tokens"].size()) + n - 1;
    EXPECT_EQ(j["kv"]["evicted_tokens"].get<int64_t>(), computed - budget);
    EXPECT_GT(j["kv"]["compacted_tokens"].get<int64_t>(), 0);
    // The first tokens are generated before the budget is reached: the reference's.
    const auto tokens = j["tokens"].get<std::vector<int>>();
    const int before = budget - static_cast<int>(j["prompt_tokens"].size());
    EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.begin() + before),
              std::vector<int>(ref.tokens.begin(), ref.tokens.begin() + before));
  }
}

TEST(KvEvictCli, ABudgetNeverReachedChangesNoToken) {
  for (const auto& ref : test::greedy_references()) {
    const int n = static_cast<int>(ref.tokens.size());
    for (const char* policy : {"h2o", "snapkv", "window"}) {
      SCOPED_TRACE(policy);
      const Json j = generate(ref.prompt, n, {"--kv-evict", policy, "--kv-budget", "400"});
      EXPECT_EQ(j["tokens"].get<std::vector<int>>(), ref.tokens);
      EXPECT_EQ(j["kv"]["evicted_tokens"], 0);
    }
  }
}

TEST(KvEvictCli, LongerThanTheContextWithABudget) {
  // stories260K's context is 512 tokens: with a policy a sequence may go past it.
  const Json j = generate("Once upon a time", 700, {"--kv-evict", "h2o", "--kv-budget", "128"});
  EXPECT_EQ(j["tokens"].size(), 700u);
  // A block of 16 tokens: f16 K and V, 5 layers, 4 kv heads of 8 dims. The budget is 8 blocks; the
  // next token's block may be held too. Without a policy the 705 tokens would hold 45.
  const double block = 16.0 * 5 * 2 * 4 * 8 * 2;
  EXPECT_GE(j["kv"]["held_bytes_peak"].get<double>(), 8 * block);
  EXPECT_LE(j["kv"]["held_bytes_peak"].get<double>(), 9 * block);
}

TEST(KvEvictCli, ProgressLinesShowTheKvHeldFlatUnderABudget) {
  auto r = run_command({strata_bin(), "generate", "--model", kModel, "-t", "1", "-p", "Once upon a time", "-n", "1000",
                        "--temperature", "0", "--json", "--kv-evict", "h2o", "--kv-budget", "128", "--progress", "200"},
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  std::vector<long> tokens;
  std::vector<double> held;
  for (size_t at = r.err.find("progress: "); at != std::string::npos; at = r.err.find("progress: ", at + 1)) {
    long n = 0;
    double rate = 0, bytes = 0;
    int every = 0;
    ASSERT_EQ(std::sscanf(r.err.c_str() + at, "progress: %ld tokens, %lf tok/s over the last %d, KV held %lf bytes", &n,
                          &rate, &every, &bytes),
              4)
        << r.err;
    EXPECT_EQ(every, 200);
    EXPECT_GT(rate, 0);
    tokens.push_back(n);
    held.push_back(bytes);
  }
  EXPECT_EQ(tokens, (std::vector<long>{200, 400, 600, 800, 1000}));
  ASSERT_EQ(held.size(), 5u);
  // Past the budget (128 tokens = 8 blocks) the sequence holds the same blocks at every line.
  const double block = 16.0 * 5 * 2 * 4 * 8 * 2;
  EXPECT_EQ(held[1], held[2]);
  EXPECT_GE(held[1], 8 * block);
  EXPECT_LE(held[1], j["kv"]["held_bytes_peak"].get<double>());

  auto bad = run_command({strata_bin(), "generate", "--model", "/nonexistent.gguf", "-p", "x", "--progress", "-1"}, 60);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--progress must be >= 0"), std::string::npos) << bad.err;
}

TEST(KvEvictCli, EvalReportsThePolicyAndHoldsTheBudget) {
  for (const char* policy : {"window", "h2o", "snapkv"}) {
    SCOPED_TRACE(policy);
    auto r = run_command({strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json", "--ctx",
                          "192", "--chunk", "1", "--prompt", "96", "--kv-evict", policy, "--kv-budget", "64"},
                         180);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["kv_evict"], policy);
    EXPECT_EQ(j["kv_budget"], 64);
    EXPECT_EQ(j["prompt"], 96);
    // After each step the window holds the budget, no more; snapkv keeps the prompt whole until
    // the step that computes its last token (the 95 tokens before it are held then).
    EXPECT_EQ(j["max_held_tokens"], std::string(policy) == "snapkv" ? 95 : 64);
    EXPECT_GT(j["tokens_evicted"].get<int64_t>(), 0);
    EXPECT_GT(j["delta_ppl_pct"].get<double>(), 0.0) << "evicting context costs some perplexity";
    EXPECT_LT(j["top1_agreement"].get<double>(), 1.0);
    EXPECT_GT(j["kl_divergence_mean"].get<double>(), 1e-4);
  }
  // The reference of the same run (no policy) is the full cache: nothing evicted.
  auto r = run_command({strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json", "--ctx", "192",
                        "--chunk", "1", "--prompt", "96"},
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["kv_evict"], "none");
  EXPECT_EQ(j["tokens_evicted"], 0);
  EXPECT_DOUBLE_EQ(j["delta_ppl_pct"].get<double>(), 0.0);
  EXPECT_NEAR(j["kl_divergence_mean"].get<double>(), 0.0, 1e-6);
}

TEST(KvEvictCli, RecallFlagsHaveHelpAndReportRecalledTokens) {
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"generate"}, {"serve"}, {"eval", "ppl"}}) {
    std::vector<std::string> argv = {strata_bin()};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    argv.emplace_back("--help");
    auto r = run_command(argv, 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("--kv-recall "), std::string::npos) << cmd[0];
    EXPECT_NE(r.out.find("demote evicted tokens"), std::string::npos) << cmd[0];
    EXPECT_NE(r.out.find("--kv-recall-blocks"), std::string::npos) << cmd[0];
    EXPECT_NE(r.out.find("or auto: an elastic budget"), std::string::npos) << cmd[0];
    EXPECT_NE(r.out.find("--kv-budget-floor"), std::string::npos) << cmd[0];
  }
  const Json j = generate("Once upon a time", 300, {"--kv-evict", "h2o", "--kv-budget", "64", "--kv-recall"});
  ASSERT_TRUE(j.contains("kv")) << j.dump();
  EXPECT_EQ(j["kv"]["recall"], true);
  const auto recalled = j["kv"]["recalled_tokens"].get<int64_t>();
  EXPECT_GT(recalled, 0);
  EXPECT_EQ(recalled % 16, 0) << "whole blocks";
  const auto computed = static_cast<int64_t>(j["prompt_tokens"].size()) + 300 - 1;
  EXPECT_EQ(j["kv"]["evicted_tokens"].get<int64_t>(), computed - 64) << "recall keeps the budget";
  const Json plain = generate("Once upon a time", 300, {"--kv-evict", "h2o", "--kv-budget", "64"});
  EXPECT_EQ(plain["kv"]["recall"], false);
  EXPECT_EQ(plain["kv"]["recalled_tokens"], 0);

  auto r = run_command({strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json", "--ctx", "192",
                        "--chunk", "1", "--kv-evict", "h2o", "--kv-budget", "64", "--kv-recall", "--kv-recall-blocks", "2"},
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json e = Json::parse(r.out);
  EXPECT_EQ(e["kv_recall"], true);
  EXPECT_EQ(e["kv_recall_blocks"], 2);
  EXPECT_GT(e["tokens_recalled"].get<int64_t>(), 0);
  EXPECT_EQ(e["max_held_tokens"], 64) << "recalled blocks are attended, not held in the sequence";
  EXPECT_GT(e["recall_bytes"].get<int64_t>(), 0);
  // Recall brings the run closer to the full cache than h2o alone, here by KL.
  auto h = run_command({strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json", "--ctx", "192",
                        "--chunk", "1", "--kv-evict", "h2o", "--kv-budget", "64"},
                       180);
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_LT(e["kl_divergence_mean"].get<double>(), Json::parse(h.out)["kl_divergence_mean"].get<double>());
}

}  // namespace
}  // namespace strata
