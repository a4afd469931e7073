// Black-box tests of what the engine does under the server: concurrent requests really share
// engine steps (proved on /metrics: more tokens generated than steps taken, which no sequential
// execution can do, since a step makes at most one token per sequence) and still give the
// sequential text; the KV configurations users pick (f16, bf16, f32 hot blocks, the int8 warm
// tier with a small hot window) give the llama.cpp greedy references of stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

using test::metrics;

// /metrics once the engine is idle and its last step is counted (stats are published after it).
std::map<std::string, double> idle_metrics(ServerProcess& s) {
  auto m = metrics(s);
  for (int i = 0; i < 2000; ++i) {
    auto again = metrics(s);
    if (again["strata_requests_running"] == 0 && again["strata_requests_waiting"] == 0 &&
        again["strata_engine_steps_total"] == m["strata_engine_steps_total"]) {
      return again;
    }
    m = again;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "the engine did not become idle";
  return m;
}

std::string complete(ServerProcess& s, const std::string& prompt, int max_tokens, bool stream = false) {
  const Json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}};
  auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) return "<failed>";
  if (!stream) return Json::parse(r->body)["choices"][0]["text"];
  std::string text;
  for (const Json& ch : test::parse_sse(r->body).chunks) text += ch["choices"][0]["text"].get<std::string>();
  return text;
}

TEST(ServerBatching, ConcurrentRequestsShareStepsAndGiveTheSequentialText) {
  // A burst waits up to 2 s for the batch to fill: the 8 requests below are sent at once, so
  // they start together (if one came late it would still join the running batch).
  ServerProcess::Options o;
  o.args = {"--max-seqs", "8", "--batch-wait-ms", "2000"};
  ServerProcess s(o);
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Tom went to the park",
                                            "The cat sat", "Tom had a red", "One day", "Anna liked", "The bird"};
  constexpr int kTokens = 64;
  // The sequential texts: `strata generate` one sequence at a time.
  const std::string dir = test::make_temp_dir("strata-batching");
  std::string file;
  for (const auto& p : prompts) file += Json{{"prompt", p}, {"max_tokens", kTokens}, {"ignore_eos", true}}.dump() + "\n";
  test::write_file(dir + "/prompts.jsonl", file);
  auto g = test::run_command({test::strata_bin(), "generate", "--model", test::shared_path("models/stories260K.gguf"), "-t", "1",
                              "--temperature", "0", "--max-seqs", "1", "--json", "--prompts-file", dir + "/prompts.jsonl"});
  std::filesystem::remove_all(dir);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  std::vector<std::string> sequential;
  std::istringstream lines(g.out);
  for (std::string line; std::getline(lines, line);) sequential.push_back(Json::parse(line)["text"]);
  ASSERT_EQ(sequential.size(), prompts.size());

  const auto before = idle_metrics(s);
  std::vector<std::string> concurrent(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { concurrent[i] = complete(s, prompts[i], kTokens, i % 2 == 0); });
  }
  for (auto& t : threads) t.join();
  const auto after = idle_metrics(s);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(concurrent[i], sequential[i]) << prompts[i];
  const double steps = after.at("strata_engine_steps_total") - before.at("strata_engine_steps_total");
  const double tokens = after.at("strata_generation_tokens_total") - before.at("strata_generation_tokens_total");
  EXPECT_EQ(tokens, 8 * kTokens);
  EXPECT_GT(steps, 0);
  // Batched: more tokens than steps means some step carried several sequences; all 8 together
  // would take kTokens steps.
  EXPECT_LT(steps, tokens / 2) << steps << " steps for " << tokens << " tokens";
  EXPECT_GE(steps, kTokens);
}

// Greedy completions of the reference prompts; `exact_tokens` of each must equal the reference.
void expect_references(ServerProcess& s, size_t exact_tokens) {
  for (const auto& ref : test::greedy_references()) {
    SCOPED_TRACE(ref.prompt);
    const Json body = {{"prompt", ref.prompt}, {"max_tokens", ref.tokens.size()}, {"temperature", 0}, {"logprobs", 0}};
    auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const Json j = Json::parse(r->body);
    const Json& lp = j["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ref.tokens.size());
    // The text of the first exact_tokens tokens equals the reference's.
    size_t chars = 0;
    for (size_t i = 0; i < exact_tokens; ++i) chars += lp["tokens"][i].get<std::string>().size();
    const std::string text = j["choices"][0]["text"];
    EXPECT_EQ(text.substr(0, chars), ref.content.substr(0, chars));
    if (exact_tokens == ref.tokens.size()) {
      EXPECT_EQ(text, ref.content);
    }
  }
}

ServerProcess::Options kv_options(std::vector<std::string> args) {
  ServerProcess::Options o;
  o.args = std::move(args);
  return o;
}

// Hot blocks in the pool (/metrics), and the bytes of one block of `elt`-byte elements from the
// model's own metadata: the pool of --kv-memory must be made of blocks of the dtype asked for.
double hot_blocks(ServerProcess& s) {
  const auto m = idle_metrics(s);
  return m.at("strata_kv_blocks_free{tier=\"hot\"}") + m.at("strata_kv_blocks_used{tier=\"hot\"}") +
         m.at("strata_kv_blocks_cached{tier=\"hot\"}");
}
double block_bytes(int elt) {
  auto r = test::run_command({test::strata_bin(), "gguf", "info", "--json", test::shared_path("models/stories260K.gguf")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Json m = Json::parse(r.out)["metadata"];
  const double n_head = m["llama.attention.head_count"].get<double>();
  const double head_dim = m["llama.embedding_length"].get<double>() / n_head;
  return 16.0 * 2 * m["llama.block_count"].get<double>() * m["llama.attention.head_count_kv"].get<double>() * head_dim * elt;
}
constexpr double kPoolBytes = 64.0 * 1024 * 1024;  // ServerProcess::default_args' --kv-memory

TEST(ServerKv, F16HotBlocksGiveTheReferences) {
  ServerProcess s(kv_options({"--kv-dtype", "f16"}));
  expect_references(s, 64);
  EXPECT_EQ(hot_blocks(s), std::floor(kPoolBytes / block_bytes(2)));
}

TEST(ServerKv, F32AndBf16HotBlocksGiveTheReferences) {
  {
    ServerProcess s(kv_options({"--kv-dtype", "f32"}));
    expect_references(s, 64);
    EXPECT_EQ(hot_blocks(s), std::floor(kPoolBytes / block_bytes(4)));
  }
  ServerProcess s(kv_options({"--kv-dtype", "bf16"}));
  expect_references(s, 64);
  EXPECT_EQ(hot_blocks(s), std::floor(kPoolBytes / block_bytes(2)));
}

TEST(ServerKv, Int8WarmTierWithASmallHotWindowGivesTheReferences) {
  ServerProcess s(kv_options({"--kv-warm-dtype", "int8", "--kv-hot-tokens", "16"}));
  const auto before = idle_metrics(s);
  expect_references(s, 64);
  const auto after = idle_metrics(s);
  // The prompts and their 64 tokens pass the 16-token hot window: blocks were re-encoded.
  EXPECT_GT(after.at("strata_kv_reencoded_blocks_total") - before.at("strata_kv_reencoded_blocks_total"), 0);
  EXPECT_GT(after.at("strata_kv_capacity_bytes{tier=\"warm\"}"), 0);
}

}  // namespace
}  // namespace strata
