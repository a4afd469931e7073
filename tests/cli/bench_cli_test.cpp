// Black-box tests of `strata bench model` and `strata bench offline` on stories260K: the JSON fields
// scripts read (names, types, the echo of what was asked, relations between them, the weight bytes
// against the tensor table of `strata gguf info --json`), and exit codes on bad input. Speeds are
// only checked to be positive and finite: no test asserts timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kModel = shared_path("models/stories260K.gguf");

Json run_json(std::vector<std::string> args) {
  std::vector<std::string> argv = {strata_bin(), "bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--model", kModel, "-t", "1", "--json"});
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return Json();
  return Json::parse(r.out);
}

bool positive_finite(const Json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0; }

// Bytes of the weight matrices a decode step streams: every 2-D tensor but the token embedding
// (its rows are gathered), from the file's own tensor table.
uint64_t matrix_bytes_from_info() {
  auto r = run_command({strata_bin(), "gguf", "info", "--json", kModel});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Json info = Json::parse(r.out);
  uint64_t bytes = 0;
  for (const Json& t : info["tensors"]) {
    if (t["shape"].size() == 2 && t["name"] != "token_embd.weight") bytes += t["n_bytes"].get<uint64_t>();
  }
  return bytes;
}

TEST(BenchCli, ModelReportsWhatWasAskedAndPositiveSpeeds) {
  const Json j = run_json({"model", "--pp", "32", "--tg", "8", "--batch", "3", "--reps", "2", "--no-bandwidth"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["model"], kModel);
  EXPECT_EQ(j["model_bytes"], std::filesystem::file_size(kModel));
  EXPECT_EQ(j["step_weight_bytes"], matrix_bytes_from_info());
  EXPECT_LT(j["step_weight_bytes"].get<uint64_t>(), j["model_bytes"].get<uint64_t>());
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["batch"], 3);
  EXPECT_EQ(j["pp"], 32);
  EXPECT_EQ(j["tg"], 8);
  EXPECT_EQ(j["reps"], 2);
  EXPECT_EQ(j["kv_dtype"], "f16");
  EXPECT_TRUE(positive_finite(j["pp_tok_s"])) << j;
  EXPECT_TRUE(positive_finite(j["tg_tok_s"])) << j;
  EXPECT_TRUE(j["pp_tok_s_sd"].is_number() && j["pp_tok_s_sd"].get<double>() >= 0);
  EXPECT_TRUE(j["tg_tok_s_sd"].is_number() && j["tg_tok_s_sd"].get<double>() >= 0);
  // --no-bandwidth: no bandwidth, so no share of it.
  EXPECT_EQ(j["bandwidth_gb_s"], 0.0);
  EXPECT_EQ(j["tg_bandwidth_pct"], 0.0);
  // Each decode step of the batch streams the weights once.
  EXPECT_NEAR(j["tg_weight_gb_s"].get<double>(),
              j["tg_tok_s"].get<double>() / 3 * j["step_weight_bytes"].get<double>() / 1e9,
              1e-9 * j["tg_weight_gb_s"].get<double>());
}

TEST(BenchCli, ModelWithBandwidthReportsItsShareAndSkipsWhatIsZero) {
  const Json j = run_json({"model", "--pp", "0", "--tg", "4", "--reps", "1", "--kv-dtype", "f32"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["kv_dtype"], "f32");
  EXPECT_EQ(j["pp_tok_s"], 0.0) << "--pp 0 skips prompt processing";
  EXPECT_TRUE(positive_finite(j["tg_tok_s"])) << j;
  EXPECT_TRUE(positive_finite(j["bandwidth_gb_s"])) << j;
  EXPECT_NEAR(j["tg_bandwidth_pct"].get<double>(), 100 * j["tg_weight_gb_s"].get<double>() / j["bandwidth_gb_s"].get<double>(),
              1e-9 * j["tg_bandwidth_pct"].get<double>());
  // Text output: the llama-bench-like table.
  auto r = run_command({strata_bin(), "bench", "model", "--model", kModel, "-t", "1", "--pp", "16", "--tg", "4", "--reps", "1",
                        "--no-bandwidth"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| pp16 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| tg4 |"), std::string::npos) << r.out;
}

// --bandwidth-every-rep: a probe before the repetitions and one after each; each repetition's share
// is of the mean of the two around it, and the share reported is the mean of those.
TEST(BenchCli, ModelWithBandwidthEveryRepTakesEachRepsShareOfTheProbesAroundIt) {
  const Json j = run_json({"model", "--pp", "0", "--tg", "4", "--reps", "3", "--bandwidth-every-rep"});
  ASSERT_TRUE(j.is_object());
  const auto probes = j["bandwidth_probes_gb_s"].get<std::vector<double>>();
  const auto shares = j["tg_rep_bandwidth_pct"].get<std::vector<double>>();
  ASSERT_EQ(probes.size(), 4u) << j;
  ASSERT_EQ(shares.size(), 3u) << j;
  double mean_probe = 0, mean_share = 0;
  for (double p : probes) {
    EXPECT_TRUE(p > 0 && std::isfinite(p)) << j;
    mean_probe += p / 4;
  }
  for (double s : shares) {
    EXPECT_TRUE(s > 0 && std::isfinite(s)) << j;
    mean_share += s / 3;
  }
  EXPECT_NEAR(j["bandwidth_gb_s"].get<double>(), mean_probe, 1e-9 * mean_probe);
  EXPECT_NEAR(j["tg_bandwidth_pct"].get<double>(), mean_share, 1e-9 * mean_share);
  // Repetition i streamed its tok/s times the step's weight bytes, between probes i and i + 1.
  const auto tok_s = j["tg_rep_tok_s"].get<std::vector<double>>();
  ASSERT_EQ(tok_s.size(), 3u) << j;
  const double step_bytes = j["step_weight_bytes"].get<double>();
  for (size_t i = 0; i < 3; ++i) {
    const double expect = 100 * tok_s[i] * step_bytes / 1e9 / ((probes[i] + probes[i + 1]) / 2);
    EXPECT_NEAR(shares[i], expect, 1e-9 * expect) << i << " " << j;
  }
  // Text: the probes' range is shown.
  auto r = run_command({strata_bin(), "bench", "model", "--model", kModel, "-t", "1", "--pp", "0", "--tg", "2", "--reps", "2",
                        "--bandwidth-every-rep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("the mean of 3 probes"), std::string::npos) << r.out;
  // With --no-bandwidth it is a contradiction, named.
  r = run_command({strata_bin(), "bench", "model", "--model", kModel, "--tg", "2", "--no-bandwidth", "--bandwidth-every-rep"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--bandwidth-every-rep"), std::string::npos) << r.err;
}

TEST(BenchCli, OfflineCountsEveryTokenAndBatchesTheRequests) {
  const Json j = run_json({"offline", "--num-prompts", "6", "--input-len", "24", "--output-len", "10", "--seed", "3"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["model"], kModel);
  EXPECT_EQ(j["num_prompts"], 6);
  EXPECT_EQ(j["input_len"], 24);
  EXPECT_EQ(j["output_len"], 10);
  EXPECT_EQ(j["shared_prefix"], 0);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["prompt_tokens"], 6 * 24);
  EXPECT_EQ(j["output_tokens"], 6 * 10);
  for (const char* k : {"duration_s", "request_throughput", "output_tok_s", "total_tok_s"}) EXPECT_TRUE(positive_finite(j[k])) << k;
  EXPECT_NEAR(j["output_tok_s"].get<double>(), 60 / j["duration_s"].get<double>(), 1e-9 * j["output_tok_s"].get<double>());
  EXPECT_NEAR(j["total_tok_s"].get<double>(), (60 + 144) / j["duration_s"].get<double>(), 1e-9 * j["total_tok_s"].get<double>());
  for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms"}) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(j[k].is_object());
    for (const char* s : {"mean", "p50", "p99"}) EXPECT_TRUE(positive_finite(j[k][s])) << s;
    EXPECT_LE(j[k]["p50"].get<double>(), j[k]["p99"].get<double>());
  }
  EXPECT_GE(j["e2e_ms"]["mean"].get<double>(), j["ttft_ms"]["mean"].get<double>());
  EXPECT_EQ(j["preemptions"], 0);
  EXPECT_EQ(j["prefix_hit_rate"], 0.0) << "random prompts share no block";
  EXPECT_GT(j["kv_peak_usage"].get<double>(), 0.0);
  EXPECT_LE(j["kv_peak_usage"].get<double>(), 1.0);
  // All submitted at once: they ran together, so there were far fewer steps than generated
  // tokens (one step makes at most one token per sequence; one at a time would take 60 steps).
  // The report may be read before the step that finished the last request is counted.
  EXPECT_GE(j["steps"].get<int>(), 9);
  EXPECT_LE(j["steps"].get<int>(), 30);
  // Six requests at once in a pool that holds them all: some step ran at least two together, none
  // more than six.
  EXPECT_GE(j["max_batch_seqs"].get<int>(), 2);
  EXPECT_LE(j["max_batch_seqs"].get<int>(), 6);

  // The batch limits when no flag sets them: the CPU's (a GPU takes more, common_flags.h); a flag wins.
  {
    auto r = run_command({strata_bin(), "bench", "offline", "--num-prompts", "2", "--input-len", "8", "--output-len", "2",
                          "--model", kModel, "-t", "1", "--device", "cpu", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("scheduler: --max-seqs 64, --max-batched-tokens 512"), std::string::npos) << r.err;
    r = run_command({strata_bin(), "bench", "offline", "--num-prompts", "2", "--input-len", "8", "--output-len", "2",
                     "--model", kModel, "-t", "1", "--max-seqs", "7", "--max-batched-tokens", "99", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("scheduler: --max-seqs 7, --max-batched-tokens 99"), std::string::npos) << r.err;
  }

  // One sequence at a time: a step per generated token (the report may be read before the last
  // step is counted: the step that finishes the last request).
  const Json one = run_json({"offline", "--num-prompts", "3", "--input-len", "24", "--output-len", "10", "--max-seqs", "1"});
  ASSERT_TRUE(one.is_object());
  EXPECT_EQ(one["output_tokens"], 30);
  EXPECT_GE(one["steps"].get<int>(), 29);
}

TEST(BenchCli, OfflineSharedPrefixHitsTheCacheAndPoolPressurePreempts) {
  // One at a time, so that each prompt finds the previous ones' shared blocks committed.
  const Json hit = run_json({"offline", "--num-prompts", "4", "--input-len", "48", "--output-len", "4", "--shared-prefix", "32",
                             "--max-seqs", "1"});
  ASSERT_TRUE(hit.is_object());
  EXPECT_EQ(hit["shared_prefix"], 32);
  EXPECT_GT(hit["prefix_hit_rate"].get<double>(), 0.0);
  EXPECT_LT(hit["prefix_hit_rate"].get<double>(), 1.0);
  const Json off = run_json({"offline", "--num-prompts", "4", "--input-len", "48", "--output-len", "4", "--shared-prefix", "32",
                             "--max-seqs", "1", "--no-prefix-cache"});
  ASSERT_TRUE(off.is_object());
  EXPECT_EQ(off["prefix_hit_rate"], 0.0);
  // A pool of 12 blocks of 16 tokens for 4 sequences of 64 + 100 tokens at once: some must give
  // their blocks up, and every token is still produced.
  const Json tight = run_json({"offline", "--num-prompts", "4", "--input-len", "64", "--output-len", "100", "--kv-blocks", "16",
                               "--kv-watermark", "0"});
  ASSERT_TRUE(tight.is_object());
  EXPECT_EQ(tight["output_tokens"], 400);
  EXPECT_GT(tight["preemptions"].get<int>(), 0);
  EXPECT_DOUBLE_EQ(tight["kv_peak_usage"].get<double>(), 1.0);
}

// --kv-offload: one sequence of 64 + 300 tokens in a pool of 8 blocks of 16 tokens (128 tokens)
// runs to its end with its oldest blocks in host slots, without preemption; the JSON counts what
// attention read from them. Without the flag the same request is clipped to the pool.
TEST(BenchCli, OfflineKvOffloadRunsASequenceLongerThanThePool) {
  const Json j = run_json({"offline", "--num-prompts", "1", "--input-len", "64", "--output-len", "300", "--kv-blocks", "8",
                           "--kv-host-memory", "4MiB", "--kv-offload"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["output_tokens"], 300);
  EXPECT_EQ(j["preemptions"], 0);
  ASSERT_TRUE(j["kv_offload"].is_object());
  // 364 tokens = 23 blocks, at most 8 hot: at least 15 went to host slots.
  EXPECT_GE(j["kv_offload"]["offloaded_blocks"].get<int>(), 15);
  EXPECT_GT(j["kv_offload"]["host_attended_blocks"].get<int64_t>(), 0);
  EXPECT_GT(j["kv_offload"]["host_attended_bytes"].get<int64_t>(), 0);
  const Json clipped = run_json({"offline", "--num-prompts", "1", "--input-len", "64", "--output-len", "300", "--kv-blocks", "8"});
  ASSERT_TRUE(clipped.is_object());
  EXPECT_LE(clipped["output_tokens"].get<int>(), 128 - 64);
  EXPECT_FALSE(clipped.contains("kv_offload"));
}

// bench model --depth: generation starting deep in a context; with --kv-offload the blocks beyond
// the pool are host slots that every step reads (stories260K: 5 layers x 4 KV heads x 8 x K,V x
// f16 = 640 bytes per token, 10 KiB per block). A pool of 16 blocks, a depth of 1000 tokens (63
// blocks, the last partial): at least 63 - 16 in host slots.
TEST(BenchCli, ModelDepthWithKvOffloadReadsTheOldBlocksFromHostSlots) {
  const Json j = run_json({"model", "--pp", "0", "--tg", "8", "--reps", "1", "--no-bandwidth", "--depth", "1000", "--kv-blocks",
                           "16", "--kv-host-memory", "4MiB", "--kv-offload"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["depth"], 1000);
  EXPECT_TRUE(positive_finite(j["tg_tok_s"]));
  EXPECT_GE(j["tg_host_blocks"].get<int>(), 63 - 16);
  EXPECT_LT(j["tg_host_blocks"].get<int>(), 63);
  EXPECT_EQ(j["tg_host_bytes_per_step"].get<uint64_t>(), j["tg_host_blocks"].get<uint64_t>() * 10240);
  // Without a host tier the depth must fit the pool: exit 2, naming the flags.
  auto r = test::run_command({strata_bin(), "bench", "model", "--model", kModel, "-t", "1", "--pp", "0", "--tg", "8",
                              "--depth", "1000", "--kv-blocks", "16", "--no-bandwidth"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--kv-offload"), std::string::npos) << r.err;
}

TEST(BenchCli, OfflineDatasetAndRequestRate) {
  const std::string dir = test::make_temp_dir("strata-bench");
  const std::string path = dir + "/data.jsonl";
  test::write_file(path, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 7}\n{\"prompt\": \"The little dog\"}\n\n"
                         "{\"prompt\": \"Lily and Tom\", \"max_tokens\": 3}\n");
  const Json j = run_json({"offline", "--dataset", path, "--output-len", "5", "--request-rate", "200"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["num_prompts"], 3);
  EXPECT_EQ(j["request_rate"], "200");
  EXPECT_EQ(j["output_tokens"], 7 + 5 + 3);
  // Prompt tokens as `strata tokenize` counts them (with BOS).
  int64_t prompt_tokens = 0;
  for (const char* p : {"Once upon a time", "The little dog", "Lily and Tom"}) {
    auto r = run_command({strata_bin(), "tokenize", "--model", kModel, "--text", p, "--add-special", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    prompt_tokens += Json::parse(r.out)["n_tokens"].get<int64_t>();
  }
  EXPECT_EQ(j["prompt_tokens"], prompt_tokens);
  // --num-prompts caps the dataset.
  const Json two = run_json({"offline", "--dataset", path, "--num-prompts", "2"});
  ASSERT_TRUE(two.is_object());
  EXPECT_EQ(two["num_prompts"], 2);
  std::filesystem::remove_all(dir);
}

TEST(BenchCli, BadInputExitsTwoWithAMessage) {
  const std::string dir = test::make_temp_dir("strata-bench");
  test::write_file(dir + "/bad.jsonl", "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n");
  test::write_file(dir + "/empty.jsonl", "\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"model", "--pp", "-1"}, "--pp must be >= 0"},
      {{"model", "--tg", "-4"}, "--tg must be >= 0"},
      {{"model", "--pp", "0", "--tg", "0"}, "--pp and --tg are both 0"},
      {{"model", "--batch", "0"}, "--batch must be >= 1"},
      {{"model", "--reps", "0"}, "--reps must be >= 1"},
      {{"model", "--kv-dtype", "f8"}, "--kv-dtype 'f8'"},
      {{"model", "--pp", "many"}, "--pp"},
      // Flags of the engine's tiers and policies, which bench model's hot-block forward pass would ignore.
      {{"model", "--kv-warm-dtype", "int8"}, "--kv-warm-dtype: bench model times the forward pass over hot KV blocks only"},
      {{"model", "--kv-spill-dir", dir, "--kv-spill-size", "64MiB"}, "--kv-spill-dir: bench model times"},
      {{"model", "--kv-remote", "redis://127.0.0.1:1"}, "--kv-remote: bench model times"},
      {{"model", "--kv-evict", "h2o", "--kv-budget", "64"}, "--kv-evict: bench model times"},
      {{"offline", "--num-prompts", "0"}, "--num-prompts must be >= 1"},
      {{"offline", "--input-len", "0"}, "--input-len must be >= 1"},
      {{"offline", "--output-len", "-2"}, "--output-len must be >= 1"},
      {{"offline", "--input-len", "16", "--shared-prefix", "16"}, "--shared-prefix must be in [0, --input-len 16)"},
      {{"offline", "--shared-prefix", "-1"}, "--shared-prefix must be in"},
      {{"offline", "--request-rate", "fast"}, "--request-rate must be a positive number or 'inf', got 'fast'"},
      {{"offline", "--request-rate", "0"}, "--request-rate must be a positive number or 'inf', got '0'"},
      {{"offline", "--dataset", "/nonexistent.jsonl"}, "cannot read '/nonexistent.jsonl'"},
      {{"offline", "--dataset", dir + "/bad.jsonl"}, dir + "/bad.jsonl:2: needs a string 'prompt'"},
      {{"offline", "--dataset", dir + "/empty.jsonl"}, "holds no prompts"},
      {{"offline", "--max-seqs", "0"}, "--max-seqs"},
      {{"offline", "--scheduling", "lottery"}, "--scheduling 'lottery'"},
      {{"offline", "--model", "/nonexistent.gguf"}, "cannot open '/nonexistent.gguf'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {strata_bin(), "bench"};
    argv.push_back(c.args[0]);
    if (std::find(c.args.begin(), c.args.end(), "--model") == c.args.end()) argv.insert(argv.end(), {"--model", kModel});
    argv.insert(argv.end(), {"-t", "1"});
    if (c.args[0] == "model") argv.push_back("--no-bandwidth");
    argv.insert(argv.end(), c.args.begin() + 1, c.args.end());
    SCOPED_TRACE(c.message);
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
