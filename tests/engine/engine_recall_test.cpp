// Recall (--kv-recall) through the engine on stories260K: with a budget no sequence reaches it
// changes no token (and recalls nothing); with a small budget it recalls demoted blocks, which
// changes the generation from h2o's alone while the tokens before the budget is reached stay the
// reference's; and under a pool so small that sequences are swapped out and back (and forked),
// every request finishes with all its tokens, every block is returned and the KV invariants hold.
// Also the elastic budget (--kv-budget auto) under a pool too small for all sequences.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "engine/engine.h"
#include "engine/stories_model.h"
#include "support/test_support.h"

namespace strata {
namespace {

test::StoriesModel& shared() { return test::stories(); }

Request make_request(const std::string& prompt, int32_t max_tokens, int32_t n = 1) {
  Request r;
  r.prompt = shared().tok->encode(prompt, true, false);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.n = n;
  r.params.seed = 1234;
  return r;
}

EngineConfig config(int32_t kv_blocks, EvictKind kind, int32_t budget, bool recall) {
  EngineConfig c;
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF32;
  c.kv.num_blocks = kv_blocks;
  c.sched.max_batched_tokens = 64;
  c.kv.evict.kind = kind;
  c.kv.evict.budget = budget;
  c.kv.evict.recall = recall;
  return c;
}

std::vector<std::vector<TokenId>> collect(RequestHandle& h, int n) {
  std::vector<std::vector<TokenId>> out(static_cast<size_t>(n));
  EngineEvent e;
  while (h.next(e)) {
    if (e.kind == EngineEvent::Kind::kToken) out[static_cast<size_t>(e.index)].push_back(e.token);
    if (e.kind == EngineEvent::Kind::kError) ADD_FAILURE() << e.error;
  }
  return out;
}

struct Outcome {
  std::vector<std::vector<TokenId>> tokens;  // per prompt (first sample)
  KvStats kv;
  int32_t budget_min = 0;  // --kv-budget auto
  int64_t preemptions = 0;
};

// The prompts on one engine, all submitted at once; then drained, with every block returned.
Outcome run(const EngineConfig& cfg, const std::vector<std::string>& prompts, int32_t max_tokens, int32_t n = 1) {
  Engine e(*shared().model, *shared().tok, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) handles.push_back(e.submit(make_request(p, max_tokens, n)));
  Outcome r;
  for (auto& h : handles) {
    const auto samples = collect(*h, n);
    for (const auto& s : samples) EXPECT_EQ(s.size(), static_cast<size_t>(max_tokens));
    r.tokens.push_back(samples[0]);
  }
  const EngineStats es = e.stats();
  r.kv = es.kv;
  r.budget_min = es.kv_budget_min;
  r.preemptions = es.preemptions;
  e.shutdown(true, std::chrono::seconds(60));
  const KvManager& kv = e.kv_after_shutdown();
  kv.check_invariants();
  const KvStats st = kv.stats();
  EXPECT_EQ(st.hot.used, 0) << "staging blocks must be released with their sequences";
  EXPECT_EQ(st.cold.used, 0);
  EXPECT_EQ(st.sequences, 0);
  return r;
}

TEST(EngineRecall, ABudgetNeverReachedChangesNoTokenAndRecallsNothing) {
  const std::vector<std::string> prompts(test::story_prompts().begin(), test::story_prompts().begin() + 4);
  const Outcome ref = run(config(256, EvictKind::kNone, 0, false), prompts, 64);
  const Outcome rec = run(config(256, EvictKind::kH2o, 400, true), prompts, 64);
  EXPECT_EQ(rec.tokens, ref.tokens);
  EXPECT_EQ(rec.kv.evicted_tokens, 0);
  EXPECT_EQ(rec.kv.recalled_tokens, 0);
}

TEST(EngineRecall, ASmallBudgetRecallsAndChangesTheGenerationValidly) {
  const std::vector<std::string> prompts(test::story_prompts().begin(), test::story_prompts().begin() + 3);
  const int32_t n = 200, budget = 48;
  const Outcome ref = run(config(256, EvictKind::kNone, 0, false), prompts, n);
  const Outcome h2o = run(config(256, EvictKind::kH2o, budget, false), prompts, n);
  const Outcome rec = run(config(256, EvictKind::kH2o, budget, true), prompts, n);
  EXPECT_EQ(rec.kv.evicted_tokens, h2o.kv.evicted_tokens) << "recall demotes what h2o evicts; the budget holds the same";
  EXPECT_GT(rec.kv.recalled_tokens, 0);
  EXPECT_EQ(rec.kv.recalled_tokens % 16, 0) << "whole blocks";
  EXPECT_EQ(h2o.kv.recalled_tokens, 0);
  int differ = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    // Until the budget is reached nothing is evicted, so nothing differs.
    const size_t n_prompt = shared().tok->encode(prompts[i], true, false).size();
    const size_t same = static_cast<size_t>(budget) - n_prompt;
    EXPECT_EQ(std::vector<TokenId>(rec.tokens[i].begin(), rec.tokens[i].begin() + static_cast<long>(same)),
              std::vector<TokenId>(ref.tokens[i].begin(), ref.tokens[i].begin() + static_cast<long>(same)));
    for (TokenId t : rec.tokens[i]) ASSERT_TRUE(t >= 0 && t < shared().model->config().n_vocab);
    differ += rec.tokens[i] != h2o.tokens[i];
  }
  EXPECT_GT(differ, 0) << "recalled blocks are attended: the generation is not h2o's";
}

// --kv-recall-memory: with the demoted blocks past a small cap spilled to a file in --kv-spill-dir,
// the generation is the one with unbounded memory (the same blocks are chosen and loaded, from the
// file); without the file the oldest are dropped, never chosen again, and the run still finishes.
TEST(EngineRecall, AMemoryCapSpillsToTheFileWithoutChangingTokensOrDrops) {
  const std::vector<std::string> prompts(test::story_prompts().begin(), test::story_prompts().begin() + 3);
  const int32_t n = 240, budget = 48;
  const Outcome unbounded = run(config(256, EvictKind::kH2o, budget, true), prompts, n);
  EngineConfig capped = config(256, EvictKind::kH2o, budget, true);
  capped.kv.evict.recall_memory_bytes = 16 * 1024;  // a few blocks of stories260K's (10 KiB each)
  const std::string dir = test::make_temp_dir("strata-recall-spill");
  EngineConfig spilled = capped;
  spilled.kv.spill_dir = dir;
  spilled.kv.spill_bytes = 8 << 20;
  spilled.sched.preempt = PreemptMode::kRecompute;  // the KV tier's file is not what is tested here
  const Outcome sp = run(spilled, prompts, n);
  EXPECT_EQ(sp.tokens, unbounded.tokens);
  EXPECT_GT(sp.kv.recall_spilled_blocks, 0);
  EXPECT_EQ(sp.kv.recall_dropped_blocks, 0);
  EXPECT_EQ(sp.kv.recalled_tokens, unbounded.kv.recalled_tokens);
  const Outcome dropped = run(capped, prompts, n);
  EXPECT_GT(dropped.kv.recall_dropped_blocks, 0);
  EXPECT_EQ(dropped.kv.recall_spilled_blocks, 0);
  std::filesystem::remove_all(dir);
}

TEST(EngineRecall, SwapsAndForksUnderATightPoolFinishAndReturnEveryBlock) {
  const std::string dir = test::make_temp_dir("strata-recall-engine");
  EngineConfig cfg = config(14, EvictKind::kH2o, 48, true);
  cfg.sched.preempt = PreemptMode::kSwap;
  cfg.sched.batch_wait_ms = 50;
  cfg.kv.spill_dir = dir;
  cfg.kv.spill_bytes = 64 << 20;
  const std::vector<std::string> prompts(test::story_prompts().begin(), test::story_prompts().begin() + 6);
  const Outcome r = run(cfg, prompts, 120, 2);
  EXPECT_GT(r.kv.recalled_tokens, 0);
  EXPECT_GT(r.kv.swap_outs, 0) << "the pool was meant to be too small for every sequence at once";
  std::filesystem::remove_all(dir);
}

TEST(EngineElasticBudget, ShrinksUnderOverloadWithinItsFloorAndEverySequenceFinishes) {
  // 6 prompts generating 150 tokens each want ~6 x 11 blocks; the pool has 24.
  EngineConfig cfg = config(24, EvictKind::kH2o, 0, false);
  cfg.kv.evict.auto_budget = true;
  cfg.sched.batch_wait_ms = 50;
  const std::vector<std::string> prompts(test::story_prompts().begin(), test::story_prompts().begin() + 6);
  const Outcome r = run(cfg, prompts, 150);
  EXPECT_GT(r.budget_min, 0) << "the pool filled up: the budget must have been bounded";
  EXPECT_GE(r.budget_min, cfg.kv.evict.min_auto_budget());
  EXPECT_LT(r.budget_min, 150);
  EXPECT_GT(r.kv.evicted_tokens, 0);
  // With room for everything the budget is never bounded and nothing changes.
  EngineConfig roomy = config(256, EvictKind::kH2o, 0, false);
  roomy.kv.evict.auto_budget = true;
  const Outcome a = run(roomy, prompts, 64);
  const Outcome ref = run(config(256, EvictKind::kNone, 0, false), prompts, 64);
  EXPECT_EQ(a.budget_min, 0);
  EXPECT_EQ(a.kv.evicted_tokens, 0);
  EXPECT_EQ(a.tokens, ref.tokens);
}

}  // namespace
}  // namespace strata
