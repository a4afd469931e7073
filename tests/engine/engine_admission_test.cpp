// The engine on stories260K (issue 18): a request that fits the KV pool is always served, also
// when the prefix cache turns its first chunk into the whole pool; one that can never fit is
// rejected at submit naming the limit; usage.cached_tokens counts the prefix cache's service to
// this request only (not its own earlier chunks, not its own blocks found again after
// preemption).
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/stories_model.h"

namespace strata {
namespace {

using test::expect_drained;

test::StoriesModel& shared() { return test::stories(); }

struct Result {
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::kStop;
  Usage usage;
  bool done = false;  // kDone arrived before the deadline
};

// Reads a one-sample request's events; stops at kDone or when nothing arrives for a minute (a
// request the engine never serves: the test fails instead of hanging).
Result collect(RequestHandle& h) {
  Result r;
  EngineEvent e;
  for (;;) {
    const std::optional<bool> got = h.next_for(e, std::chrono::seconds(60));
    if (!got.has_value() || !*got) return r;
    switch (e.kind) {
      case EngineEvent::Kind::kToken: r.tokens.push_back(e.token); break;
      case EngineEvent::Kind::kFinish: r.finish = e.finish_reason; break;
      case EngineEvent::Kind::kDone:
        r.usage = e.usage;
        r.done = true;
        return r;
      case EngineEvent::Kind::kError: ADD_FAILURE() << e.error; break;
    }
  }
}

// Prompt token ids first, first + 1, ... folded into the 512-token vocabulary above its specials.
Request make_request(int32_t n_prompt, int32_t max_tokens, TokenId first = 100) {
  Request r;
  for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(3 + (first - 3 + i) % 509);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

EngineConfig config(int32_t kv_blocks) {
  EngineConfig c;
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF32;
  c.kv.num_blocks = kv_blocks;
  return c;
}

TEST(EngineAdmission, TheSame1020TokenPromptTwiceInA64BlockPoolIsServedBothTimes) {
  // Issue 18 as reported (`strata serve --kv-blocks 64`, token ids 100..1119, max_tokens 3): the
  // first run is chunked (512 + 508 tokens); the second finds 63 blocks in the prefix cache, so
  // its first chunk needs 63 revived blocks + 1 new = all 64, and the 1-block watermark (1% of
  // 64, rounded up) kept it, and every request behind it, waiting for ever.
  EngineConfig cfg = config(64);
  ASSERT_EQ(cfg.sched.max_batched_tokens, 512);
  ASSERT_DOUBLE_EQ(cfg.sched.watermark, 0.01);
  Engine e(*shared().model, *shared().tok, cfg);
  const Result first = collect(*e.submit(make_request(1020, 3)));
  ASSERT_TRUE(first.done);
  EXPECT_EQ(first.tokens.size(), 3u);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  const Result second = collect(*e.submit(make_request(1020, 3)));
  ASSERT_TRUE(second.done) << "the repeated prompt was never admitted";
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.usage.cached_tokens, 63 * 16);
  // Nothing is left blocking the queue.
  const Result after = collect(*e.submit(make_request(10, 2, 7)));
  ASSERT_TRUE(after.done);
  EXPECT_EQ(after.tokens.size(), 2u);
  expect_drained(e);
}

TEST(EngineAdmission, APromptThatCannotFitWithOneGeneratedTokenIsRejectedNamingThePool) {
  Engine e(*shared().model, *shared().tok, config(64));
  try {
    e.submit(make_request(1024, 3));
    FAIL() << "a 1024-token prompt and its first generated token cannot fit 1024 tokens of KV";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(),
                 "the prompt has 1024 tokens; with the first generated token it needs 65 KV blocks of 16 tokens, more "
                 "than the whole KV pool holds (64 blocks, 1024 tokens; --kv-blocks or --kv-memory sets it)");
  }
  EXPECT_EQ(e.stats().requests_rejected, 1);
  // One token less fits: max_tokens is clipped to the one token the pool has room for.
  const Result r = collect(*e.submit(make_request(1023, 3)));
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  expect_drained(e);
}

TEST(EngineAdmission, CachedTokensCountOnlyThePrefixCachesServiceToTheRequest) {
  for (bool prefix_cache : {true, false}) {
    SCOPED_TRACE(prefix_cache ? "prefix cache on" : "prefix cache off");
    EngineConfig cfg = config(256);
    cfg.kv.prefix_cache = prefix_cache;
    cfg.sched.max_batched_tokens = 128;  // 600 tokens: 5 chunks
    Engine e(*shared().model, *shared().tok, cfg);
    const Result unique = collect(*e.submit(make_request(600, 2)));
    ASSERT_TRUE(unique.done);
    EXPECT_EQ(unique.usage.cached_tokens, 0) << "earlier chunks of the same prompt are not cache hits";
    const Result again = collect(*e.submit(make_request(600, 2)));
    ASSERT_TRUE(again.done);
    EXPECT_EQ(again.tokens, unique.tokens);
    // The full blocks of the prompt but its last token: 599 / 16 = 37 blocks.
    EXPECT_EQ(again.usage.cached_tokens, prefix_cache ? 37 * 16 : 0);
    EXPECT_EQ(e.stats().kv.prefix_hit_tokens, prefix_cache ? 37 * 16 : 0);
    expect_drained(e);
  }
}

TEST(EngineAdmission, ARecomputeAfterPreemptionDoesNotCountItsOwnBlocksAsCached) {
  // Two unique prompts of 100 tokens growing by 60 each (10 blocks each at the end) in 16 blocks:
  // the later one is preempted by recompute, and when it comes back the prefix cache holds the
  // blocks it computed itself.
  EngineConfig cfg = config(16);
  cfg.sched.preempt = PreemptMode::kRecompute;
  cfg.sched.max_batched_tokens = 64;
  cfg.sched.batch_wait_ms = 200;  // both are admitted together
  Engine e(*shared().model, *shared().tok, cfg);
  auto h1 = e.submit(make_request(100, 60, 100));
  auto h2 = e.submit(make_request(100, 60, 300));
  const Result r1 = collect(*h1);
  const Result r2 = collect(*h2);
  ASSERT_TRUE(r1.done && r2.done);
  EXPECT_EQ(r1.tokens.size(), 60u);
  EXPECT_EQ(r2.tokens.size(), 60u);
  ASSERT_GT(r1.usage.preemptions + r2.usage.preemptions, 0) << "the pool must force a preemption";
  EXPECT_GT(e.stats().kv.prefix_hit_tokens, 0) << "the recompute found its own blocks";
  EXPECT_EQ(r1.usage.cached_tokens, 0);
  EXPECT_EQ(r2.usage.cached_tokens, 0);
  expect_drained(e);
}

}  // namespace
}  // namespace strata
