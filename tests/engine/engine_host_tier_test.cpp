// The host tier of the KV cache (--kv-host-memory) under the engine, on stories260K: 64 greedy
// requests through a KV pool far too small for them, preempted by swap (into host memory) or by
// recompute, each give exactly the tokens the same request gives alone on a roomy engine; with a
// tiny host tier above a spill file, the file takes what the host tier cannot (without migration),
// or the host tier's least recently written blocks move down to the file to make room (with it, the
// default), with the same tokens; a prefix hit read back from host memory gives the tokens of a miss and is counted a hit.
// After every run the KV invariants hold and no block is held.
//
// Device: STRATA_TEST_DEVICE (cpu when unset; `STRATA_TEST_DEVICE=cuda` runs the same tests on the
// GPU, where the host tier is pinned memory, and skips them when no GPU is usable).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
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

// 64 distinct prompts: the shared story openings, each continued differently.
std::vector<std::string> prompts64() {
  static const char* const kTails[] = {"", " and", " with a", " but the", " so she", " because", " then", " until the",
                                       " when", " after the"};
  std::vector<std::string> out;
  const auto& base = test::story_prompts();
  for (size_t i = 0; out.size() < 64; ++i) out.push_back(base[i % base.size()] + kTails[i / base.size()]);
  return out;
}

Request make_request(const std::string& prompt, int32_t max_tokens) {
  return test::greedy_request(*loaded().tok, prompt, max_tokens);
}

EngineConfig config(int32_t kv_blocks, PreemptMode mode) {
  EngineConfig c;
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF16;
  c.kv.num_blocks = kv_blocks;
  c.sched.preempt = mode;
  c.sched.max_batched_tokens = 256;
  c.sched.max_seqs = 64;
  c.sched.batch_wait_ms = 50;  // the first step sees every submitted request
  c.controller.enabled = false;
  return c;
}

constexpr int32_t kMaxTokens = 24;

// Each prompt alone on a roomy engine (no cold tier, nothing preempted).
const std::vector<std::vector<TokenId>>& alone() {
  static const std::vector<std::vector<TokenId>> out = [] {
    std::vector<std::vector<TokenId>> v;
    Engine e(*loaded().model, *loaded().tok, config(1024, PreemptMode::kRecompute));
    for (const auto& p : prompts64()) {  // one at a time: each runs alone
      const Result r = collect(*e.submit(make_request(p, kMaxTokens)));
      EXPECT_EQ(r.error, "");
      v.push_back(r.tokens);
    }
    EXPECT_EQ(e.stats().preemptions, 0);
    expect_drained(e);
    return v;
  }();
  return out;
}

struct RunStats {
  EngineStats engine;
  KvStats final_kv;
};

// All 64 at once on `cfg`; every output must equal its alone run.
RunStats together(const EngineConfig& cfg) {
  const auto& ref = alone();
  const auto prompts = prompts64();
  Engine e(*loaded().model, *loaded().tok, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) handles.push_back(e.submit(make_request(p, kMaxTokens)));
  for (size_t i = 0; i < handles.size(); ++i) {
    const Result r = collect(*handles[i]);
    EXPECT_EQ(r.error, "") << "request " << i;
    EXPECT_EQ(r.tokens, ref[i]) << "request " << i << ": '" << prompts[i] << "'";
  }
  RunStats s;
  s.engine = e.stats();
  s.final_kv = expect_drained(e);
  return s;
}

// 24 blocks of 16 tokens hold 384 tokens; the 64 requests need about 64 x 3 blocks at once.
constexpr int32_t kTightBlocks = 24;

TEST(EngineHostTier, SwapIntoHostMemoryUnderPressureKeepsEveryRequestsTokens) {
  REQUIRE_DEVICE();
  EngineConfig cfg = config(kTightBlocks, PreemptMode::kSwap);
  cfg.kv.host_bytes = 64 << 20;
  const RunStats s = together(cfg);
  EXPECT_GT(s.engine.preemptions, 0) << "the pool must be small enough to force preemption";
  EXPECT_GT(s.final_kv.swap_outs, 0) << "victims must have been swapped";
  EXPECT_GT(s.final_kv.swap_ins, 0);
  EXPECT_GT(s.final_kv.host_spills, 0);
  EXPECT_GT(s.final_kv.host_fetches, 0);
  EXPECT_EQ(s.final_kv.file_spills, 0) << "there is no file tier";
  EXPECT_EQ(s.final_kv.cold_read_failures, 0);
  EXPECT_GT(s.final_kv.host.slots, 0);
  EXPECT_GT(s.engine.kv.transfer.cold_bytes + s.engine.kv_device_transfer.bytes_to_host, 0u) << "spills were timed";
}

TEST(EngineHostTier, RecomputeUnderPressureWithAHostTierKeepsEveryRequestsTokens) {
  REQUIRE_DEVICE();
  EngineConfig cfg = config(kTightBlocks, PreemptMode::kRecompute);
  cfg.kv.host_bytes = 64 << 20;
  const RunStats s = together(cfg);
  EXPECT_GT(s.engine.preemptions, 0);
  EXPECT_EQ(s.final_kv.swap_outs, 0) << "recompute never swaps";
  EXPECT_EQ(s.final_kv.cold_read_failures, 0);
}

TEST(EngineHostTier, AutoPreemptionUnderPressureKeepsEveryRequestsTokens) {
  REQUIRE_DEVICE();
  EngineConfig cfg = config(kTightBlocks, PreemptMode::kAuto);
  cfg.kv.host_bytes = 64 << 20;
  const RunStats s = together(cfg);
  EXPECT_GT(s.engine.preemptions, 0);
  EXPECT_EQ(s.final_kv.cold_read_failures, 0);
}

// A swap-preempting engine with room for 4 blocks in host memory (a block of stories260K is well
// under 64 KiB with its frame) and a spill file below it for the rest.
EngineConfig small_host_above_file(const std::string& dir) {
  EngineConfig cfg = config(kTightBlocks, PreemptMode::kSwap);
  Engine probe(*loaded().model, *loaded().tok, config(4, PreemptMode::kRecompute));
  const uint64_t block = probe.stats().kv.hot.bytes_total / 4;
  probe.shutdown(false);
  cfg.kv.host_bytes = 4 * (block + 8);
  cfg.kv.spill_dir = dir;
  cfg.kv.spill_bytes = 64 << 20;
  return cfg;
}

TEST(EngineHostTier, TheFileTakesWhatAFullHostTierCannotWithTheSameTokens) {
  REQUIRE_DEVICE();
  const std::string dir = test::make_temp_dir("strata-host-file");
  {
    EngineConfig cfg = small_host_above_file(dir);
    cfg.kv.host_migrate = false;
    const RunStats s = together(cfg);
    EXPECT_EQ(s.final_kv.host.slots, 4);
    EXPECT_GT(s.final_kv.file.slots, 0);
    EXPECT_GT(s.final_kv.swap_outs, 0);
    EXPECT_GT(s.final_kv.host_spills, 0) << "host slots are taken first";
    EXPECT_GT(s.final_kv.file_spills, 0) << "the file takes what the full host tier cannot";
    EXPECT_GT(s.final_kv.file_fetches, 0);
    EXPECT_EQ(s.final_kv.file_migrations, 0) << "migration is off";
    EXPECT_EQ(s.final_kv.cold_read_failures, 0);
  }
  std::filesystem::remove_all(dir);
}

TEST(EngineHostTier, AFullHostTierMovesItsOldestBlocksDownToTheFileWithTheSameTokens) {
  REQUIRE_DEVICE();
  const std::string dir = test::make_temp_dir("strata-host-file");
  {
    const RunStats s = together(small_host_above_file(dir));  // every output equals its run alone
    EXPECT_EQ(s.final_kv.host.slots, 4);
    EXPECT_GT(s.final_kv.swap_outs, 0);
    EXPECT_GT(s.final_kv.file_migrations, 0) << "the full host tier must have made room by moving blocks down";
    EXPECT_EQ(s.final_kv.migrated_bytes, static_cast<uint64_t>(s.final_kv.file_migrations) * s.final_kv.hot.bytes_total /
                                             static_cast<uint64_t>(s.final_kv.hot.slots));
    EXPECT_GT(s.final_kv.file_fetches, 0) << "moved blocks were read back from the file";
    EXPECT_GT(s.final_kv.host_fetches, 0);
    EXPECT_GT(s.final_kv.host_spills, s.final_kv.file_spills) << "new blocks take the host slots";
    EXPECT_EQ(s.final_kv.cold_read_failures, 0);
  }
  std::filesystem::remove_all(dir);
}

TEST(EngineHostTier, APrefixHitReadBackFromHostMemoryGivesTheTokensOfAMiss) {
  REQUIRE_DEVICE();
  const auto& base = test::story_prompts();
  const std::string long_prompt = base[6] + " " + base[3];  // several full blocks
  // The miss: on a fresh engine without a cold tier, nothing cached.
  Engine fresh(*loaded().model, *loaded().tok, config(1024, PreemptMode::kRecompute));
  const Result miss = collect(*fresh.submit(make_request(long_prompt, kMaxTokens)));
  EXPECT_EQ(miss.usage.cached_tokens, 0);
  expect_drained(fresh);

  // A 12-block pool with a host tier: the long prompt, then the others one by one push its cached
  // blocks out of the pool into host memory, then the long prompt again finds them there.
  EngineConfig cfg = config(12, PreemptMode::kSwap);
  cfg.kv.host_bytes = 64 << 20;
  Engine e(*loaded().model, *loaded().tok, cfg);
  const Result first = collect(*e.submit(make_request(long_prompt, kMaxTokens)));
  EXPECT_EQ(first.tokens, miss.tokens);
  for (size_t i = 0; i < base.size(); ++i) {
    if (i == 6) continue;  // shares the long prompt's first block
    (void)collect(*e.submit(make_request(base[i] + " and then", 40)));
  }
  const KvStats before = e.stats().kv;
  EXPECT_GT(before.host_spills, 0) << "the long prompt's cached blocks must have left the pool";
  const Result hit = collect(*e.submit(make_request(long_prompt, kMaxTokens)));
  const KvStats after = expect_drained(e);
  EXPECT_EQ(hit.tokens, miss.tokens);
  EXPECT_GT(hit.usage.cached_tokens, 0) << "counted as a prefix hit";
  EXPECT_GT(after.prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_GT(after.host_fetches, before.host_fetches) << "the hit was read back from host memory";
  EXPECT_EQ(after.cold_read_failures, 0);
}

}  // namespace
}  // namespace strata
