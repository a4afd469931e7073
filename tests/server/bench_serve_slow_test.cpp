// `strata bench serve` (the real binary) against a running `strata serve` on stories260K: every
// request of each endpoint and dataset completes, --json-out carries the documented fields, and
// the shared-prefix dataset makes the server's prefix cache hit. Also: a server that is not there
// gives failures with the first error, not a crash or a hang.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using nlohmann::json;

class BenchServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new test::ServerProcess;
    if (!server_->running()) {
      start_error_ = "strata serve did not start:\n" + server_->log();
      delete server_;
      server_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    dir_ = test::make_temp_dir("strata-bench-json");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `strata bench serve` with `args` and returns its --json-out object.
  json bench(std::vector<std::string> args, int expected_exit = 0, std::string base_url = "") {
    const std::string out = dir_ + "/result.json";
    std::vector<std::string> argv = {test::strata_bin(), "bench", "serve", "--base-url",
                                     base_url.empty() ? server_->url() : base_url, "--json-out", out, "--seed", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    last_ = test::run_command(argv, 300.0);
    EXPECT_EQ(last_.exit_code, expected_exit) << last_.out << last_.err << (server_ ? server_->log() : "");
    return json::parse(test::read_file(out));
  }

  static void expect_documented_fields(const json& j) {
    for (const char* key : {"request_throughput", "output_tok_s", "total_tok_s", "duration_s"}) {
      EXPECT_TRUE(j[key].is_number()) << key << " in " << j.dump(2);
    }
    for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
      for (const char* stat : {"mean", "median", "p99"}) EXPECT_TRUE(j[key][stat].is_number()) << key << "." << stat;
    }
    for (const char* key : {"completed", "failed", "total_input_tokens", "total_output_tokens", "num_prompts", "input_len",
                            "output_len", "seed"}) {
      EXPECT_TRUE(j[key].is_number_integer()) << key << " in " << j.dump(2);
    }
    EXPECT_TRUE(j.contains("prefix_hit_rate"));
    EXPECT_TRUE(j["model"].is_string());
    EXPECT_TRUE(j["endpoint"].is_string());
    EXPECT_TRUE(j["dataset"].is_string());
    EXPECT_TRUE(j.contains("request_rate"));
    EXPECT_TRUE(j.contains("max_concurrency"));
  }

  static void expect_all_completed(const json& j, int n) {
    EXPECT_EQ(j["completed"], n) << j.dump(2);
    EXPECT_EQ(j["failed"], 0) << j.dump(2);
    EXPECT_TRUE(j["first_error"].is_null()) << j.dump(2);
    EXPECT_GT(j["total_output_tokens"].get<int64_t>(), 0);
    EXPECT_GT(j["output_tok_s"].get<double>(), 0);
    EXPECT_GT(j["request_throughput"].get<double>(), 0);
    EXPECT_GT(j["e2e_ms"]["mean"].get<double>(), 0);
    EXPECT_EQ(j["requests_with_usage"], n) << "strata serve reports usage with include_usage";
    // strata serve exposes the prefix-cache counters, so the rate is a number, not n/a.
    EXPECT_TRUE(j["prefix_hit_rate"].is_number()) << j.dump(2);
  }

  static test::ServerProcess* server_;
  static std::string start_error_;
  std::string dir_;
  test::CommandResult last_;
};

test::ServerProcess* BenchServe::server_ = nullptr;
std::string BenchServe::start_error_;

TEST_F(BenchServe, CompletionsEndpointRandomPrompts) {
  const json j = bench({"--endpoint", "completions", "--dataset", "random", "--num-prompts", "8", "--input-len", "32",
                        "--output-len", "16"});
  expect_documented_fields(j);
  expect_all_completed(j, 8);
  EXPECT_EQ(j["endpoint"], "completions");
  EXPECT_EQ(j["model"], "stories260K") << "discovered from /v1/models";
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_LE(j["total_output_tokens"].get<int64_t>(), 8 * 16);
  EXPECT_NE(last_.out.find("Successful requests:"), std::string::npos) << last_.out;
  EXPECT_NE(last_.out.find("Mean TTFT (ms):"), std::string::npos) << last_.out;
}

// --probe-health-ms: GET /health during the run, each answer timed (count, summary, max, failures).
TEST_F(BenchServe, HealthProbesDuringTheRun) {
  const json j = bench({"--num-prompts", "16", "--input-len", "16", "--output-len", "32", "--ignore-eos", "--probe-health-ms", "5"});
  expect_all_completed(j, 16);
  EXPECT_EQ(j["probe_health_ms"], 5.0);
  ASSERT_TRUE(j["health_probes"].is_number_integer()) << j.dump(2);
  EXPECT_GE(j["health_probes"].get<int64_t>(), 1);
  EXPECT_EQ(j["health_failures"], 0);
  for (const char* stat : {"mean", "median", "p99"}) EXPECT_GT(j["health_ms"][stat].get<double>(), 0) << stat;
  EXPECT_GE(j["health_max_ms"].get<double>(), j["health_ms"]["p99"].get<double>());
  EXPECT_NE(last_.out.find("GET /health during the run"), std::string::npos) << last_.out;
  // Without the flag there is no probe section.
  const json plain = bench({"--num-prompts", "2", "--input-len", "8", "--output-len", "4"});
  EXPECT_FALSE(plain.contains("health_probes"));
  auto r = test::run_command({test::strata_bin(), "bench", "serve", "--base-url", server_->url(), "--probe-health-ms", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--probe-health-ms must be >= 0"), std::string::npos) << r.err;
}

TEST_F(BenchServe, ChatEndpointWithPoissonArrivalsAndAConcurrencyCap) {
  const json j = bench({"--endpoint", "chat", "--model", "stories260K", "--dataset", "random", "--num-prompts", "8",
                        "--input-len", "24", "--output-len", "12", "--request-rate", "50", "--max-concurrency", "3"});
  expect_documented_fields(j);
  expect_all_completed(j, 8);
  EXPECT_EQ(j["endpoint"], "chat");
  EXPECT_EQ(j["request_rate"], 50.0);
  EXPECT_EQ(j["max_concurrency"], 3);
}

TEST_F(BenchServe, SharedPrefixPromptsHitThePrefixCache) {
  // One request at a time, so that every prompt after the first finds the shared blocks cached;
  // exact token lengths through the model's own tokenizer.
  const json j = bench({"--endpoint", "completions", "--dataset", "shared-prefix", "--num-prompts", "8", "--input-len", "64",
                        "--shared-prefix-len", "48", "--output-len", "8", "--max-concurrency", "1", "--tokenizer",
                        test::shared_path("models/stories260K.gguf")});
  expect_documented_fields(j);
  expect_all_completed(j, 8);
  EXPECT_EQ(j["shared_prefix_len"], 48);
  EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0) << j.dump(2);
  EXPECT_LE(j["prefix_hit_rate"].get<double>(), 1);
  // 64 prompt tokens (plus BOS) per request, by the server's own count.
  EXPECT_EQ(j["total_input_tokens"], 8 * 65) << j.dump(2);
}

TEST_F(BenchServe, MultiTurnConversationsOnTheChatEndpoint) {
  const json j = bench({"--endpoint", "chat", "--dataset", "multi-turn", "--turns", "2", "--num-prompts", "8", "--input-len",
                        "16", "--output-len", "8"});
  expect_documented_fields(j);
  expect_all_completed(j, 8);
  EXPECT_EQ(j["turns"], 2);
  EXPECT_EQ(j["num_requests"], 8);
}

TEST_F(BenchServe, ServerNotThereMeansFailuresWithTheFirstError) {
  // Port 1 on localhost: connection refused at once.
  const json j = bench({"--model", "m", "--num-prompts", "4", "--input-len", "8", "--output-len", "4", "--timeout-s", "10"}, 1,
                       "http://127.0.0.1:1");
  EXPECT_EQ(j["completed"], 0);
  EXPECT_EQ(j["failed"], 4);
  EXPECT_TRUE(j["first_error"].is_string());
  EXPECT_TRUE(j["prefix_hit_rate"].is_null()) << "no /metrics: n/a";
  EXPECT_NE(last_.out.find("n/a"), std::string::npos) << last_.out;
}

TEST_F(BenchServe, QosMixRampMixedLengthsAndAKvTrace) {
  const std::string trace = dir_ + "/kv.csv";
  const json j = bench({"--dataset", "random", "--num-prompts", "16", "--input-len", "24", "--output-len", "8",
                        "--random-range-ratio", "0.5", "--ramp", "20:60", "--qos-mix", "interactive=1,batch=3",
                        "--kv-sample-ms", "20", "--kv-trace", trace, "--ignore-eos"});
  expect_documented_fields(j);
  expect_all_completed(j, 16);
  EXPECT_EQ(j["qos_classes"]["interactive"]["completed"], 4) << j.dump(2);
  EXPECT_EQ(j["qos_classes"]["batch"]["completed"], 12) << j.dump(2);
  for (const char* c : {"interactive", "batch"}) {
    EXPECT_GT(j["qos_classes"][c]["ttft_ms"]["p99"].get<double>(), 0) << c;
    EXPECT_GT(j["qos_classes"][c]["tpot_ms"]["p99"].get<double>(), 0) << c;
    EXPECT_GT(j["qos_classes"][c]["output_tok_s"].get<double>(), 0) << c;
  }
  // max_tokens 4..12 with --ignore-eos: every request generates exactly its own.
  EXPECT_GE(j["total_output_tokens"].get<int64_t>(), 16 * 4);
  EXPECT_LE(j["total_output_tokens"].get<int64_t>(), 16 * 12);
  EXPECT_TRUE(j["preemptions"].is_number()) << "strata serve exposes strata_preemptions_total";
  EXPECT_TRUE(j["request_rate"].is_null());
  EXPECT_EQ(j["ramp"], json({{"from", 20.0}, {"to", 60.0}}));
  EXPECT_EQ(j["qos_mix"], "interactive=1,batch=3");
  EXPECT_EQ(j["random_range_ratio"], 0.5);
  EXPECT_EQ(j["kv_trace"], trace);
  ASSERT_TRUE(j["kv_usage"].is_object()) << j.dump(2);
  EXPECT_GE(j["kv_usage"]["samples"].get<int64_t>(), 1);
  EXPECT_NE(last_.out.find("QoS class interactive"), std::string::npos) << last_.out;
  EXPECT_NE(last_.out.find("KV usage sampled from /metrics"), std::string::npos) << last_.out;
  // The CSV: its header, then one row per sample with 16 cells, time first, strata's gauges filled.
  const std::string csv = test::read_file(trace);
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line.rfind("t_s,server,kv_usage,kv_hot,kv_warm,kv_cold,running,waiting,swapped,preemptions_total,", 0), 0u) << line;
  int64_t rows = 0;
  while (std::getline(lines, line)) {
    ++rows;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 15) << line;
    EXPECT_TRUE(std::regex_search(line, std::regex("^[0-9]+\\.[0-9]{3},0,[0-9.e-]+,[0-9.e-]+,"))) << line;
  }
  EXPECT_EQ(rows, j["kv_usage"]["samples"].get<int64_t>());
}

TEST_F(BenchServe, BadFlagsAreUsageErrors) {
  const std::string out = dir_ + "/unused.json";
  auto r = test::run_command({test::strata_bin(), "bench", "serve", "--base-url", server_->url(), "--endpoint", "embeddings"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--endpoint must be completions or chat"), std::string::npos) << r.err;
  r = test::run_command({test::strata_bin(), "bench", "serve", "--base-url", server_->url(), "--request-rate", "fast"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--request-rate"), std::string::npos) << r.err;
  r = test::run_command({test::strata_bin(), "bench", "serve", "--base-url", server_->url(), "--dataset", "multi-turn"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--endpoint chat"), std::string::npos) << r.err;
  // Each new flag's own message, before anything is sent.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--qos-mix", "interactive"}, "--qos-mix"},
      {{"--qos-mix", "interactive=0"}, "--qos-mix"},
      {{"--ramp", "2"}, "--ramp"},
      {{"--ramp", "0:4"}, "--ramp"},
      {{"--ramp", "2:4", "--request-rate", "3"}, "--ramp and --request-rate"},
      {{"--random-range-ratio", "1"}, "--random-range-ratio"},
      {{"--kv-sample-ms", "-1"}, "--kv-sample-ms"},
      {{"--kv-sample-ms", "0", "--kv-trace", out}, "--kv-trace needs --kv-sample-ms"},
      {{"--kv-trace", dir_ + "/no/such/dir/kv.csv"}, "--kv-trace"},
  };
  for (const auto& [args, message] : bad) {
    std::vector<std::string> argv = {test::strata_bin(), "bench", "serve", "--base-url", server_->url(), "--num-prompts", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    r = test::run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << args.front() << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace strata
