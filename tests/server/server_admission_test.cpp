// Black-box tests of admission and of what a response reports (issue 18), on stories260K:
// the reported livelock reproduced as reported (`--kv-blocks 64`, the same 1020-token prompt twice,
// max_tokens 3), the never-fits limit at that scale, a long prompt in a pool with a warm tier, and
// finish_reason of whole (non-streamed) answers that the shutdown drain cut short.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

// A prompt of n token ids: the report's ids 100, 101, ... folded into stories260K's vocabulary of
// 512 above its 3 special tokens (100..511, then 3, 4, ...).
// `offset` starts it further on (prompts of different offsets share no block).
std::string token_ids(int n, int offset = 0) {
  std::string ids;
  for (int i = 0; i < n; ++i) {
    if (i > 0) ids.push_back(',');
    ids.append(std::to_string(3 + (97 + offset + i) % 509));
  }
  return "[" + ids + "]";
}

std::string completion(int n_prompt, int max_tokens, int offset = 0) {
  return "{\"prompt\": " + token_ids(n_prompt, offset) + ", \"max_tokens\": " + std::to_string(max_tokens) +
         ", \"temperature\": 0, \"ignore_eos\": true}";
}

ServerProcess::Options with(std::vector<std::string> args) {
  ServerProcess::Options o;
  o.args = std::move(args);
  return o;
}

TEST(ServerAdmission, TheReportedCaseIsServedEveryTime) {
  // Default flags but --kv-blocks 64 (1,024 tokens of 16-token blocks, a 1-block watermark, a
  // 512-token prefill budget). The second request finds 63 blocks in the prefix cache, so its
  // first chunk needs the whole pool: it waited for ever behind the watermark, and every request
  // behind it too, while the engine thread spun.
  ServerProcess s(with({"--kv-blocks", "64"}));
  auto c = s.client(/*timeout_s=*/60);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    auto r = c->Post("/v1/completions", completion(1020, 3), "application/json");
    ASSERT_TRUE(r) << "no answer: admission is stuck";
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 1020);
    EXPECT_EQ(j["usage"]["completion_tokens"], 3);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], i == 0 ? 0 : 63 * 16);
  }
  auto r = c->Post("/v1/completions", completion(10, 2), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto m = test::metrics(s);
  EXPECT_EQ(m["strata_requests_waiting"], 0);
  EXPECT_EQ(m["strata_requests_running"], 0);
  EXPECT_EQ(m["strata_engine_stalled_steps_total"], 0) << "a step that could schedule nothing while work waited";
}

TEST(ServerAdmission, APromptThePoolCanNeverHoldIs400NamingTheLimit) {
  // The rule: the prompt and its first generated token must fit the pool (max_tokens is then
  // clipped to what fits, finish_reason "length").
  ServerProcess s(with({"--kv-blocks", "64"}));
  auto c = s.client(/*timeout_s=*/60);
  auto r = c->Post("/v1/completions", completion(1024, 3), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 400) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "prompt");
  EXPECT_EQ(j["error"]["message"],
            "the prompt has 1024 tokens; with the first generated token it needs 65 KV blocks of 16 tokens, more than "
            "the whole KV pool holds (64 blocks, 1024 tokens; --kv-blocks or --kv-memory sets it)");
  r = c->Post("/v1/completions", completion(1023, 3), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json ok = Json::parse(r->body);
  EXPECT_EQ(ok["usage"]["completion_tokens"], 1);
  EXPECT_EQ(ok["choices"][0]["finish_reason"], "length");
}

TEST(ServerAdmission, ALongPromptIsServedWhenTheWarmTierHoldsItsOlderBlocks) {
  // 16 blocks of memory with an int8 warm tier: 4 hot blocks (64 tokens) and warm slots for the
  // rest. The pool holds a 300-token prompt only if its older blocks move to the warm tier while
  // it is prefilled, which the default hot window of 256 tokens never allowed: the request was
  // accepted, then preempted itself step after step for ever.
  ServerProcess s(with({"--kv-blocks", "16", "--kv-warm-dtype", "int8"}));
  auto c = s.client(/*timeout_s=*/60);
  for (int n : {100, 300, 100}) {
    SCOPED_TRACE(n);
    auto r = c->Post("/v1/completions", completion(n, 3), "application/json");
    ASSERT_TRUE(r) << "no answer";
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 3);
  }
  EXPECT_NE(s.log().find("KV hot window: 32 tokens instead of --kv-hot-tokens 256"), std::string::npos) << s.log();
  auto m = test::metrics(s);
  EXPECT_GT(m["strata_kv_reencoded_blocks_total"], 0);
  EXPECT_EQ(m["strata_engine_stalled_steps_total"], 0);
}

TEST(ServerAdmission, CachedTokensCountPrefixHitsFromTheColdTier) {
  // 12 blocks in RAM and a spill file: three other prompts of 150 tokens push the first prompt's
  // cached blocks out of RAM into the cold tier; asked again, its 6 full blocks (all of its 100
  // tokens but the last 4) come back from there, and that is what cached_tokens says.
  const std::string spill = test::make_temp_dir("strata-admission-cold");
  ServerProcess s(with({"--kv-blocks", "12", "--kv-spill-dir", spill, "--kv-spill-size", "8MiB"}));
  auto c = s.client(/*timeout_s=*/60);
  auto cached = [&](int n, int offset) {
    auto r = c->Post("/v1/completions", completion(n, 2, offset), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r && r->status == 200 ? Json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() : -1;
  };
  EXPECT_EQ(cached(100, 0), 0);
  for (int offset : {150, 300, 450}) EXPECT_EQ(cached(150, offset), 0) << offset;
  auto m = test::metrics(s);
  ASSERT_GT(m["strata_kv_spill_out_bytes_total"], 0) << "the first prompt's blocks should have been spilled";
  const double hits = m["strata_prefix_cache_hit_tokens_total"], spill_in = m["strata_kv_spill_in_bytes_total"];
  EXPECT_EQ(cached(100, 0), 6 * 16);
  m = test::metrics(s);
  EXPECT_GT(m["strata_kv_spill_in_bytes_total"], spill_in) << "the hits came from the cold tier";
  EXPECT_EQ(m["strata_prefix_cache_hit_tokens_total"] - hits, 6 * 16);
  std::filesystem::remove_all(spill);
}

// Posts `body` to `path` on another thread, signals the server with SIGTERM once the request
// runs (--shutdown-timeout-s 0: the drain cancels it), and returns the answer.
Json answer_cut_by_the_drain(const std::string& path, const Json& body) {
  ServerProcess s(with({"--shutdown-timeout-s", "0"}));
  std::optional<httplib::Result> r;
  std::thread t([&] { r.emplace(s.client(/*timeout_s=*/60)->Post(path, body.dump(), "application/json")); });
  for (int i = 0; i < 600 && test::metrics(s)["strata_requests_running"] < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(::kill(s.pid(), SIGTERM), 0);
  t.join();
  EXPECT_TRUE(*r);
  if (!*r) return Json();
  EXPECT_EQ((*r)->status, 200) << (*r)->body;
  const auto code = s.wait_exit(120.0);
  EXPECT_TRUE(code.has_value() && *code == 0) << s.log();
  return Json::parse((*r)->body);
}

TEST(ServerAdmission, AWholeAnswerTheDrainCutShortHasNoFinishReasonAndStopReasonAbort) {
  // OpenAI's finish_reason values only ("abort" is none of them): null, with the extension field
  // "stop_reason": "abort" saying why.
  const Json done = answer_cut_by_the_drain(
      "/v1/completions", Json({{"prompt", "Once upon a time"}, {"max_tokens", 2000}, {"n", 16}, {"ignore_eos", true}}));
  ASSERT_EQ(done["choices"].size(), 16u) << done;
  for (const Json& ch : done["choices"]) {
    EXPECT_TRUE(ch["finish_reason"].is_null()) << ch;
    EXPECT_EQ(ch["stop_reason"], "abort") << ch;
  }
  const Json chat = answer_cut_by_the_drain(
      "/v1/chat/completions",
      Json({{"messages", Json::array({Json({{"role", "user"}, {"content", "Tell me a story"}})})},
            {"max_tokens", 2000},
            {"n", 16},
            {"ignore_eos", true}}));
  ASSERT_EQ(chat["choices"].size(), 16u) << chat;
  for (const Json& ch : chat["choices"]) {
    EXPECT_TRUE(ch["finish_reason"].is_null()) << ch;
    EXPECT_EQ(ch["stop_reason"], "abort") << ch;
    EXPECT_EQ(ch["message"]["role"], "assistant") << ch;
  }
}

}  // namespace
}  // namespace strata
