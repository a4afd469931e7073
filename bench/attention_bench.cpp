// Decode attention over a warm KV tier, and what re-encoding into it costs, in one run.
//
// Geometry of llama-134m: 12 layers, 12 query heads, 12 KV heads, head_dim 64, blocks of 16
// tokens, hot tier f16. For each context length, BATCH sequences of CTX tokens are laid out by a
// real KvManager exactly as in serving (allocate, keys and values written by kv_store, commit of
// the CTX-1 tokens before the decode token, apply), so with a warm format every full block
// older than the 64-token hot window is re-encoded by warm_encode into the warm pool and the
// block tables mix hot and warm ids. One decode step (one query token per sequence) then runs
// cpu::paged_attention on all 12 layers in turn, as the forward pass does, so each layer's KV
// comes from memory rather than cache. All formats of a context length are set up first and timed
// in interleaved rounds (a round of each in turn, 9 times); the median round is reported.
//
// Re-encode cost is measured twice: warm_encode alone on one thread over blocks of one layer
// (an arena bigger than the caches, each block once per pass), and KvStorage::execute() of the
// planned re-encodes (the "apply()" columns) during the setup above (all 12 layers of a block, spread over the thread pool as in serving; the pools'
// memory was touched by an earlier round of sequences, so page faults are not counted).
//
// Importance: the all-hot decode step once more with every sequence asking for its keys'
// attention mass (AttentionSeq::importance, as under --kv-evict), in the same interleaved rounds.
//
//   build/bin/attention_bench [THREADS [BATCH [CTX ...]]]     (defaults: 2, 8, 512 2048)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "kv/kv_arena.h"
#include "kv/kv_config.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "kv/warm_format.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int32_t kLayers = 12;
constexpr int32_t kHeads = 12;
constexpr int32_t kKvHeads = 12;
constexpr int32_t kHeadDim = 64;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kHotTokens = 64;
constexpr WarmFormat kFormats[] = {WarmFormat::kNone, WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4};

const KvGeometry kGeometry{kLayers, kKvHeads, kHeadDim, kBlockSize, KvDtype::kF16};

// Uniform in [-1, 1) from xorshift64*: fast enough for the hundreds of MiB of K and V set up here.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<float>((state_ * 0x2545F4914F6CDD1Dull) >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }
  void fill(std::vector<float>& v) {
    for (float& x : v) x = next();
  }

 private:
  uint64_t state_;
};

// Bytes of one warm slot of one layer, K and V, scales included.
int64_t warm_slot_layer_bytes(WarmFormat f) {
  return warm_slot_bytes(f, false, kBlockSize, kKvHeads, kHeadDim) +
         warm_slot_bytes(f, true, kBlockSize, kKvHeads, kHeadDim);
}

// Bytes of K and V per token of one layer in a tier: hot f16, or a warm slot's share.
double bytes_per_token_layer(WarmFormat f) {
  if (f == WarmFormat::kNone) return static_cast<double>(kGeometry.bytes_per_token()) / kLayers;
  return static_cast<double>(warm_slot_layer_bytes(f)) / (warm_span(f, kBlockSize) * kBlockSize);
}

// A KvManager holding `batch` sequences of `ctx` tokens at the moment of their next decode step.
struct DecodeState {
  std::unique_ptr<KvStorage> storage;  // the bytes
  std::unique_ptr<KvManager> kv;       // the bookkeeping
  std::vector<std::vector<TokenId>> tokens;  // [batch][ctx]
  int64_t warm_tokens = 0;                   // over all sequences
  int64_t reencoded_blocks = 0;
  double reencode_seconds = 0;               // execute() of the re-encodes
};

DecodeState make_state(WarmFormat f, int32_t ctx, int32_t batch, ThreadPool& pool) {
  KvConfig cfg;
  cfg.block_size = kBlockSize;
  cfg.dtype = KvDtype::kF16;
  cfg.prefix_cache = false;  // random sequences share nothing; keeps the tables as allocated
  cfg.hot_tokens = kHotTokens;
  cfg.warm_format = f;
  // Pools just big enough: every block hot until the re-encode, then one warm slot per group.
  const int64_t blocks = int64_t{batch} * ((ctx + kBlockSize - 1) / kBlockSize);
  if (f == WarmFormat::kNone) {
    cfg.num_blocks = static_cast<int32_t>(blocks);
  } else {
    const int32_t span = warm_span(f, kBlockSize);
    const uint64_t slot = static_cast<uint64_t>(kLayers) * static_cast<uint64_t>(warm_slot_layer_bytes(f));
    const uint64_t warm_bytes = static_cast<uint64_t>(blocks / span + batch + 1) * slot;
    const uint64_t hot_bytes = static_cast<uint64_t>(blocks + 1) * kGeometry.bytes_per_block();
    cfg.memory_bytes = warm_bytes + hot_bytes;
    cfg.warm_fraction = static_cast<double>(warm_bytes) / static_cast<double>(warm_bytes + hot_bytes);
  }

  DecodeState st;
  st.storage = std::make_unique<KvStorage>(kGeometry, cfg, &pool);
  st.kv = std::make_unique<KvManager>(kGeometry, cfg, st.storage->capacity(), /*fingerprint=*/134);
  KvManager& kv = *st.kv;
  const std::span<const KvLayerView> views = st.storage->views();
  Random rng(static_cast<uint64_t>(ctx) * 8 + static_cast<uint64_t>(f));
  const int64_t row = int64_t{kKvHeads} * kHeadDim;
  std::vector<float> k(static_cast<size_t>(ctx * row)), v(k.size());
  std::vector<int32_t> slots(static_cast<size_t>(ctx));
  for (int32_t s = 0; s < batch; ++s) {
    std::vector<TokenId>& toks = st.tokens.emplace_back(static_cast<size_t>(ctx));
    for (int32_t i = 0; i < ctx; ++i) toks[static_cast<size_t>(i)] = (s * 7919 + i * 31) % 32000;
  }
  // Pass 0 touches the pools' memory and frees it again, so that pass 1, the one kept, re-encodes
  // into slots already mapped, as in a server that has been running for a while.
  for (int pass = 0; pass < 2; ++pass) {
    const SeqId base = pass == 0 ? batch : 0;
    for (int32_t s = 0; s < batch; ++s) {
      const std::vector<TokenId>& toks = st.tokens[static_cast<size_t>(s)];
      kv.add_sequence(base + s);
      STRATA_CHECK(kv.allocate(base + s, toks, ctx), "KV pools too small for {} tokens", ctx);
      const std::span<const BlockId> table = kv.block_table(base + s);
      for (int32_t i = 0; i < ctx; ++i) {
        slots[static_cast<size_t>(i)] = table[static_cast<size_t>(i / kBlockSize)] * kBlockSize + i % kBlockSize;
      }
      // The same random rows in every layer: the kernels' cost does not depend on the values.
      rng.fill(k);
      rng.fill(v);
      for (int32_t l = 0; l < kLayers; ++l) {
        cpu::kv_store(views[static_cast<size_t>(l)], k.data(), v.data(), slots.data(), ctx);
      }
    }
    // The decode token's K/V is written; the tokens before it were committed by the previous step.
    for (int32_t s = 0; s < batch; ++s) kv.commit(base + s, st.tokens[static_cast<size_t>(s)], ctx - 1);
    const int64_t before = kv.stats().reencoded_blocks;
    const auto t0 = Clock::now();
    const std::vector<KvOp> ops = kv.take_ops();
    kv.complete(ops, st.storage->execute(ops));
    st.reencode_seconds = seconds_since(t0);
    st.reencoded_blocks = kv.stats().reencoded_blocks - before;
    if (pass == 0) {
      for (int32_t s = 0; s < batch; ++s) kv.free_sequence(base + s);
    }
  }
  const int32_t n_hot = views[0].n_hot_blocks;
  for (int32_t s = 0; s < batch; ++s) {
    for (BlockId b : kv.block_table(s)) st.warm_tokens += b >= n_hot ? kBlockSize : 0;
  }
  return st;
}

constexpr int kRounds = 9;
constexpr double kRoundSeconds = 0.2;

// One decode step over a DecodeState: a query token per sequence at position ctx - 1, attention of
// every layer in turn. Steps of all formats are timed in interleaved rounds (see run()), so that
// drifts of the machine's speed hit them alike.
class DecodeStep {
 public:
  // `importance`: each sequence also asks for the attention mass of its keys (--kv-evict's
  // importance), into one buffer per sequence zeroed once per step, as the engine does.
  DecodeStep(const DecodeState& st, int32_t ctx, int32_t batch, bool importance = false) : views_(st.storage->views()) {
    if (importance) importance_.assign(static_cast<size_t>(batch), std::vector<float>(static_cast<size_t>(ctx)));
    for (int32_t s = 0; s < batch; ++s) {
      const std::span<const BlockId> table = st.kv->block_table(s);
      seqs_.push_back({s, 1, ctx - 1, table.data(), static_cast<int32_t>(table.size())});
      if (importance) seqs_.back().importance = importance_[static_cast<size_t>(s)].data();
    }
    q_.resize(static_cast<size_t>(batch) * kHeads * kHeadDim);
    out_.resize(q_.size());
    Random rng(99);
    rng.fill(q_);
  }

  void run(ThreadPool& pool) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    for (std::vector<float>& m : importance_) std::fill(m.begin(), m.end(), 0.0f);
    for (const KvLayerView& layer : views_) {
      cpu::paged_attention(q_.data(), layer, seqs_, kHeads, scale, out_.data(), pool, scratch_);
    }
  }

  // Warm-up (scratch sizes, thread wake-up), then the number of steps that fill a round.
  void calibrate(ThreadPool& pool) {
    for (int i = 0; i < 2; ++i) run(pool);
    const auto t0 = Clock::now();
    run(pool);
    steps_per_round_ = std::max(1, static_cast<int>(kRoundSeconds / seconds_since(t0)));
  }

  void time_round(ThreadPool& pool) {
    const auto t0 = Clock::now();
    for (int i = 0; i < steps_per_round_; ++i) run(pool);
    rounds_.push_back(seconds_since(t0) / steps_per_round_);
  }

  // Median, fastest and slowest seconds per step over the rounds timed.
  double step_seconds() const { return sorted_rounds()[rounds_.size() / 2]; }
  double min_step_seconds() const { return sorted_rounds().front(); }
  double max_step_seconds() const { return sorted_rounds().back(); }

  bool outputs_finite() const {
    return std::all_of(out_.begin(), out_.end(), [](float x) { return std::isfinite(x); });
  }

 private:
  std::vector<double> sorted_rounds() const {
    std::vector<double> r = rounds_;
    std::sort(r.begin(), r.end());
    return r;
  }

  std::span<const KvLayerView> views_;
  std::vector<cpu::AttentionSeq> seqs_;
  std::vector<float> q_, out_;  // [batch][kHeads][kHeadDim]
  std::vector<std::vector<float>> importance_;  // [batch][ctx] or empty
  cpu::KernelScratch scratch_;
  int steps_per_round_ = 1;
  std::vector<double> rounds_;  // seconds per step
};

// warm_encode alone, one thread: every group of `span` blocks of a one-layer arena bigger than the
// caches, once per pass; the best of 5 passes, in seconds per block.
double time_warm_encode(WarmFormat f) {
  const KvGeometry g{1, kKvHeads, kHeadDim, kBlockSize, KvDtype::kF16};
  const int32_t n_blocks = 2048;  // 96 MiB of f16 K and V
  KvArena arena(g, n_blocks);
  const KvLayerView hot = arena.layer(0);
  {
    Random rng(7);
    const int64_t row = int64_t{kKvHeads} * kHeadDim;
    std::vector<float> k(static_cast<size_t>(int64_t{kBlockSize} * row)), v(k.size());
    std::vector<int32_t> slots(kBlockSize);
    for (BlockId b = 0; b < n_blocks; ++b) {
      rng.fill(k);
      rng.fill(v);
      for (int32_t i = 0; i < kBlockSize; ++i) slots[static_cast<size_t>(i)] = b * kBlockSize + i;
      cpu::kv_store(hot, k.data(), v.data(), slots.data(), kBlockSize);
    }
  }
  const int32_t span = warm_span(f, kBlockSize);
  const int64_t k_bytes = warm_slot_bytes(f, false, kBlockSize, kKvHeads, kHeadDim);
  const int64_t v_bytes = warm_slot_bytes(f, true, kBlockSize, kKvHeads, kHeadDim);
  const int32_t n_slots = n_blocks / span;
  std::vector<uint8_t> warm(static_cast<size_t>((k_bytes + v_bytes) * n_slots));
  std::vector<BlockId> ids(static_cast<size_t>(n_blocks));
  for (BlockId b = 0; b < n_blocks; ++b) ids[static_cast<size_t>(b)] = b;
  double best = 1e30;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    for (int32_t w = 0; w < n_slots; ++w) {
      uint8_t* k_slot = warm.data() + static_cast<size_t>(w) * static_cast<size_t>(k_bytes + v_bytes);
      warm_encode(f, hot, ids.data() + int64_t{w} * span, span, k_slot, k_slot + k_bytes);
    }
    best = std::min(best, seconds_since(t0) / (int64_t{n_slots} * span));
  }
  return best;
}

int run(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int32_t batch = argc > 2 ? std::atoi(argv[2]) : 8;
  std::vector<int32_t> ctxs;
  for (int i = 3; i < argc; ++i) ctxs.push_back(std::atoi(argv[i]));
  if (ctxs.empty()) ctxs = {512, 2048};
  constexpr int32_t kMinCtx = kHotTokens + 2 * 32;  // room for at least one warm int4 slot
  if (threads < 1 || batch < 1 || std::any_of(ctxs.begin(), ctxs.end(), [](int32_t c) { return c < kMinCtx; })) {
    std::fprintf(stderr, "usage: attention_bench [THREADS [BATCH [CTX ...]]]  (THREADS, BATCH >= 1, CTX >= %d)\n",
                 kMinCtx);
    return 2;
  }
  ThreadPool pool(threads);
  std::printf("geometry: llama-134m (%d layers, %d heads, %d KV heads, head_dim %d), block %d, hot f16, "
              "hot window %d tokens\n",
              kLayers, kHeads, kKvHeads, kHeadDim, kBlockSize, kHotTokens);
  std::printf("threads: %d (ThreadPool, for attention and apply()); machine: %u hardware threads, %d physical cores; "
              "SIMD %s\n",
              threads, std::thread::hardware_concurrency(), ThreadPool::physical_cores(),
              std::string(cpu::simd_target_name()).c_str());
  std::printf("decode step: %d sequences x 1 query token, paged_attention on all %d layers in turn; median of %d "
              "rounds of ~%.1f s, the formats taking turns\n\n",
              batch, kLayers, kRounds, kRoundSeconds);

  struct Reencode {
    int64_t blocks = 0;
    double seconds = 0;
  };
  Reencode apply_cost[std::size(kFormats)];
  std::printf("| ctx | KV tier of old tokens | warm share of keys | KV bytes/token/layer | us per layer (batch %d) | "
              "rounds min-max | us per token per layer | tokens/s (attention, %d layers) | vs all hot | "
              "KV read GB/s |\n",
              batch, kLayers);
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  constexpr size_t kN = std::size(kFormats);
  struct ImportanceRow {
    int32_t ctx;
    double off, on, on_min, on_max, off_min, off_max;  // seconds per step
  };
  std::vector<ImportanceRow> importance_rows;
  for (int32_t ctx : ctxs) {
    std::vector<DecodeState> states;
    for (size_t i = 0; i < kN; ++i) {
      states.push_back(make_state(kFormats[i], ctx, batch, pool));
      apply_cost[i].blocks += states.back().reencoded_blocks;
      apply_cost[i].seconds += states.back().reencode_seconds;
    }
    std::vector<std::unique_ptr<DecodeStep>> steps;
    for (const DecodeState& st : states) {
      steps.push_back(std::make_unique<DecodeStep>(st, ctx, batch));
      steps.back()->calibrate(pool);
    }
    // The all-hot state once more with importance on, taking its turn with the others.
    steps.push_back(std::make_unique<DecodeStep>(states[0], ctx, batch, /*importance=*/true));
    steps.back()->calibrate(pool);
    for (int r = 0; r < kRounds; ++r) {
      for (size_t k = 0; k <= kN; ++k) steps[(static_cast<size_t>(r) + k) % (kN + 1)]->time_round(pool);
    }
    importance_rows.push_back({ctx, steps[0]->step_seconds(), steps[kN]->step_seconds(), steps[kN]->min_step_seconds(),
                               steps[kN]->max_step_seconds(), steps[0]->min_step_seconds(), steps[0]->max_step_seconds()});
    const double hot_step = steps[0]->step_seconds();
    for (size_t i = 0; i < kN; ++i) {
      const WarmFormat f = kFormats[i];
      STRATA_CHECK(steps[i]->outputs_finite(), "attention produced a non-finite output");
      const double step = steps[i]->step_seconds();
      const double warm_share = static_cast<double>(states[i].warm_tokens) / (static_cast<double>(batch) * ctx);
      const double bytes_layer =
          (1.0 - warm_share) * bytes_per_token_layer(WarmFormat::kNone) + warm_share * bytes_per_token_layer(f);
      const double per_layer = step / kLayers;
      const std::string tier = f == WarmFormat::kNone ? "hot f16 (all hot)" : std::string(warm_format_name(f));
      std::printf("| %d | %s | %.3f | %.0f | %.1f | %.0f-%.0f | %.1f | %.1f | %.2fx | %.1f |\n", ctx, tier.c_str(),
                  warm_share, bytes_layer, per_layer * 1e6, steps[i]->min_step_seconds() / kLayers * 1e6,
                  steps[i]->max_step_seconds() / kLayers * 1e6, per_layer / batch * 1e6, batch / step, hot_step / step,
                  bytes_layer * ctx * batch * kLayers / step / 1e9);
    }
  }
  std::printf("\n(tokens/s counts attention only: %d sequences / decode step time; vs all hot > 1 means faster.)\n\n",
              batch);
  std::printf("importance (--kv-evict): all hot f16, every sequence also asking for the attention mass of its keys, "
              "timed in the same interleaved rounds:\n");
  std::printf("| ctx | us per layer, off (min-max) | us per layer, on (min-max) | on / off (medians) |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (const ImportanceRow& r : importance_rows) {
    std::printf("| %d | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.3f |\n", r.ctx, r.off / kLayers * 1e6,
                r.off_min / kLayers * 1e6, r.off_max / kLayers * 1e6, r.on / kLayers * 1e6, r.on_min / kLayers * 1e6,
                r.on_max / kLayers * 1e6, r.on / r.off);
  }
  std::printf("\n");

  const double block_layer_bytes = static_cast<double>(kGeometry.bytes_per_block()) / kLayers;
  std::printf("re-encode, per block of %d tokens (f16 K+V in: %.0f KiB per layer, %.0f KiB for %d layers):\n",
              kBlockSize, block_layer_bytes / 1024, block_layer_bytes * kLayers / 1024, kLayers);
  std::printf("| format | warm bytes per block per layer | warm_encode us/block/layer (1 thread) | "
              "warm_encode MB/s in | apply() us/block, %d layers (%d threads) | apply() us/block/layer | "
              "apply() MB/s in | blocks timed in apply() |\n",
              kLayers, threads);
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t i = 1; i < std::size(kFormats); ++i) {
    const WarmFormat f = kFormats[i];
    const double enc = time_warm_encode(f);
    const double app = apply_cost[i].seconds / static_cast<double>(std::max<int64_t>(apply_cost[i].blocks, 1));
    std::printf("| %s | %.0f | %.2f | %.0f | %.1f | %.2f | %.0f | %lld |\n", std::string(warm_format_name(f)).c_str(),
                bytes_per_token_layer(f) * kBlockSize, enc * 1e6, block_layer_bytes / enc / 1e6, app * 1e6,
                app / kLayers * 1e6, block_layer_bytes * kLayers / app / 1e6,
                static_cast<long long>(apply_cost[i].blocks));
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::run(argc, argv); }
