// Eviction within sequences (KvManager::evict, the kCompact op of KvStorage) under random
// operations: appends, evictions with compaction, forks, frees and new sequences sharing prompts
// through the prefix cache (and, with recall, staging blocks loaded with garbage). After every operation each sequence's slots hold exactly its kept
// tokens, each at its original position, with its bytes intact, and check_invariants() holds.
// Also: attention over a compacted sequence equals attention over the same kept tokens written
// from scratch into a fresh table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"

namespace strata {
namespace {

const KvGeometry kGeo{2, 2, 4, 4, KvDtype::kF32};

KvConfig config(int32_t blocks) {
  KvConfig c;
  c.block_size = kGeo.block_size;
  c.dtype = kGeo.dtype;
  c.num_blocks = blocks;
  return c;
}

// The content of the token at position p of a sequence: a function of its tokens [0, p] (so that
// two sequences sharing a prefix through the prefix cache expect the same bytes).
uint32_t word(uint64_t prefix_hash, int32_t layer, bool value, int32_t e) {
  uint64_t x = prefix_hash * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(layer * 131 + (value ? 7 : 0) + e * 3 + 1);
  x ^= x >> 29;
  return static_cast<uint32_t>(x * 0xBF58476D1CE4E5B9ull >> 32);
}

struct Model {  // what a sequence must hold
  std::vector<TokenId> tokens;        // every token, by position
  std::vector<uint64_t> prefix_hash;  // [position]
  std::vector<uint8_t> dropped;       // [position]
};

class EvictWorld {
 public:
  explicit EvictWorld(int32_t blocks) : storage_(kGeo, config(blocks)), kv_(kGeo, config(blocks), storage_.capacity(), 42) {}

  void run_ops() {
    const std::vector<KvOp> ops = kv_.take_ops();
    if (ops.empty()) return;
    const auto st = storage_.execute(ops);
    kv_.complete(ops, st);
    for (KvOpStatus s : st) ASSERT_EQ(s, KvOpStatus::kOk);
  }

  void write_token(SeqId s, int32_t pos) {
    const Model& m = models_.at(s);
    const int32_t slot = pos - kv_.num_evicted(s);
    const BlockId b = kv_.block_table(s)[static_cast<size_t>(slot / kGeo.block_size)];
    for (int32_t l = 0; l < kGeo.n_layer; ++l) {
      const KvLayerView& v = storage_.views()[static_cast<size_t>(l)];
      const int64_t at = b * v.block_stride_bytes() + (slot % kGeo.block_size) * v.token_stride_bytes();
      for (int32_t e = 0; e < kGeo.n_kv_heads * kGeo.head_dim; ++e) {
        const uint32_t kw = word(m.prefix_hash[static_cast<size_t>(pos)], l, false, e);
        const uint32_t vw = word(m.prefix_hash[static_cast<size_t>(pos)], l, true, e);
        std::memcpy(v.k + at + e * 4, &kw, 4);
        std::memcpy(v.v + at + e * 4, &vw, 4);
      }
    }
  }

  // Grows s by `more` tokens (or starts it with `more` when new): allocate, execute, write, commit.
  bool grow(SeqId s, const std::vector<TokenId>& more) {
    Model& m = models_.at(s);
    const auto before = static_cast<int32_t>(m.tokens.size());
    for (TokenId t : more) {
      const uint64_t prev = m.prefix_hash.empty() ? 1469598103934665603ull : m.prefix_hash.back();
      m.tokens.push_back(t);
      m.prefix_hash.push_back(prev * 1099511628211ull ^ static_cast<uint64_t>(t + 1));
      m.dropped.push_back(0);
    }
    const auto n = static_cast<int32_t>(m.tokens.size());
    int32_t cached = 0;
    if (!kv_.allocate(s, m.tokens, n, &cached)) {
      m.tokens.resize(static_cast<size_t>(before));
      m.prefix_hash.resize(static_cast<size_t>(before));
      m.dropped.resize(static_cast<size_t>(before));
      return false;
    }
    run_ops();
    for (int32_t p = std::max(before, cached); p < n; ++p) write_token(s, p);
    kv_.commit(s, m.tokens, n);
    return true;
  }

  SeqId add(const std::vector<TokenId>& prompt) {
    const SeqId s = next_++;
    kv_.add_sequence(s);
    models_[s] = Model{};
    if (!grow(s, prompt)) {
      kv_.free_sequence(s);
      models_.erase(s);
      return -1;
    }
    return s;
  }

  void evict(SeqId s, std::mt19937& rng) {
    const std::vector<uint8_t> pinned = kv_.pinned_slots(s);
    const std::vector<int32_t> pos = kv_.slot_positions(s);
    std::vector<int32_t> drop;
    std::bernoulli_distribution coin(std::uniform_real_distribution<double>(0.05, 0.6)(rng));
    for (size_t i = 0; i < pos.size(); ++i) {
      if (!pinned[i] && coin(rng)) drop.push_back(static_cast<int32_t>(i));
    }
    std::shuffle(drop.begin(), drop.end(), rng);  // any order
    const auto moves = kv_.evict(s, drop);
    if (!moves) return;  // no block for a private copy: nothing changed
    for (int32_t d : drop) models_.at(s).dropped[static_cast<size_t>(pos[static_cast<size_t>(d)])] = 1;
    run_ops();
  }

  // --kv-recall's staging blocks: s holds 0..3 of them, and garbage is loaded into one (a kLoad);
  // no table's bytes may change (verify).
  void stage(SeqId s, std::mt19937& rng) {
    const int32_t held = kv_.set_recall_blocks(s, static_cast<int32_t>(rng() % 4));
    if (held > 0) {
      auto junk = std::make_shared<const std::vector<uint8_t>>(kGeo.bytes_per_block(), static_cast<uint8_t>(rng()));
      kv_.load_recall_block(s, static_cast<int32_t>(rng() % static_cast<uint32_t>(held)), std::move(junk));
    }
    run_ops();
  }

  void fork(SeqId parent) {
    const SeqId c = next_++;
    kv_.fork(parent, c);
    models_[c] = models_.at(parent);
  }

  void free(SeqId s) {
    kv_.free_sequence(s);
    models_.erase(s);
  }

  // Every sequence holds exactly its kept tokens at their positions, with their bytes.
  void verify() const {
    kv_.check_invariants();
    for (const auto& [s, m] : models_) {
      SCOPED_TRACE(::testing::Message() << "sequence " << s);
      const std::vector<int32_t> pos = kv_.slot_positions(s);
      std::vector<int32_t> expect;
      for (size_t p = 0; p < m.tokens.size(); ++p) {
        if (!m.dropped[p]) expect.push_back(static_cast<int32_t>(p));
      }
      std::vector<int32_t> got = pos;
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, expect);
      ASSERT_EQ(kv_.num_tokens(s) + kv_.num_evicted(s), static_cast<int32_t>(m.tokens.size()));
      const auto table = kv_.block_table(s);
      for (size_t i = 0; i < pos.size(); ++i) {
        const BlockId b = table[i / static_cast<size_t>(kGeo.block_size)];
        for (int32_t l = 0; l < kGeo.n_layer; ++l) {
          const KvLayerView& v = storage_.views()[static_cast<size_t>(l)];
          const int64_t at = b * v.block_stride_bytes() + static_cast<int64_t>(i % kGeo.block_size) * v.token_stride_bytes();
          for (int32_t e = 0; e < kGeo.n_kv_heads * kGeo.head_dim; ++e) {
            uint32_t kw, vw;
            std::memcpy(&kw, v.k + at + e * 4, 4);
            std::memcpy(&vw, v.v + at + e * 4, 4);
            const uint64_t h = m.prefix_hash[static_cast<size_t>(pos[i])];
            ASSERT_EQ(kw, word(h, l, false, e)) << "slot " << i << " position " << pos[i] << " layer " << l;
            ASSERT_EQ(vw, word(h, l, true, e)) << "slot " << i << " position " << pos[i] << " layer " << l;
          }
        }
      }
    }
  }

  std::vector<SeqId> ids() const {
    std::vector<SeqId> v;
    for (const auto& [s, m] : models_) v.push_back(s);
    return v;
  }
  const KvManager& kv() const { return kv_; }

 private:
  KvStorage storage_;
  KvManager kv_;
  std::map<SeqId, Model> models_;
  SeqId next_ = 1;
};

void random_operations(bool with_recall) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    EvictWorld w(48);
    // Three prompt families, so that new sequences share prefixes through the cache.
    std::vector<std::vector<TokenId>> prompts(3);
    for (auto& p : prompts) {
      for (int i = 0; i < 40; ++i) p.push_back(static_cast<TokenId>(rng() % 50));
    }
    std::uniform_int_distribution<int> op(0, with_recall ? 10 : 9);
    for (int step = 0; step < 250; ++step) {
      std::vector<SeqId> ids = w.ids();
      const int o = ids.empty() ? 0 : op(rng);
      if (o <= 1) {
        const auto& base = prompts[rng() % prompts.size()];
        const std::vector<TokenId> prompt(base.begin(), base.begin() + 1 + static_cast<long>(rng() % base.size()));
        if (w.add(prompt) < 0 && !ids.empty()) w.free(ids[rng() % ids.size()]);
      } else if (o <= 5) {
        const SeqId s = ids[rng() % ids.size()];
        std::vector<TokenId> more(1 + rng() % 12);
        for (auto& t : more) t = static_cast<TokenId>(rng() % 50);
        if (!w.grow(s, more)) w.free(ids[rng() % ids.size()]);
      } else if (o <= 7) {
        w.evict(ids[rng() % ids.size()], rng);
      } else if (o == 8) {
        w.fork(ids[rng() % ids.size()]);
      } else if (o == 9) {
        w.free(ids[rng() % ids.size()]);
      } else {
        w.stage(ids[rng() % ids.size()], rng);
      }
      ASSERT_NO_FATAL_FAILURE(w.verify()) << "after step " << step << " (op " << o << ")";
    }
    EXPECT_GT(w.kv().stats().evicted_tokens, 0);
    EXPECT_GT(w.kv().stats().compacted_tokens, 0);
    if (with_recall) {
      EXPECT_GT(w.kv().stats().recalled_tokens, 0);
    }
    for (SeqId s : w.ids()) w.free(s);
    EXPECT_EQ(w.kv().stats().hot.used, 0) << "every block, staging ones included, is returned";
    w.kv().check_invariants();
  }
}

TEST(KvEvictProperty, RandomOperationsKeepTokensPositionsAndBytes) { random_operations(false); }

// The same with --kv-recall's staging blocks taken, loaded with garbage and released at random.
TEST(KvEvictProperty, RecallStagingNeverTouchesASequencesBlocks) { random_operations(true); }

TEST(KvEvictProperty, SharedBlocksAreCopiedNeverWritten) {
  EvictWorld w(32);
  std::vector<TokenId> prompt(20);
  std::iota(prompt.begin(), prompt.end(), 1);
  const SeqId a = w.add(prompt);
  w.fork(a);
  const SeqId b = a + 1;
  const auto before = std::vector<BlockId>(w.kv().block_table(a).begin(), w.kv().block_table(a).end());
  std::mt19937 rng(3);
  w.evict(b, rng);
  ASSERT_NO_FATAL_FAILURE(w.verify());
  // a's table and bytes are untouched (verify checked the bytes); b left the shared blocks it
  // wrote into.
  EXPECT_EQ(std::vector<BlockId>(w.kv().block_table(a).begin(), w.kv().block_table(a).end()), before);
  EXPECT_GT(w.kv().stats().evict_copies, 0);
  // A new sequence with the same prompt still finds a's blocks in the prefix cache, not b's.
  const SeqId c = w.add(prompt);
  ASSERT_GE(c, 0);
  ASSERT_NO_FATAL_FAILURE(w.verify());
  EXPECT_EQ(w.kv().block_table(c)[0], before[0]);
}

// A compacted sequence's attention equals attention over its kept tokens written from scratch.
TEST(KvEvictProperty, CompactedAttentionEqualsAttentionFromScratch) {
  const KvGeometry geo{1, 2, 8, 4, KvDtype::kF32};
  const int32_t n_head = 4, hd = geo.head_dim, width = geo.n_kv_heads * hd;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  KvConfig cfg = config(64);
  KvStorage storage(geo, cfg);
  KvManager kv(geo, cfg, storage.capacity(), 7);
  kv.add_sequence(1);
  std::vector<TokenId> tokens;
  std::vector<std::vector<float>> krows, vrows;  // by position
  auto run = [&] {
    const auto ops = kv.take_ops();
    if (!ops.empty()) kv.complete(ops, storage.execute(ops));
  };
  auto append = [&](int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<TokenId>(tokens.size()));
      std::vector<float> k(static_cast<size_t>(width)), v(static_cast<size_t>(width));
      for (auto& x : k) x = u(rng);
      for (auto& x : v) x = u(rng);
      krows.push_back(k);
      vrows.push_back(v);
    }
    const auto total = static_cast<int32_t>(tokens.size());
    ASSERT_TRUE(kv.allocate(1, tokens, total));
    run();
    const auto table = kv.block_table(1);
    const KvLayerView& view = storage.views()[0];
    for (int32_t p = total - n; p < total; ++p) {
      const int32_t slot = p - kv.num_evicted(1);
      const int64_t at = table[static_cast<size_t>(slot / geo.block_size)] * view.block_stride_bytes() +
                         (slot % geo.block_size) * view.token_stride_bytes();
      std::memcpy(view.k + at, krows[static_cast<size_t>(p)].data(), static_cast<size_t>(width) * 4);
      std::memcpy(view.v + at, vrows[static_cast<size_t>(p)].data(), static_cast<size_t>(width) * 4);
    }
    kv.commit(1, tokens, total);
  };
  append(37);
  for (int round = 0; round < 6; ++round) {
    std::vector<int32_t> drop;
    for (int32_t i = 0; i < kv.num_tokens(1); ++i) {
      if (rng() % 3 == 0) drop.push_back(i);
    }
    ASSERT_TRUE(kv.evict(1, drop).has_value());
    run();
    append(1 + static_cast<int32_t>(rng() % 9));
  }
  ASSERT_GT(kv.num_evicted(1), 0);
  // A decode query over the compacted table ...
  std::vector<float> q(static_cast<size_t>(n_head * hd));
  for (auto& x : q) x = u(rng) * 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ThreadPool pool(2);
  cpu::KernelScratch scratch;
  const int32_t n = kv.num_tokens(1);
  const auto table = kv.block_table(1);
  const AttentionSeq compacted{0, 1, n - 1, table.data(), static_cast<int32_t>(table.size())};
  std::vector<float> out1(q.size()), out2(q.size());
  cpu::paged_attention(q.data(), storage.views()[0], std::span<const AttentionSeq>(&compacted, 1), n_head, scale,
                       out1.data(), pool, scratch);
  // ... and over the kept tokens, in position order, in a fresh arena.
  std::vector<int32_t> kept = kv.slot_positions(1);
  std::sort(kept.begin(), kept.end());
  KvConfig cfg2 = config(64);
  KvStorage fresh(geo, cfg2);
  const KvLayerView& fv = fresh.views()[0];
  std::vector<BlockId> ftable;
  for (int32_t b = 0; b * geo.block_size < n; ++b) ftable.push_back(b);
  for (size_t i = 0; i < kept.size(); ++i) {
    const int64_t at = ftable[i / static_cast<size_t>(geo.block_size)] * fv.block_stride_bytes() +
                       static_cast<int64_t>(i % geo.block_size) * fv.token_stride_bytes();
    std::memcpy(fv.k + at, krows[static_cast<size_t>(kept[i])].data(), static_cast<size_t>(width) * 4);
    std::memcpy(fv.v + at, vrows[static_cast<size_t>(kept[i])].data(), static_cast<size_t>(width) * 4);
  }
  const AttentionSeq scratch_seq{0, 1, n - 1, ftable.data(), static_cast<int32_t>(ftable.size())};
  cpu::paged_attention(q.data(), fv, std::span<const AttentionSeq>(&scratch_seq, 1), n_head, scale, out2.data(), pool,
                       scratch);
  // Same keys and values, in another order: equal up to the order of the sums.
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(out1[i], out2[i], 1e-5) << i;
}

}  // namespace
}  // namespace strata
