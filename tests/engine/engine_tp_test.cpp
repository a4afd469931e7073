// The engine over a tensor-parallel model (--tensor-parallel 2 and 4, CPU ranks): one scheduler and
// one KV manager, every rank holding the same block ids for its own KV heads.
//   - greedy tokens equal the llama.cpp references of stories260K (../shared/reference) alone,
//     batched (the three prompts at once) and under preemption by recompute (a pool too small for
//     them together);
//   - prefix-cache hits (a second request on the cached prompt) and warm re-encodes (each rank
//     encodes its own heads) give the tokens TP=1 gives with the same KV configuration;
//   - a rank that throws fails every request with its message, the engine rejects new requests,
//     and shuts down without hanging, its KV bookkeeping intact;
//   - the cold tier, --kv-evict and --kv-remote are refused with a message.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine/engine.h"
#include "engine/stories_model.h"

namespace strata {
namespace {

// The reference greedy continuations of stories260K (../shared/reference, from llama.cpp).
struct GreedyReference {
  std::string prompt;
  std::vector<int> tokens;
  std::string content;
};
std::vector<GreedyReference> greedy_references() {
  std::vector<GreedyReference> out;
  std::istringstream in(test::read_file(test::shared_path("reference/stories260K-greedy.jsonl")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j["prompt"], j["tokens"].get<std::vector<int>>(), j["content"]});
  }
  return out;
}

using test::collect;
using test::expect_drained;
using test::greedy_request;

struct TpStories {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

// stories260K split over `tp` ranks (2 threads in all), loaded once per rank count.
TpStories& tp_stories(int32_t tp) {
  static std::map<int32_t, TpStories> loaded;
  auto it = loaded.find(tp);
  if (it == loaded.end()) {
    TpStories s;
    BackendOptions o;
    o.device = DeviceKind::kCpu;
    o.n_threads = 2;
    o.tensor_parallel = tp;
    s.model = Model::load(test::shared_path("models/stories260K.gguf"), o);
    s.tok = Tokenizer::from_gguf(s.model->file());
    it = loaded.emplace(tp, std::move(s)).first;
  }
  return it->second;
}

EngineConfig config(int32_t kv_blocks) {
  EngineConfig c;
  if (kv_blocks < 64) c.sched.batch_wait_ms = 50;  // the small pool must see all prompts at once
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF32;
  c.kv.num_blocks = kv_blocks;
  c.sched.preempt = PreemptMode::kRecompute;
  c.sched.max_batched_tokens = 64;
  return c;
}

// The reference prompts submitted together; their tokens in order. preemptions: the engine's.
std::vector<std::vector<TokenId>> run_together(TpStories& s, const EngineConfig& cfg, int64_t* preemptions = nullptr) {
  Engine e(*s.model, *s.tok, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& ref : greedy_references()) handles.push_back(e.submit(greedy_request(*s.tok, ref.prompt, 64)));
  std::vector<std::vector<TokenId>> out;
  for (auto& h : handles) {
    const auto c = collect(*h);
    EXPECT_EQ(c.error, "");
    out.push_back(c.tokens);
  }
  if (preemptions) *preemptions = e.stats().preemptions;
  expect_drained(e);
  return out;
}

class EngineTp : public ::testing::TestWithParam<int32_t> {};

TEST_P(EngineTp, GreedyTokensEqualTheReferenceAlone) {
  TpStories& s = tp_stories(GetParam());
  ASSERT_EQ(s.model->tensor_parallel(), GetParam());
  for (const auto& ref : greedy_references()) {
    Engine e(*s.model, *s.tok, config(64));
    const auto c = collect(*e.submit(greedy_request(*s.tok, ref.prompt, 64)));
    EXPECT_EQ(c.error, "");
    EXPECT_EQ(std::vector<int>(c.tokens.begin(), c.tokens.end()), ref.tokens) << ref.prompt;
    expect_drained(e);
  }
}

TEST_P(EngineTp, GreedyTokensEqualTheReferenceBatched) {
  const auto got = run_together(tp_stories(GetParam()), config(64));
  const auto refs = greedy_references();
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(std::vector<int>(got[i].begin(), got[i].end()), refs[i].tokens) << refs[i].prompt;
}

TEST_P(EngineTp, GreedyTokensEqualTheReferenceUnderPreemptionByRecompute) {
  int64_t preemptions = 0;
  // Each request needs 5 blocks of 16 by its end (5 or 7 prompt tokens + 64), 15 together: 8 do not hold them.
  const auto got = run_together(tp_stories(GetParam()), config(8), &preemptions);
  EXPECT_GT(preemptions, 0) << "the pool must be small enough to force preemption";
  const auto refs = greedy_references();
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(std::vector<int>(got[i].begin(), got[i].end()), refs[i].tokens) << refs[i].prompt;
}

TEST_P(EngineTp, PrefixCacheHitsGiveTheReferenceTokens) {
  TpStories& s = tp_stories(GetParam());
  Engine e(*s.model, *s.tok, config(64));
  const auto ref = greedy_references()[0];
  // A prompt of more than one block, run twice: the second finds its first block cached.
  const std::string prompt = ref.content.substr(0, 120);
  const auto first = collect(*e.submit(greedy_request(*s.tok, prompt, 32)));
  const auto second = collect(*e.submit(greedy_request(*s.tok, prompt, 32)));
  EXPECT_EQ(first.error, "");
  EXPECT_GT(second.usage.cached_tokens, 0);
  EXPECT_EQ(second.tokens, first.tokens);
  // And the same as one rank computes (the first request computed everything itself).
  Engine one(*test::stories().model, *test::stories().tok, config(64));
  EXPECT_EQ(collect(*one.submit(greedy_request(*test::stories().tok, prompt, 32))).tokens, first.tokens);
  expect_drained(one);
  expect_drained(e);
}

TEST_P(EngineTp, WarmReencodesGiveTheTokensOfOneRank) {
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kInt4}) {
    EngineConfig cfg = config(64);
    cfg.kv.warm_format = f;
    cfg.kv.hot_tokens = 16;  // everything older than one block is re-encoded
    cfg.kv.prefix_cache = false;
    auto run = [&](Model& m, const Tokenizer& tok, int64_t* reencoded) {
      Engine e(m, tok, cfg);
      std::vector<std::vector<TokenId>> out;
      for (const auto& ref : greedy_references()) out.push_back(collect(*e.submit(greedy_request(tok, ref.prompt, 64))).tokens);
      *reencoded = e.stats().kv.reencoded_blocks;
      expect_drained(e);
      return out;
    };
    int64_t re_tp = 0, re_one = 0;
    TpStories& s = tp_stories(GetParam());
    const auto tp = run(*s.model, *s.tok, &re_tp);
    const auto one = run(*test::stories().model, *test::stories().tok, &re_one);
    EXPECT_GE(re_tp, 6) << "blocks must really be re-encoded";
    EXPECT_EQ(re_tp, re_one);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(tp[i], one[i]) << warm_format_name(f) << " prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineTp, ::testing::Values(2, 4), [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(EngineTpFailure, ARankThatThrowsFailsEveryRequestAndTheEngineCleanly) {
  BackendOptions o;
  o.device = DeviceKind::kCpu;
  o.n_threads = 2;
  o.tensor_parallel = 2;
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), o);
  auto tok = Tokenizer::from_gguf(model->file());
  std::string reported;
  EngineConfig cfg = config(64);
  cfg.on_failure = [&](const std::string& m) { reported = m; };
  Engine e(*model, *tok, cfg);
  // Two requests in flight; rank 1 fails on the 4th forward pass.
  model->fail_rank_for_test(1, 3);
  auto a = e.submit(greedy_request(*tok, "Once upon a time", 64));
  auto b = e.submit(greedy_request(*tok, "The little dog", 64));
  const auto ca = collect(*a), cb = collect(*b);
  for (const auto* c : {&ca, &cb}) {
    EXPECT_NE(c->error.find("the engine failed"), std::string::npos) << c->error;
    EXPECT_NE(c->error.find("rank 1 of 2"), std::string::npos) << c->error;
    EXPECT_LT(c->tokens.size(), 64u);
  }
  // A later request is rejected with the reason (after the engine thread published it).
  try {
    e.submit(greedy_request(*tok, "Sam", 4));
    ADD_FAILURE() << "a failed engine accepted a request";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("rank 1 of 2"), std::string::npos) << err.what();
  }
  EXPECT_NE(e.failure().find("injected"), std::string::npos) << e.failure();
  expect_drained(e);  // returns: no rank thread hangs; the KV bookkeeping holds
  EXPECT_NE(reported.find("rank 1 of 2"), std::string::npos) << reported;
}

TEST(EngineTpFailure, RefusesWhatTensorParallelismDoesNotSupportYet) {
  TpStories& s = tp_stories(2);
  auto expect_refused = [&](EngineConfig cfg, const std::string& part) {
    try {
      Engine e(*s.model, *s.tok, cfg);
      ADD_FAILURE() << part << ": accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(part), std::string::npos) << err.what();
    }
  };
  EngineConfig cold = config(64);
  cold.kv.host_bytes = 1 << 20;
  expect_refused(cold, "cold KV tier");
  EngineConfig evict = config(64);
  evict.kv.evict.kind = EvictKind::kWindow;
  evict.kv.evict.budget = 64;
  expect_refused(evict, "--kv-evict");
  EngineConfig remote = config(64);
  remote.kv.remote_url = "redis://127.0.0.1:1";
  expect_refused(remote, "--kv-remote");
}

}  // namespace
}  // namespace strata
