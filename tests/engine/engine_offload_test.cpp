// --kv-offload under the engine, on stories260K: a greedy sequence about four times longer than the
// KV pool holds decodes with its oldest blocks in host slots of the cold tier, read in place by
// attention, and gives exactly the tokens of the same request on a pool big enough for it (the
// same request without --kv-offload is clipped to the pool). Two such sequences at once,
// preempted by swap or by recompute, still give their own tokens; a prefix hit on blocks that
// were offloaded gives the tokens of a miss; offload engines that follow engines of the same pool
// (with and without --kv-offload) on one model give the same tokens (on the GPU: decode passes
// with host blocks replayed from CUDA graphs, which the engines before them recorded at the same
// arena address). After every run the KV invariants hold and no block is held.
//
// Device: STRATA_TEST_DEVICE (cpu when unset; `STRATA_TEST_DEVICE=cuda` runs the same tests on the
// GPU, where the host slots are mapped pinned memory the attention kernels read over PCIe, and
// skips them when no GPU is usable).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <thread>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/stories_model.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::expect_drained;

using Result = test::Collected;
using test::collect;
test::DeviceStories& loaded() { return test::device_stories(); }
#define REQUIRE_DEVICE() STRATA_REQUIRE_TEST_DEVICE()

Request make_request(const std::string& prompt, int32_t max_tokens) {
  return test::greedy_request(*loaded().tok, prompt, max_tokens);
}

EngineConfig config(int32_t kv_blocks, PreemptMode mode, bool offload) {
  EngineConfig c;
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF16;
  c.kv.num_blocks = kv_blocks;
  if (offload) {
    c.kv.host_bytes = 64 << 20;
    c.kv.offload = true;
  }
  c.sched.preempt = mode;
  c.sched.max_batched_tokens = 64;
  c.sched.max_seqs = 8;
  c.sched.batch_wait_ms = 50;  // the first step sees every submitted request
  c.controller.enabled = false;
  return c;
}

// 10 blocks of 16 tokens hold 160 tokens; each sequence is a prompt of a few blocks and 600 tokens.
constexpr int32_t kSmallPool = 10;
constexpr int32_t kLong = 600;

std::string prompt(size_t i) {
  const auto& base = test::story_prompts();
  return base[i % base.size()] + " " + base[(i + 3) % base.size()];  // several full blocks
}

// Each prompt alone on a pool big enough for it, without a host tier.
const std::vector<TokenId>& alone(size_t i) {
  static std::map<size_t, std::vector<TokenId>> cache;
  auto it = cache.find(i);
  if (it != cache.end()) return it->second;
  Engine e(*loaded().model, *loaded().tok, config(1024, PreemptMode::kRecompute, false));
  const Result r = collect(*e.submit(make_request(prompt(i), kLong)));
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(static_cast<int32_t>(r.tokens.size()), kLong);
  EXPECT_EQ(e.stats().preemptions, 0);
  expect_drained(e);
  return cache.emplace(i, r.tokens).first->second;
}

TEST(EngineOffload, ASequenceFourTimesThePoolDecodesFromHostSlotsWithTheTokensOfARoomyPool) {
  REQUIRE_DEVICE();
  const std::vector<TokenId>& ref = alone(5);
  {
    // Without --kv-offload the sequence cannot fit the pool: its max_tokens is clipped to it.
    Engine e(*loaded().model, *loaded().tok, config(kSmallPool, PreemptMode::kRecompute, false));
    const Result r = collect(*e.submit(make_request(prompt(5), kLong)));
    EXPECT_EQ(r.error, "");
    EXPECT_LE(r.tokens.size(), static_cast<size_t>(kSmallPool * 16)) << "the test's pool must be too small for the sequence";
    expect_drained(e);
  }
  Engine e(*loaded().model, *loaded().tok, config(kSmallPool, PreemptMode::kRecompute, true));
  const Result r = collect(*e.submit(make_request(prompt(5), kLong)));
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.tokens, ref);
  const EngineStats es = e.stats();
  const KvStats st = expect_drained(e);
  EXPECT_EQ(es.preemptions, 0) << "offload, not preemption, made the room";
  const int32_t total = static_cast<int32_t>(make_request(prompt(5), 0).prompt.size()) + kLong;
  // Everything but the hot pool's worth (and the partial last block) went to host slots.
  EXPECT_GE(st.offloaded_blocks, total / 16 - kSmallPool) << "total tokens " << total;
  EXPECT_GT(st.host_attended_blocks, 0);
  EXPECT_EQ(st.host_attended_bytes, static_cast<uint64_t>(st.host_attended_blocks) * (st.hot.bytes_total / kSmallPool));
  EXPECT_GE(st.host_spills, st.offloaded_blocks);
  EXPECT_EQ(st.host_resident_blocks, 0);
  EXPECT_EQ(st.cold_read_failures, 0);
}

void two_at_once(PreemptMode mode) {
  const std::vector<TokenId>& ref0 = alone(1);
  const std::vector<TokenId>& ref1 = alone(4);
  // 2 x ~40 blocks want to run in a pool of 10.
  Engine e(*loaded().model, *loaded().tok, config(kSmallPool, mode, true));
  auto h0 = e.submit(make_request(prompt(1), kLong));
  auto h1 = e.submit(make_request(prompt(4), kLong));
  const Result r0 = collect(*h0);
  const Result r1 = collect(*h1);
  EXPECT_EQ(r0.error, "");
  EXPECT_EQ(r1.error, "");
  EXPECT_EQ(r0.tokens, ref0);
  EXPECT_EQ(r1.tokens, ref1);
  const EngineStats es = e.stats();
  const KvStats st = expect_drained(e);
  EXPECT_GT(es.preemptions, 0) << "two of them cannot both run in the pool";
  if (mode == PreemptMode::kSwap) {
    EXPECT_GT(st.swap_outs, 0);
  }
  EXPECT_GT(st.offloaded_blocks, 0);
  EXPECT_EQ(st.cold_read_failures, 0);
}

TEST(EngineOffload, TwoLongSequencesPreemptedBySwapKeepTheirTokens) {
  REQUIRE_DEVICE();
  two_at_once(PreemptMode::kSwap);
}

TEST(EngineOffload, TwoLongSequencesPreemptedByRecomputeKeepTheirTokens) {
  REQUIRE_DEVICE();
  two_at_once(PreemptMode::kRecompute);
}

// Engines one after another on one model, as a server's tests and the ones above run them: on the
// GPU the model's backend keeps its recorded decode passes (CUDA graphs) from engine to engine, and
// a new engine's KV arena of the size of the last one's, allocated right after that one was freed,
// gets its address in practice. A recording is found by a key of the pass's shape, buffers and KV
// views; when that key held the arenas' addresses and geometry but not the views' host slots, the
// offload engine's decode passes over tables of up to 32 blocks replayed the recording of the
// engine before it: with no host slots (a host id read as a hot block, past the arena: -inf logits)
// or with the last offload engine's freed host tier. Here each offload engine follows an engine of
// the same pool, without --kv-offload and then with it, and every run must give the tokens of the
// roomy pool (their prefix for the run clipped to the pool). On the CPU nothing is recorded: the
// same runs, the same tokens.
TEST(EngineOffload, OffloadEnginesAfterEnginesOfTheSamePoolGiveTheTokensOfARoomyPool) {
  REQUIRE_DEVICE();
  const std::vector<TokenId>& ref = alone(3);
  constexpr int32_t kShort = 64;  // decode passes that record (several per shape), within the pool
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    {
      Engine e(*loaded().model, *loaded().tok, config(kSmallPool, PreemptMode::kRecompute, false));
      const Result r = collect(*e.submit(make_request(prompt(3), kShort)));
      EXPECT_EQ(r.error, "");
      ASSERT_EQ(static_cast<int32_t>(r.tokens.size()), kShort);
      EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), ref.begin()));
      expect_drained(e);
    }
    for (int k = 0; k < 2; ++k) {  // an offload engine after an engine without, then after one with
      Engine e(*loaded().model, *loaded().tok, config(kSmallPool, PreemptMode::kRecompute, true));
      const Result r = collect(*e.submit(make_request(prompt(3), kLong)));
      EXPECT_EQ(r.error, "");
      EXPECT_EQ(r.tokens, ref) << "offload engine " << k;
      const KvStats st = expect_drained(e);
      EXPECT_GT(st.host_attended_blocks, 0);
      EXPECT_EQ(st.cold_read_failures, 0);
    }
  }
}

TEST(EngineOffload, APrefixHitOnOffloadedBlocksGivesTheTokensOfAMiss) {
  REQUIRE_DEVICE();
  const std::vector<TokenId>& ref = alone(2);
  Engine e(*loaded().model, *loaded().tok, config(kSmallPool, PreemptMode::kRecompute, true));
  const Result first = collect(*e.submit(make_request(prompt(2), kLong)));
  EXPECT_EQ(first.tokens, ref);
  EXPECT_GT(e.stats().kv.offloaded_blocks, 0);
  // The prompt's blocks were offloaded first (the oldest) and stay cached in their host slots.
  const Result again = collect(*e.submit(make_request(prompt(2), kLong)));
  EXPECT_EQ(again.tokens, ref);
  EXPECT_GT(again.usage.cached_tokens, 0) << "the prompt's blocks are found in host memory";
  const KvStats st = expect_drained(e);
  EXPECT_GT(st.host_fetches, 0);
  EXPECT_EQ(st.cold_read_failures, 0);
}

}  // namespace
}  // namespace strata
