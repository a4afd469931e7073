// A failing cold tier never crashes the engine nor changes a token. Reads that fail (the store
// reports an I/O error, or returns short or garbage bytes, or the spill file was damaged behind
// the store's back) are counted in KvStats::cold_read_failures; a swapped-out sequence whose
// blocks cannot be read back recomputes them, a prefix hit from the cold tier becomes a miss, and
// greedy tokens stay exactly those of each prompt alone. A sequence that loses its KV more often
// than EngineConfig::max_kv_losses fails with a kError event (then kDone), and the engine keeps
// serving the other requests and new ones.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/stories_model.h"
#include "support/test_support.h"

namespace strata {
namespace {

// The test double: an in-memory ColdStore whose reads fail on demand.
class FlakyColdStore : public ColdStore {
 public:
  enum class Mode : int { kOk, kThrow, kShort, kGarbage };

  FlakyColdStore(int64_t num_slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<int>> mode)
      : slots_(static_cast<size_t>(num_slots)), slot_bytes_(slot_bytes), mode_(std::move(mode)) {}

  int64_t num_slots() const override { return static_cast<int64_t>(slots_.size()); }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override { return "flaky test store"; }
  void write(int64_t slot, std::vector<uint8_t> bytes) override { slots_.at(static_cast<size_t>(slot)) = std::move(bytes); }
  uint64_t read(int64_t slot, uint64_t n) override {
    reads_[next_ticket_] = {slot, n};
    return next_ticket_++;
  }
  std::vector<uint8_t> wait(uint64_t ticket) override {
    const auto [slot, n] = reads_.at(ticket);
    reads_.erase(ticket);
    std::vector<uint8_t> b = slots_.at(static_cast<size_t>(slot));
    b.resize(n);
    switch (static_cast<Mode>(mode_->load())) {
      case Mode::kOk: break;
      case Mode::kThrow: fail("flaky test store: read of slot {} failed", slot);
      case Mode::kShort: b.resize(n / 2); break;
      case Mode::kGarbage:
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(b[i] * 13 + i);
        break;
    }
    return b;
  }
  void drain() override {}

 private:
  std::vector<std::vector<uint8_t>> slots_;
  uint64_t slot_bytes_;
  std::shared_ptr<std::atomic<int>> mode_;
  std::map<uint64_t, std::pair<int64_t, uint64_t>> reads_;  // ticket -> (slot, bytes)
  uint64_t next_ticket_ = 1;
};

test::StoriesModel& shared() { return test::stories(); }

const std::vector<std::string> kPrompts(test::story_prompts().begin(), test::story_prompts().begin() + 6);
constexpr int32_t kMaxTokens = 24;

Request greedy(const std::string& prompt) {
  Request r;
  r.prompt = shared().tok->encode(prompt, true, false);
  r.params.temperature = 0;
  r.params.max_tokens = kMaxTokens;
  return r;
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::string error;       // of a kError event
  bool token_after_error = false;
  bool done = false;
};

Outcome collect(RequestHandle& h) {
  Outcome o;
  EngineEvent e;
  while (h.next(e)) {
    if (e.kind == EngineEvent::Kind::kToken) {
      o.tokens.push_back(e.token);
      o.token_after_error = o.token_after_error || !o.error.empty();
    }
    if (e.kind == EngineEvent::Kind::kError) o.error = e.error.empty() ? "?" : e.error;
    if (e.kind == EngineEvent::Kind::kDone) o.done = true;
  }
  return o;
}

// Each prompt alone, with plenty of memory (computed once).
const std::vector<std::vector<TokenId>>& alone() {
  static const std::vector<std::vector<TokenId>> ref = [] {
    EngineConfig c;
    c.kv.dtype = KvDtype::kF32;
    c.kv.num_blocks = 256;
    Engine e(*shared().model, *shared().tok, c);
    std::vector<std::vector<TokenId>> out;
    for (const auto& p : kPrompts) out.push_back(collect(*e.submit(greedy(p))).tokens);
    return out;
  }();
  return ref;
}

EngineConfig small_pool(int32_t blocks) {
  EngineConfig c;
  c.kv.block_size = 16;
  c.kv.dtype = KvDtype::kF32;
  c.kv.num_blocks = blocks;
  c.sched.preempt = PreemptMode::kSwap;
  c.sched.max_batched_tokens = 64;
  return c;
}

void with_flaky_store(EngineConfig& c, std::shared_ptr<std::atomic<int>> mode) {
  c.kv.cold_store_factory = [mode](uint64_t slot_bytes) -> std::unique_ptr<ColdStore> {
    return std::make_unique<FlakyColdStore>(4096, slot_bytes, mode);
  };
}

// Shuts the engine down, checks that every block is free and returns its final stats (the
// stats are published after each step, so only after shutdown do they include the last one).
EngineStats expect_drained(Engine& e) {
  e.shutdown(true, std::chrono::seconds(60));
  const KvManager& kv = e.kv_after_shutdown();
  kv.check_invariants();
  const KvStats st = kv.stats();
  EXPECT_EQ(st.hot.used, 0);
  EXPECT_EQ(st.cold.used, 0);
  EXPECT_EQ(st.sequences, 0);
  return e.stats();
}

std::string mode_name(FlakyColdStore::Mode m) {
  switch (m) {
    case FlakyColdStore::Mode::kOk: return "ok";
    case FlakyColdStore::Mode::kThrow: return "io_error";
    case FlakyColdStore::Mode::kShort: return "short_read";
    case FlakyColdStore::Mode::kGarbage: return "garbage";
  }
  return "?";
}

class SwapInFailure : public ::testing::TestWithParam<FlakyColdStore::Mode> {};

TEST_P(SwapInFailure, SwappedSequencesRecomputeAndKeepTheirTokens) {
  const auto& ref = alone();
  auto mode = std::make_shared<std::atomic<int>>(static_cast<int>(GetParam()));
  EngineConfig cfg = small_pool(10);
  with_flaky_store(cfg, mode);
  Engine e(*shared().model, *shared().tok, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : kPrompts) handles.push_back(e.submit(greedy(p)));
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome o = collect(*handles[i]);
    EXPECT_EQ(o.tokens, ref[i]) << "prompt " << i;
    EXPECT_EQ(o.error, "") << "prompt " << i;
    EXPECT_TRUE(o.done);
  }
  const EngineStats st = expect_drained(e);
  EXPECT_GT(st.kv.swap_ins, 0) << "sequences must have been swapped out and back in";
  EXPECT_GT(st.kv.cold_read_failures, 0);
  EXPECT_EQ(st.kv.spill_bytes_in, 0u) << "no read may have succeeded";
  EXPECT_EQ(st.requests_failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, SwapInFailure,
                         ::testing::Values(FlakyColdStore::Mode::kThrow, FlakyColdStore::Mode::kShort,
                                           FlakyColdStore::Mode::kGarbage),
                         [](const auto& info) { return mode_name(info.param); });

// Prompts run twice in a row through a pool too small to keep their cached prefixes: the second
// round's prefix hits come from the cold tier.
void two_rounds(Engine& e, const std::function<void(int, size_t)>& before_request) {
  const auto& ref = alone();
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      before_request(round, i);
      const Outcome o = collect(*e.submit(greedy(kPrompts[i])));
      EXPECT_EQ(o.tokens, ref[i]) << "round " << round << ", prompt " << i;
      EXPECT_EQ(o.error, "");
    }
  }
}

TEST(ColdFailure, PrefixHitsThatCannotBeReadBecomeMisses) {
  auto mode = std::make_shared<std::atomic<int>>(static_cast<int>(FlakyColdStore::Mode::kOk));
  EngineConfig cfg = small_pool(6);
  with_flaky_store(cfg, mode);
  Engine e(*shared().model, *shared().tok, cfg);
  two_rounds(e, [&](int round, size_t) {
    if (round == 1) mode->store(static_cast<int>(FlakyColdStore::Mode::kGarbage));
  });
  const KvStats st = expect_drained(e).kv;
  EXPECT_GT(st.spill_bytes_out, 0u);
  EXPECT_GT(st.cold_read_failures, 0);
  EXPECT_EQ(st.spill_bytes_in, 0u);
}

TEST(ColdFailure, AHostileSpillFileIsACountedMissNeverAWrongToken) {
  const std::string dir = test::make_temp_dir("strata-engine-hostile");
  EngineConfig cfg = small_pool(6);
  cfg.kv.spill_dir = dir;
  cfg.kv.spill_bytes = 2 << 20;
  int64_t garbage_failures = 0;
  {
    Engine e(*shared().model, *shared().tok, cfg);
    const int fd = test::reopen_open_file(0, "strata-kv-spill-");
    ASSERT_GE(fd, 0);
    // In the second round, before each request (the engine is idle then), overwrite the whole
    // file with garbage.
    two_rounds(e, [&](int round, size_t) {
      if (round != 1) return;
      std::vector<uint8_t> junk(1 << 16);
      for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 7 + 3);
      for (off_t off = 0; off < (2 << 20); off += static_cast<off_t>(junk.size())) {
        ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), off), static_cast<ssize_t>(junk.size()));
      }
    });
    ::close(fd);
    const KvStats st = expect_drained(e).kv;
    garbage_failures = st.cold_read_failures;
    EXPECT_GT(garbage_failures, 0);
    EXPECT_EQ(st.spill_bytes_in, 0u) << "every block read back was garbage";
  }
  // (A truncated file fails its reads as well: kv/cold_store_test.cpp; short reads through the
  // engine: SwapInFailure/short_read.)
  std::filesystem::remove_all(dir);
}

TEST(ColdFailure, ASequenceThatKeepsLosingItsKvFailsAloneWithAnErrorEvent) {
  const auto& ref = alone();
  auto mode = std::make_shared<std::atomic<int>>(static_cast<int>(FlakyColdStore::Mode::kThrow));
  EngineConfig cfg = small_pool(10);
  cfg.max_kv_losses = 0;  // the first loss is fatal for its request
  with_flaky_store(cfg, mode);
  Engine e(*shared().model, *shared().tok, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : kPrompts) handles.push_back(e.submit(greedy(p)));
  int failed = 0, failed_mid_stream = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome o = collect(*handles[i]);
    EXPECT_TRUE(o.done) << "kDone always ends the stream";
    if (o.error.empty()) {
      EXPECT_EQ(o.tokens, ref[i]) << "prompt " << i;
      continue;
    }
    ++failed;
    failed_mid_stream += !o.tokens.empty();
    EXPECT_NE(o.error.find("cold tier"), std::string::npos) << o.error;
    EXPECT_FALSE(o.token_after_error);
    ASSERT_LE(o.tokens.size(), ref[i].size());
    EXPECT_EQ(o.tokens, std::vector<TokenId>(ref[i].begin(), ref[i].begin() + static_cast<long>(o.tokens.size())))
        << "the tokens before the error are right";
  }
  EXPECT_GT(failed, 0) << "swapped-out sequences could not come back";
  EXPECT_GT(failed_mid_stream, 0) << "an error after some tokens";
  EXPECT_LT(failed, static_cast<int>(kPrompts.size())) << "the others are served";
  // The engine keeps serving.
  mode->store(static_cast<int>(FlakyColdStore::Mode::kOk));
  EXPECT_EQ(collect(*e.submit(greedy(kPrompts[3]))).tokens, ref[3]);
  const EngineStats st = expect_drained(e);
  EXPECT_EQ(st.requests_failed, failed);
  EXPECT_GT(st.kv.cold_read_failures, 0);
}

}  // namespace
}  // namespace strata
