// `strata bench serve` (the real binary) spreading its load over two running `strata serve`
// processes on stories260K: --route conversation keeps every turn of a conversation on one server
// and the per-server counts of the JSON report add up to the totals and match what each server's
// /metrics counted; round-robin from a comma-separated list splits requests evenly with /health
// probed on each server; bad URL lists and routes are usage errors (exit 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using nlohmann::json;

// Generation requests a server has counted so far, over every outcome.
double requests_counted(test::ServerProcess& s) {
  double n = 0;
  for (const auto& [series, value] : test::metrics(s)) {
    if (series.rfind("strata_requests_total{", 0) == 0) n += value;
  }
  return n;
}

class BenchServeMulti : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (auto*& s : servers_) {
      s = new test::ServerProcess;
      if (!s->running()) start_error_ += "strata serve did not start:\n" + s->log();
    }
  }
  static void TearDownTestSuite() {
    for (auto*& s : servers_) {
      delete s;
      s = nullptr;
    }
  }
  void SetUp() override {
    ASSERT_TRUE(start_error_.empty()) << start_error_;
    dir_ = test::make_temp_dir("strata-bench-multi");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `strata bench serve` with `args` and returns its --json-out object.
  json bench(const std::vector<std::string>& args) {
    const std::string out = dir_ + "/result.json";
    std::vector<std::string> argv = {test::strata_bin(), "bench", "serve", "--json-out", out, "--seed", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    last_ = test::run_command(argv, 300.0);
    EXPECT_EQ(last_.exit_code, 0) << last_.out << last_.err << servers_[0]->log() << servers_[1]->log();
    return json::parse(test::read_file(out));
  }

  static test::ServerProcess* servers_[2];
  static std::string start_error_;
  std::string dir_;
  test::CommandResult last_;
};

test::ServerProcess* BenchServeMulti::servers_[2] = {nullptr, nullptr};
std::string BenchServeMulti::start_error_;

TEST_F(BenchServeMulti, ConversationRouteKeepsEachConversationOnOneServer) {
  test::ServerProcess& a = *servers_[0];
  test::ServerProcess& b = *servers_[1];
  const double before[2] = {requests_counted(a), requests_counted(b)};
  // 24 conversations of 2 turns: each lands on either server, so both get some but for a chance
  // of 2^-23 (the hash of a fixed seed's prompts: in practice always the same split).
  const json j = bench({"--base-url", a.url(), "--base-url", b.url(), "--route", "conversation", "--endpoint", "chat",
                        "--dataset", "multi-turn", "--turns", "2", "--num-prompts", "48", "--input-len", "16", "--output-len",
                        "4", "--max-concurrency", "8"});
  EXPECT_EQ(j["completed"], 48) << j.dump(2);
  EXPECT_EQ(j["failed"], 0) << j.dump(2);
  EXPECT_EQ(j["route"], "conversation");
  EXPECT_EQ(j["base_urls"], json({a.url(), b.url()}));
  EXPECT_EQ(j["base_url"], a.url() + "," + b.url());
  ASSERT_EQ(j["servers"].size(), 2u) << j.dump(2);

  int64_t requests = 0, completed = 0, failed = 0, conversations = 0;
  double hit_tokens = 0, queried_tokens = 0;
  for (size_t i = 0; i < 2; ++i) {
    const json& s = j["servers"][i];
    EXPECT_EQ(s["base_url"], (i == 0 ? a : b).url());
    EXPECT_GT(s["requests"].get<int64_t>(), 0) << "both servers get conversations: " << j.dump(2);
    // Every conversation here has both its turns: a server that saw a conversation saw all of it.
    EXPECT_EQ(s["requests"].get<int64_t>(), 2 * s["conversations"].get<int64_t>()) << s.dump(2);
    EXPECT_TRUE(s["ttft_ms"]["median"].is_number());
    EXPECT_GT(s["ttft_ms"]["p99"].get<double>(), 0);
    EXPECT_GT(s["request_throughput"].get<double>(), 0);
    requests += s["requests"].get<int64_t>();
    completed += s["completed"].get<int64_t>();
    failed += s["failed"].get<int64_t>();
    conversations += s["conversations"].get<int64_t>();
    ASSERT_TRUE(s["prefix_queried_tokens"].is_number()) << "strata serve exposes the prefix counters";
    hit_tokens += s["prefix_hit_tokens"].get<double>();
    queried_tokens += s["prefix_queried_tokens"].get<double>();
    // What the server itself counted is what the report says was sent there.
    EXPECT_EQ(requests_counted(i == 0 ? a : b) - before[i], s["requests"].get<double>()) << "server " << i;
  }
  EXPECT_EQ(requests, j["num_requests"].get<int64_t>());
  EXPECT_EQ(completed, j["completed"].get<int64_t>());
  EXPECT_EQ(failed, j["failed"].get<int64_t>());
  EXPECT_EQ(conversations, 24) << "no conversation is split between the servers";
  EXPECT_EQ(j["prefix_hit_tokens"].get<double>(), hit_tokens);
  EXPECT_EQ(j["prefix_queried_tokens"].get<double>(), queried_tokens);
  // A second turn resends the first with its reply: its server finds that prefix cached.
  EXPECT_GT(hit_tokens, 0) << j.dump(2);
  EXPECT_NE(last_.out.find("Server 1 of 2"), std::string::npos) << last_.out;
  EXPECT_NE(last_.out.find("Server 2 of 2"), std::string::npos) << last_.out;
}

TEST_F(BenchServeMulti, RoundRobinFromACommaSeparatedListWithHealthProbesPerServer) {
  test::ServerProcess& a = *servers_[0];
  test::ServerProcess& b = *servers_[1];
  const double before[2] = {requests_counted(a), requests_counted(b)};
  const json j = bench({"--base-url", a.url() + "," + b.url(), "--num-prompts", "10", "--input-len", "8", "--output-len", "8",
                        "--probe-health-ms", "5"});
  EXPECT_EQ(j["completed"], 10) << j.dump(2);
  EXPECT_EQ(j["route"], "round-robin");
  ASSERT_EQ(j["servers"].size(), 2u);
  int64_t probes = 0;
  for (size_t i = 0; i < 2; ++i) {
    const json& s = j["servers"][i];
    EXPECT_EQ(s["requests"], 5) << s.dump(2);
    EXPECT_EQ(s["completed"], 5) << s.dump(2);
    EXPECT_EQ(requests_counted(i == 0 ? a : b) - before[i], 5.0) << "server " << i;
    ASSERT_TRUE(s["health_probes"].is_number_integer()) << s.dump(2);
    EXPECT_GE(s["health_probes"].get<int64_t>(), 1);
    EXPECT_EQ(s["health_failures"], 0);
    probes += s["health_probes"].get<int64_t>();
  }
  EXPECT_EQ(j["health_probes"].get<int64_t>(), probes) << "the totals pool both servers' probes";
}

TEST_F(BenchServeMulti, OneServerKeepsTheReportOfBefore) {
  const json j = bench({"--base-url", servers_[0]->url(), "--num-prompts", "2", "--input-len", "8", "--output-len", "4"});
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["base_url"], servers_[0]->url());
  EXPECT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["requests"], 2);
  EXPECT_EQ(last_.out.find("Server 1 of"), std::string::npos) << last_.out;
}

TEST_F(BenchServeMulti, BadServerListsAndRoutesAreUsageErrors) {
  const std::string a = servers_[0]->url(), b = servers_[1]->url();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--base-url", a + ",," + b}, "has an empty entry"},
      {{"--base-url", a + ","}, "has an empty entry"},
      {{"--base-url", a, "--base-url", "ftp://127.0.0.1:1"}, "unsupported scheme 'ftp'"},
      {{"--base-url", "127.0.0.1:8080"}, "must start with http:// or https://"},
      {{"--base-url", a + "," + a + "/v1"}, "same server twice"},
      {{"--base-url", a, "--route", "sticky"}, "--route must be round-robin or conversation"},
      {{"--base-url", a, "--route-prefix-chars", "0"}, "--route-prefix-chars must be >= 1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {test::strata_bin(), "bench", "serve", "--num-prompts", "1"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace strata
