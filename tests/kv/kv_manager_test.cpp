// The KV manager against a model of the expected state: a fake forward pass writes, for every
// position, values determined by the token prefix (as real keys and values are), and after every
// operation each sequence's block table must read back exactly those values (approximately, for
// warm blocks), the invariants must hold, and after draining every block must be unreferenced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>

#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "support/test_support.h"

namespace strata {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

// Expected K or V element for position p of a sequence whose prefix hash at p is `ph`.
float expected_value(uint64_t ph, int layer, int head, int d, bool is_value) {
  uint64_t h = mix(mix(mix(mix(ph, static_cast<uint64_t>(layer)), static_cast<uint64_t>(head)), static_cast<uint64_t>(d)),
                   is_value ? 7 : 3);
  return static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 4.0 - 2.0);
}

struct ModelSeq {
  std::vector<TokenId> tokens;
  std::vector<uint64_t> prefix_hash;  // [i] = hash of tokens[0..i]
  int32_t computed = 0;
  bool swapped = false;
  void push(TokenId t) {
    tokens.push_back(t);
    prefix_hash.push_back(mix(prefix_hash.empty() ? 1 : prefix_hash.back(), static_cast<uint64_t>(t) + 1));
  }
};

class Harness {
 public:
  Harness(const KvConfig& cfg, KvGeometry geo) : geo_(geo), storage_(geo, cfg), kv_(geo, cfg, storage_.capacity(), 1234) {}

  KvManager& kv() { return kv_; }
  KvStorage& storage() { return storage_; }

  // Executes the planned KV ops; every one must succeed.
  void apply() {
    const std::vector<KvOp> ops = kv_.take_ops();
    const std::vector<KvOpStatus> st = storage_.execute(ops);
    kv_.complete(ops, st);
    for (KvOpStatus s : st) EXPECT_EQ(s, KvOpStatus::kOk);
    EXPECT_TRUE(kv_.take_lost_sequences().empty());
  }

  // The "forward pass": writes positions [from, to) of sequence s.
  void write(SeqId s, const ModelSeq& m, int32_t from, int32_t to) {
    auto table = kv_.block_table(s);
    auto views = storage_.views();
    for (int32_t p = from; p < to; ++p) {
      const BlockId b = table[static_cast<size_t>(p / geo_.block_size)];
      ASSERT_LT(b, kv_.num_hot_blocks()) << "writes go to hot blocks";
      for (int layer = 0; layer < geo_.n_layer; ++layer) {
        const KvLayerView& v = views[static_cast<size_t>(layer)];
        for (int h = 0; h < geo_.n_kv_heads; ++h) {
          for (int d = 0; d < geo_.head_dim; ++d) {
            const int64_t idx = ((int64_t{b} * geo_.block_size + p % geo_.block_size) * geo_.n_kv_heads + h) * geo_.head_dim + d;
            const float kval = expected_value(m.prefix_hash[static_cast<size_t>(p)], layer, h, d, false);
            const float vval = expected_value(m.prefix_hash[static_cast<size_t>(p)], layer, h, d, true);
            std::memcpy(v.k + idx * 4, &kval, 4);
            std::memcpy(v.v + idx * 4, &vval, 4);
          }
        }
      }
    }
  }

  // Reads back every computed position of s through its block table.
  void verify(SeqId s, const ModelSeq& m, float warm_tol) {
    auto table = kv_.block_table(s);
    auto views = storage_.views();
    std::vector<float> row(static_cast<size_t>(geo_.head_dim));
    for (int32_t p = 0; p < m.computed; ++p) {
      const BlockId b = table[static_cast<size_t>(p / geo_.block_size)];
      for (int layer = 0; layer < geo_.n_layer; ++layer) {
        const KvLayerView& v = views[static_cast<size_t>(layer)];
        for (int is_value = 0; is_value < 2; ++is_value) {
          for (int h = 0; h < geo_.n_kv_heads; ++h) {
            if (b < v.n_hot_blocks || b >= v.host_base) {
              // A hot block, or one offloaded to a host slot: the same layout, read in place.
              const bool host = b >= v.host_base;
              if (host) {
                EXPECT_NE(v.host, nullptr);
              }
              const uint8_t* base = !host ? (is_value ? v.v : v.k)
                                          : v.host + int64_t{b - v.host_base} * v.host_slot_bytes +
                                                (is_value ? v.host_v_offset : v.host_k_offset);
              const int64_t bb = host ? 0 : b;
              for (int d = 0; d < geo_.head_dim; ++d) {
                const int64_t idx = ((bb * geo_.block_size + p % geo_.block_size) * geo_.n_kv_heads + h) * geo_.head_dim + d;
                float got;
                std::memcpy(&got, base + idx * 4, 4);
                ASSERT_EQ(got, expected_value(m.prefix_hash[static_cast<size_t>(p)], layer, h, d, is_value))
                    << "seq " << s << " pos " << p << " layer " << layer;
              }
            } else {
              const int32_t w = b - v.n_hot_blocks;
              const int32_t slot = w / v.warm_span, sub = w % v.warm_span;
              const uint8_t* base = is_value ? v.warm_v + slot * v.warm_v_slot_bytes : v.warm_k + slot * v.warm_k_slot_bytes;
              warm_decode_row(v.warm_format, is_value != 0, base, v.warm_span, geo_.block_size, geo_.n_kv_heads,
                              geo_.head_dim, sub * geo_.block_size + p % geo_.block_size, h, row.data());
              for (int d = 0; d < geo_.head_dim; ++d) {
                ASSERT_NEAR(row[static_cast<size_t>(d)],
                            expected_value(m.prefix_hash[static_cast<size_t>(p)], layer, h, d, is_value), warm_tol)
                    << "warm seq " << s << " pos " << p;
              }
            }
          }
        }
      }
    }
  }

 private:
  KvGeometry geo_;
  KvStorage storage_;
  KvManager kv_;
};

KvGeometry small_geo(int32_t block_size) { return KvGeometry{2, 2, 8, block_size, KvDtype::kF32}; }

KvConfig small_cfg(int32_t block_size, int32_t blocks) {
  KvConfig c;
  c.block_size = block_size;
  c.dtype = KvDtype::kF32;
  c.num_blocks = blocks;
  return c;
}

// Steps a sequence: allocate + write + commit of n more tokens.
bool extend(Harness& hz, SeqId s, ModelSeq& m, int32_t n) {
  int32_t cached = 0;
  const bool fresh = m.computed == 0 && hz.kv().num_tokens(s) == 0;
  const int32_t target = m.computed + n;
  if (!hz.kv().allocate(s, m.tokens, target, &cached)) return false;
  if (fresh) m.computed = std::max(m.computed, cached);
  hz.apply();
  if (target > m.computed) hz.write(s, m, m.computed, target);
  m.computed = std::max(m.computed, target);
  hz.kv().commit(s, m.tokens, m.computed);
  return true;
}

TEST(KvManager, PrefixHitCountersAreExact) {
  Harness hz(small_cfg(4, 64), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 10; ++i) a.push(100 + i);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 10));  // blocks [0,4) [4,8) full and cached, [8,10) partial
  EXPECT_EQ(kv.stats().prefix_queried_tokens, 10);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 0);

  ModelSeq b;  // shares the first 9 tokens: two full blocks hit
  for (int i = 0; i < 9; ++i) b.push(100 + i);
  b.push(7);
  b.push(8);
  EXPECT_EQ(kv.query_prefix(b.tokens), 8);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 11));
  EXPECT_EQ(kv.stats().prefix_queried_tokens, 21);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 8);
  hz.verify(2, b, 0);

  ModelSeq c;  // the same 8 tokens exactly: only one full block may hit (one token must be computed)
  for (int i = 0; i < 8; ++i) c.push(100 + i);
  EXPECT_EQ(kv.query_prefix(c.tokens), 4);
  kv.add_sequence(3);
  ASSERT_TRUE(extend(hz, 3, c, 8));
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 12);

  ModelSeq d;  // differs in the first token: no hit
  d.push(1);
  for (int i = 1; i < 12; ++i) d.push(100 + i);
  kv.add_sequence(4);
  ASSERT_TRUE(extend(hz, 4, d, 12));
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 12);
  EXPECT_EQ(kv.stats().prefix_queried_tokens, 41);

  // After a and b are freed, their blocks stay cached and a new request still hits them.
  kv.free_sequence(1);
  kv.free_sequence(2);
  kv.check_invariants();
  ModelSeq e = a;
  e.computed = 0;
  kv.add_sequence(5);
  ASSERT_TRUE(extend(hz, 5, e, 10));
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 20);
  hz.verify(5, e, 0);
  for (SeqId s : {3, 4, 5}) kv.free_sequence(s);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().hot.used, 0);
}

TEST(KvManager, NoPrefixCacheMeansNoSharing) {
  KvConfig cfg = small_cfg(4, 64);
  cfg.prefix_cache = false;
  Harness hz(cfg, small_geo(4));
  ModelSeq a, b;
  for (int i = 0; i < 10; ++i) {
    a.push(i);
    b.push(i);
  }
  hz.kv().add_sequence(1);
  hz.kv().add_sequence(2);
  ASSERT_TRUE(extend(hz, 1, a, 10));
  ASSERT_TRUE(extend(hz, 2, b, 10));
  EXPECT_EQ(hz.kv().stats().prefix_hit_tokens, 0);
  EXPECT_EQ(hz.kv().stats().hot.used, 6);
  hz.kv().check_invariants();
}

TEST(KvManager, ForkSharesAndCopiesOnWrite) {
  Harness hz(small_cfg(4, 32), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq p;
  for (int i = 0; i < 6; ++i) p.push(i + 1);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, p, 6));
  const int64_t used_before = kv.stats().hot.used;
  kv.fork(1, 2);
  kv.fork(1, 3);
  EXPECT_EQ(kv.stats().hot.used, used_before) << "a fork copies nothing";
  kv.check_invariants();
  ModelSeq c2 = p, c3 = p;
  c2.push(50);
  c3.push(60);
  // Writing position 6 hits the shared partial block [4, 8): each child copies it first.
  EXPECT_EQ(kv.blocks_needed(2, c2.tokens, 7), 1);
  ASSERT_TRUE(extend(hz, 2, c2, 1));
  ASSERT_TRUE(extend(hz, 3, c3, 1));
  EXPECT_EQ(kv.stats().cow_copies, 2);
  hz.verify(1, p, 0);
  hz.verify(2, c2, 0);
  hz.verify(3, c3, 0);
  // The parent is now the only holder of its partial block: no copy needed.
  p.push(70);
  EXPECT_EQ(kv.blocks_needed(1, p.tokens, 7), 0);
  ASSERT_TRUE(extend(hz, 1, p, 1));
  EXPECT_EQ(kv.stats().cow_copies, 2);
  hz.verify(1, p, 0);
  kv.check_invariants();
  for (SeqId s : {1, 2, 3}) kv.free_sequence(s);
  EXPECT_EQ(kv.stats().hot.used, 0);
}

TEST(KvManager, DryRunMatchesAllocationAndFailureChangesNothing) {
  Harness hz(small_cfg(4, 5), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 30; ++i) a.push(i);
  kv.add_sequence(1);
  EXPECT_EQ(kv.blocks_needed(1, a.tokens, 30), 8);
  EXPECT_FALSE(kv.allocate(1, a.tokens, 30));
  kv.check_invariants();
  EXPECT_EQ(kv.stats().hot.used, 0);
  EXPECT_EQ(kv.blocks_needed(1, a.tokens, 17), 5);
  ASSERT_TRUE(extend(hz, 1, a, 17));
  EXPECT_EQ(kv.num_available_blocks(), 0);
  a.push(99);
  EXPECT_EQ(kv.blocks_needed(1, a.tokens, 21), 1);
}

TEST(KvManager, SwapOutAndInThroughTheColdTier) {
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(4, 8);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 14; ++i) a.push(i + 3);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 14));
  ASSERT_TRUE(kv.swap_out(1));
  hz.apply();
  kv.check_invariants();
  EXPECT_EQ(kv.stats().hot.used, 0);
  EXPECT_EQ(kv.stats().cold.used, 4);
  // Someone else uses all RAM in the meantime.
  ModelSeq b;
  for (int i = 0; i < 32; ++i) b.push(1000 + i);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 32));
  kv.free_sequence(2);
  EXPECT_EQ(kv.blocks_to_swap_in(1), 4);
  EXPECT_EQ(kv.blocks_to_swap_in(1, 16), 4) << "14 tokens in 4 blocks: room for 2 more";
  EXPECT_EQ(kv.blocks_to_swap_in(1, 17), 5);
  ASSERT_TRUE(kv.swap_in(1));
  hz.apply();
  kv.check_invariants();
  hz.verify(1, a, 0);
  const uint64_t block_bytes = small_geo(4).bytes_per_block();
  EXPECT_EQ(kv.stats().spill_bytes_in, 4 * block_bytes);
  // Out: a's 4 blocks, then 4 of b's cached blocks evicted to make room for a's return.
  EXPECT_EQ(kv.stats().spill_bytes_out, 8 * block_bytes);
  EXPECT_EQ(kv.stats().evicted_blocks, 4);
  // b's evicted prefix is still findable, in the cold tier.
  EXPECT_EQ(kv.query_prefix(b.tokens), 28);
  a.push(5);
  ASSERT_TRUE(extend(hz, 1, a, 1));
  hz.verify(1, a, 0);
  kv.free_sequence(1);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, TheColdTiersHostSlotsAreTakenBeforeTheFilesAndReadBackExactly) {
  // Two slots of host memory above a spill file, without migration: swap-outs fill host memory
  // first, and host slots freed later are taken again before file slots freed after them (a LIFO
  // free list would hand out the file's).
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(4, 16);
  cfg.host_bytes = 2 * (small_geo(4).bytes_per_block() + 8);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  cfg.host_migrate = false;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ASSERT_EQ(hz.storage().capacity().cold_host_slots, 2);
  EXPECT_FALSE(kv.migrates());
  // Executes the planned ops; returns the cold slots spilled to.
  auto spilled_to = [&] {
    const std::vector<KvOp> ops = kv.take_ops();
    std::vector<int32_t> slots;
    for (const KvOp& op : ops) {
      if (op.kind == KvOp::Kind::kSpill) slots.push_back(op.dst.slot);
    }
    const std::vector<KvOpStatus> st = hz.storage().execute(ops);
    kv.complete(ops, st);
    for (KvOpStatus x : st) EXPECT_EQ(x, KvOpStatus::kOk);
    std::sort(slots.begin(), slots.end());
    return slots;
  };
  std::vector<ModelSeq> m(4);
  for (SeqId s = 1; s <= 3; ++s) {
    for (int i = 0; i < 8; ++i) m[static_cast<size_t>(s)].push(100 * static_cast<int>(s) + i);
    kv.add_sequence(s);
    ASSERT_TRUE(extend(hz, s, m[static_cast<size_t>(s)], 8));
  }
  ASSERT_TRUE(kv.swap_out(1));
  EXPECT_EQ(spilled_to(), (std::vector<int32_t>{0, 1})) << "host memory first";
  ASSERT_TRUE(kv.swap_out(2));
  EXPECT_EQ(spilled_to(), (std::vector<int32_t>{2, 3})) << "then the file";
  KvStats st = kv.stats();
  EXPECT_EQ(st.host.slots, 2);
  EXPECT_EQ(st.host.used, 2);
  EXPECT_EQ(st.file.used, 2);
  EXPECT_EQ(st.file.slots, st.cold.slots - 2);
  EXPECT_EQ(st.host.bytes_total, 2 * hz.storage().capacity().cold_slot_bytes);
  EXPECT_EQ(st.host_spills, 2);
  EXPECT_EQ(st.file_spills, 2);
  EXPECT_EQ(st.file_migrations, 0);
  // Back in: host slots freed first, then file slots; the next swap-out takes the host slots.
  ASSERT_TRUE(kv.swap_in(1));
  hz.apply();
  ASSERT_TRUE(kv.swap_in(2));
  hz.apply();
  hz.verify(1, m[1], 0);
  hz.verify(2, m[2], 0);
  st = kv.stats();
  EXPECT_EQ(st.host_fetches, 2);
  EXPECT_EQ(st.file_fetches, 2);
  EXPECT_EQ(st.host.used, 0);
  ASSERT_TRUE(kv.swap_out(3));
  EXPECT_EQ(spilled_to(), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(kv.swap_in(3));
  hz.apply();
  hz.verify(3, m[3], 0);
  for (SeqId s = 1; s <= 3; ++s) kv.free_sequence(s);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, SwapOutRefusesASequenceThatHoldsNoBlockAlone) {
  // A fork shares every block of its parent: swapping it out would free nothing, so a scheduler
  // that preempts it to make room must recompute it instead (dropping its references).
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(4, 8);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 10; ++i) a.push(i + 40);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 10));
  kv.fork(1, 2);
  EXPECT_FALSE(kv.swap_out(2));
  EXPECT_FALSE(kv.swap_out(1));
  kv.check_invariants();
  EXPECT_EQ(kv.stats().swap_outs, 0);
  EXPECT_EQ(kv.stats().hot.used, 3);
  EXPECT_TRUE(kv.take_ops().empty()) << "a refused swap plans nothing";
  // Alone, its blocks move.
  kv.free_sequence(1);
  ASSERT_TRUE(kv.swap_out(2));
  hz.apply();
  EXPECT_EQ(kv.stats().hot.used, 0);
  EXPECT_EQ(kv.stats().cold.used, 3);
  kv.free_sequence(2);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

// --- the file as a tier below host memory (KvManager::migrates) -------------------------------

// Executes the planned ops (every one must succeed) and returns them.
std::vector<KvOp> run_ops(Harness& hz) {
  std::vector<KvOp> ops = hz.kv().take_ops();
  const std::vector<KvOpStatus> st = hz.storage().execute(ops);
  hz.kv().complete(ops, st);
  for (KvOpStatus x : st) EXPECT_EQ(x, KvOpStatus::kOk);
  EXPECT_TRUE(hz.kv().take_lost_sequences().empty());
  hz.kv().check_invariants();
  return ops;
}

// (kind, src slot, dst slot) of each op, for comparisons.
std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>> shape(const std::vector<KvOp>& ops) {
  std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>> out;
  for (const KvOp& op : ops) out.emplace_back(op.kind, op.src.slot, op.dst.slot);
  return out;
}

int count_kind(const std::vector<KvOp>& ops, KvOp::Kind k) {
  return static_cast<int>(std::count_if(ops.begin(), ops.end(), [&](const KvOp& op) { return op.kind == k; }));
}

// A cold tier of `host_slots` host slots above a spill file (migration on unless turned off).
KvConfig host_and_file(int32_t hot_blocks, int32_t host_slots, const std::string& dir) {
  KvConfig cfg = small_cfg(4, hot_blocks);
  cfg.host_bytes = static_cast<uint64_t>(host_slots) * (small_geo(4).bytes_per_block() + 8);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  return cfg;
}

constexpr auto kSpillOp = KvOp::Kind::kSpill;
constexpr auto kMigrateOp = KvOp::Kind::kMigrate;
constexpr auto kFetchOp = KvOp::Kind::kFetch;

TEST(KvManager, AFullHostPartMovesItsLeastRecentlyWrittenBlockDownToTheFile) {
  const std::string dir = test::make_temp_dir("strata-kv");
  Harness hz(host_and_file(16, 3, dir), small_geo(4));
  KvManager& kv = hz.kv();
  ASSERT_EQ(hz.storage().capacity().cold_host_slots, 3);
  ASSERT_TRUE(kv.migrates());
  std::vector<ModelSeq> m(6);
  std::map<SeqId, int32_t> hot_of;  // each sequence's one block
  for (SeqId s = 1; s <= 5; ++s) {
    for (int i = 0; i < 4; ++i) m[static_cast<size_t>(s)].push(100 * static_cast<int>(s) + i);
    kv.add_sequence(s);
    ASSERT_TRUE(extend(hz, s, m[static_cast<size_t>(s)], 4));
    hot_of[s] = kv.block_table(s)[0];
  }
  // Host slots 0, 1, 2 written in that order; then 2's block comes back and goes out again into
  // the host slot it freed, the most recently written now: the order is 1 (slot 0), 3 (slot 2),
  // 2 (slot 1), whatever the slot numbers.
  for (SeqId s = 1; s <= 3; ++s) {
    ASSERT_TRUE(kv.swap_out(s));
    EXPECT_EQ(shape(run_ops(hz)), (std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>>{{kSpillOp, hot_of[s], s - 1}}));
  }
  ASSERT_TRUE(kv.swap_in(2));
  hot_of[2] = -1;
  ASSERT_EQ(count_kind(run_ops(hz), kFetchOp), 1);
  hot_of[2] = kv.block_table(2)[0];
  ASSERT_TRUE(kv.swap_out(2));
  EXPECT_EQ(shape(run_ops(hz)), (std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>>{{kSpillOp, hot_of[2], 1}}));
  // The host part is full: 4's block takes slot 0 after 1's block moved to the first file slot
  // (3), then 5's takes slot 2 after 3's moved to the next one (4). Each migration comes before
  // the spill that overwrites its host slot.
  ASSERT_TRUE(kv.swap_out(4));
  EXPECT_EQ(shape(run_ops(hz)),
            (std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>>{{kMigrateOp, 0, 3}, {kSpillOp, hot_of[4], 0}}));
  ASSERT_TRUE(kv.swap_out(5));
  EXPECT_EQ(shape(run_ops(hz)),
            (std::vector<std::tuple<KvOp::Kind, int32_t, int32_t>>{{kMigrateOp, 2, 4}, {kSpillOp, hot_of[5], 2}}));
  KvStats st = kv.stats();
  EXPECT_EQ(st.file_migrations, 2);
  EXPECT_EQ(st.migrated_bytes, 2 * small_geo(4).bytes_per_block());
  EXPECT_EQ(st.host_spills, 6);
  EXPECT_EQ(st.file_spills, 0) << "every spill took a host slot";
  EXPECT_EQ(st.host.used, 3);
  EXPECT_EQ(st.file.used, 2);
  // Every sequence comes back with its own bytes: 1 and 3 from the file, the others from host memory.
  for (SeqId s = 1; s <= 5; ++s) {
    ASSERT_TRUE(kv.swap_in(s));
    const std::vector<KvOp> ops = run_ops(hz);
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops[0].kind, kFetchOp);
    EXPECT_EQ(ops[0].src.slot >= 3, s == 1 || s == 3) << "sequence " << s;
    hz.verify(s, m[static_cast<size_t>(s)], 0);
  }
  st = kv.stats();
  EXPECT_EQ(st.file_fetches, 2);
  EXPECT_EQ(st.host_fetches, 4);
  for (SeqId s = 1; s <= 5; ++s) kv.free_sequence(s);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().cold.used, 0);
  std::filesystem::remove_all(dir);
}

TEST(KvManager, PrefixCachedHostBlocksFollowTheirMoveToTheFileAndHitsThereAreNotMoved) {
  const std::string dir = test::make_temp_dir("strata-kv");
  Harness hz(host_and_file(6, 2, dir), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 17; ++i) a.push(i + 11);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 17));
  kv.free_sequence(1);  // 4 full blocks cached in the hot pool
  // b fills the hot pool: a's 4 cached blocks leave it; the host part takes 2, then each of the
  // next 2 moves the older host block down to the file.
  ModelSeq b;
  for (int i = 0; i < 24; ++i) b.push(500 + i);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 24));
  KvStats st = kv.stats();
  EXPECT_EQ(st.host_spills, 4);
  EXPECT_EQ(st.file_spills, 0);
  EXPECT_EQ(st.file_migrations, 2);
  EXPECT_EQ(st.host.cached, 2);
  EXPECT_EQ(st.file.cached, 2) << "the moved blocks are still prefix-cache blocks";
  kv.free_sequence(2);
  // a's prompt again: all 4 blocks are hits, 2 read from the file and 2 from host memory. Taking
  // hot blocks for them evicts b's cached blocks into the cold tier; while a hit waits for its
  // fetch to be planned its host slot never moves (b's blocks take host slots the fetches free,
  // or move down themselves).
  ModelSeq c = a;
  c.computed = 0;
  EXPECT_EQ(kv.query_prefix(c.tokens), 16);
  kv.add_sequence(3);
  int32_t cached = 0;
  ASSERT_TRUE(kv.allocate(3, c.tokens, 17, &cached));
  EXPECT_EQ(cached, 16);
  const std::vector<KvOp> ops = run_ops(hz);
  EXPECT_EQ(count_kind(ops, kFetchOp), 4);
  for (size_t j = 0; j < ops.size(); ++j) {
    if (ops[j].kind != kFetchOp) continue;
    for (size_t i = 0; i < j; ++i) {
      EXPECT_FALSE(ops[i].kind == kMigrateOp && ops[i].src.slot == ops[j].src.slot)
          << "host slot " << ops[j].src.slot << " moved before its fetch";
    }
  }
  c.computed = 16;
  hz.write(3, c, 16, 17);
  c.computed = 17;
  kv.commit(3, c.tokens, 17);
  hz.verify(3, c, 0);
  st = kv.stats();
  EXPECT_EQ(st.file_fetches, 2);
  EXPECT_EQ(st.host_fetches, 2);
  EXPECT_EQ(st.file_migrations, 2 + count_kind(ops, kMigrateOp));
  kv.free_sequence(3);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, ASwapInsOwnHostBlocksDoNotMoveWhileItTakesRamSlots) {
  const std::string dir = test::make_temp_dir("strata-kv");
  Harness hz(host_and_file(4, 2, dir), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a, b;
  for (int i = 0; i < 8; ++i) a.push(i + 1);
  for (int i = 0; i < 16; ++i) b.push(i + 300);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 8));
  ASSERT_TRUE(kv.swap_out(1));  // host slots 0 and 1
  run_ops(hz);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 16));
  kv.free_sequence(2);  // the hot pool: 4 cached blocks
  // a's swap-in takes 2 hot blocks, evicting 2 of b's into the cold tier, whose host part holds
  // only a's blocks: moving one to the file before its fetch is planned would have the fetch read
  // the host slot after b's block overwrote it. So the first of b's goes to the file, the second
  // to the host slot the first fetch frees.
  ASSERT_TRUE(kv.swap_in(1));
  const std::vector<KvOp> ops = run_ops(hz);
  EXPECT_EQ(count_kind(ops, kMigrateOp), 0);
  EXPECT_EQ(count_kind(ops, kFetchOp), 2);
  hz.verify(1, a, 0);
  EXPECT_EQ(kv.stats().file_spills, 1);
  EXPECT_EQ(kv.stats().host_spills, 3);
  kv.free_sequence(1);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, BlocksBeingReadAheadStayInHostMemory) {
  const std::string dir = test::make_temp_dir("strata-kv");
  Harness hz(host_and_file(16, 2, dir), small_geo(4));
  KvManager& kv = hz.kv();
  std::vector<ModelSeq> m(5);
  for (SeqId s = 1; s <= 4; ++s) {
    for (int i = 0; i < 4; ++i) m[static_cast<size_t>(s)].push(10 * static_cast<int>(s) + i);
    kv.add_sequence(s);
    ASSERT_TRUE(extend(hz, s, m[static_cast<size_t>(s)], 4));
  }
  ASSERT_TRUE(kv.swap_out(1));  // slot 0
  run_ops(hz);
  ASSERT_TRUE(kv.swap_out(2));  // slot 1
  run_ops(hz);
  // 1's block (the least recently written) is being read ahead: 2's moves instead.
  const std::vector<std::pair<int32_t, KvTier>> ahead = kv.cold_reads_ahead(1, {});
  ASSERT_EQ(ahead, (std::vector<std::pair<int32_t, KvTier>>{{0, KvTier::kHot}}));
  hz.storage().prefetch(ahead);
  kv.note_reads_ahead(ahead);
  ASSERT_TRUE(kv.swap_out(3));
  std::vector<KvOp> ops = run_ops(hz);
  ASSERT_EQ(count_kind(ops, kMigrateOp), 1);
  EXPECT_EQ(ops[0].src.slot, 1);
  // No longer read ahead: 1's block moves next.
  kv.note_reads_ahead({});
  ASSERT_TRUE(kv.swap_out(4));
  ops = run_ops(hz);
  ASSERT_EQ(count_kind(ops, kMigrateOp), 1);
  EXPECT_EQ(ops[0].src.slot, 0);
  for (SeqId s = 1; s <= 4; ++s) {
    ASSERT_TRUE(kv.swap_in(s));
    run_ops(hz);
    hz.verify(s, m[static_cast<size_t>(s)], 0);
  }
  EXPECT_EQ(kv.stats().file_fetches, 2);
  for (SeqId s = 1; s <= 4; ++s) kv.free_sequence(s);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, OffloadedBlocksNeverMoveToTheFile) {
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = host_and_file(16, 2, dir);
  const uint64_t frame = (small_geo(4).bytes_per_block() + 8 + 255) / 256 * 256;  // --kv-offload's aligned frames
  cfg.host_bytes = 2 * frame;
  cfg.offload = true;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ASSERT_EQ(hz.storage().capacity().cold_host_slots, 2);
  ASSERT_TRUE(kv.offloads() && kv.migrates());
  ModelSeq a, b;
  for (int i = 0; i < 12; ++i) a.push(i + 70);
  for (int i = 0; i < 8; ++i) b.push(i + 170);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 12));
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 8));
  ASSERT_EQ(kv.offload(1, 2), 2);  // the host part is full of blocks attention reads in place
  run_ops(hz);
  hz.verify(1, a, 0);
  // b's blocks go to the file: nothing in host memory may move.
  ASSERT_TRUE(kv.swap_out(2));
  std::vector<KvOp> ops = run_ops(hz);
  EXPECT_EQ(count_kind(ops, kMigrateOp), 0);
  EXPECT_EQ(kv.stats().file_spills, 2);
  hz.verify(1, a, 0);
  // Swapped out, a keeps its offloaded blocks in host memory (its swap-in reads them in place):
  // still nothing moves.
  ASSERT_TRUE(kv.swap_out(1));
  ops = run_ops(hz);
  EXPECT_EQ(count_kind(ops, kMigrateOp), 0);
  ModelSeq c;
  for (int i = 0; i < 4; ++i) c.push(i + 270);
  kv.add_sequence(3);
  ASSERT_TRUE(extend(hz, 3, c, 4));
  ASSERT_TRUE(kv.swap_out(3));
  ops = run_ops(hz);
  EXPECT_EQ(count_kind(ops, kMigrateOp), 0);
  EXPECT_EQ(kv.stats().file_migrations, 0);
  for (SeqId s : {1, 2, 3}) {
    ASSERT_TRUE(kv.swap_in(s));
    run_ops(hz);
  }
  EXPECT_EQ(kv.host_blocks(1), 2) << "read in place again";
  hz.verify(1, a, 0);
  hz.verify(2, b, 0);
  hz.verify(3, c, 0);
  for (SeqId s : {1, 2, 3}) kv.free_sequence(s);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

TEST(KvManager, PrefixHitsNeverTakeTheLastAvailableHotBlock) {
  // a's 3 full blocks are cached; c holds the 4th block. b has a's tokens and more: reviving all
  // 3 cached blocks would leave no block for b's next token, so b could never be allocated while
  // c lives. Its hits stop one block short instead.
  Harness hz(small_cfg(4, 4), small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 13; ++i) a.push(i + 60);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 13));
  kv.free_sequence(1);
  ModelSeq c;
  for (int i = 0; i < 3; ++i) c.push(i + 500);
  kv.add_sequence(3);
  ASSERT_TRUE(extend(hz, 3, c, 3));
  EXPECT_EQ(kv.num_available_blocks(), 3);
  ModelSeq b = a;
  b.push(7);
  b.push(8);
  kv.add_sequence(2);
  EXPECT_EQ(kv.query_prefix(2, b.tokens), 12) << "three blocks are cached";
  EXPECT_EQ(kv.prefix_hits(2, b.tokens), 8) << "two can be taken";
  EXPECT_EQ(kv.blocks_needed(2, b.tokens, 9), 3);
  int32_t cached = 0;
  ASSERT_TRUE(kv.allocate(2, b.tokens, 9, &cached));
  EXPECT_EQ(cached, 8);
  EXPECT_EQ(kv.num_available_blocks(), 0);
  kv.check_invariants();
  kv.free_sequence(2);
  kv.free_sequence(3);
  kv.check_invariants();
}

TEST(KvManager, AWarmPoolThatFillsMidCommitLeavesTheBlockTableTrue) {
  // One commit makes several block groups older than the hot window, and the warm pool has room
  // for only the first: the others stay hot, and the table attention reads must name the warm
  // slot of the first group (it named the hot block that group left, which the next sequence
  // then took and overwrote).
  const KvGeometry geo = small_geo(4);
  KvConfig cfg = small_cfg(4, 0);
  cfg.num_blocks.reset();
  cfg.warm_format = WarmFormat::kInt8;
  cfg.hot_tokens = 4;
  const uint64_t total = geo.bytes_per_block() * 12;
  cfg.memory_bytes = total;
  const uint64_t slot_bytes = KvStorage(geo, [&] {
                                KvConfig one = cfg;
                                one.warm_fraction = 0.5;
                                return one;
                              }()).capacity().warm_slot_bytes;
  cfg.warm_fraction = 1.5 * static_cast<double>(slot_bytes) / static_cast<double>(total);  // one warm slot
  Harness hz(cfg, geo);
  KvManager& kv = hz.kv();
  const KvCapacity& cap = hz.storage().capacity();
  ASSERT_EQ(cap.warm_slots, 1);
  const int32_t groups = 2;  // old enough at once, of which only the first finds a warm slot
  const int32_t n = groups * cap.warm_span * 4 + cfg.hot_tokens;
  ASSERT_LE(n / 4, cap.hot_blocks - 2) << "room for the prompt and for the next sequence";
  ModelSeq a;
  for (int i = 0; i < n; ++i) a.push(i + 100);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, n));
  hz.apply();  // the re-encode
  EXPECT_EQ(kv.stats().warm.used, 1);
  // Another sequence takes every free hot block and writes its own values there.
  ModelSeq b;
  const int32_t free_tokens = kv.num_available_blocks() * 4;
  for (int i = 0; i < free_tokens; ++i) b.push(i + 300);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, free_tokens));
  hz.verify(2, b, 0.05f);
  hz.verify(1, a, 0.05f);
  kv.check_invariants();
  kv.free_sequence(1);
  kv.free_sequence(2);
  kv.check_invariants();
}

TEST(KvManager, EvictedPrefixBlocksComeBackFromTheColdTier) {
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(4, 6);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 17; ++i) a.push(i + 11);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 17));
  kv.free_sequence(1);  // 4 full blocks cached
  ModelSeq b;  // fills RAM: evicts every cached block to the cold tier
  for (int i = 0; i < 24; ++i) b.push(500 + i);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 24));
  hz.apply();
  EXPECT_GE(kv.stats().evicted_blocks, 4);
  kv.free_sequence(2);
  ModelSeq c = a;
  c.computed = 0;
  EXPECT_EQ(kv.query_prefix(c.tokens), 16);
  kv.add_sequence(3);
  ASSERT_TRUE(extend(hz, 3, c, 17));
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 16);
  hz.verify(3, c, 0);
  kv.check_invariants();
  kv.free_sequence(3);
  std::filesystem::remove_all(dir);
}

// The manager's side of a failed cold read, driven by statuses alone: the sequence that needed the
// block is reported lost, the placement is forgotten (the prefix hit becomes a miss) and the
// failure is counted; nothing else changes.
TEST(KvManager, AFailedFetchStatusLosesTheSequenceAndForgetsThePlacement) {
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(4, 6);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  Harness hz(cfg, small_geo(4));
  KvManager& kv = hz.kv();
  ModelSeq a;
  for (int i = 0; i < 17; ++i) a.push(i + 11);
  kv.add_sequence(1);
  ASSERT_TRUE(extend(hz, 1, a, 17));
  kv.free_sequence(1);
  ModelSeq b;  // evicts a's cached blocks to the cold tier
  for (int i = 0; i < 24; ++i) b.push(500 + i);
  kv.add_sequence(2);
  ASSERT_TRUE(extend(hz, 2, b, 24));
  kv.free_sequence(2);
  ASSERT_EQ(kv.query_prefix(a.tokens), 16);

  kv.add_sequence(3);
  int32_t cached = 0;
  ASSERT_TRUE(kv.allocate(3, a.tokens, 17, &cached));
  EXPECT_EQ(cached, 16);
  const std::vector<KvOp> ops = kv.take_ops();
  std::vector<KvOpStatus> st = hz.storage().execute(ops);
  // The second block's fetch "fails" (as a read error or a bad checksum would report it).
  int fetches = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    ASSERT_EQ(st[i], KvOpStatus::kOk);
    if (ops[i].kind == KvOp::Kind::kFetch && fetches++ == 1) st[i] = KvOpStatus::kReadFailed;
  }
  ASSERT_EQ(fetches, 4);
  kv.complete(ops, st);
  EXPECT_EQ(kv.take_lost_sequences(), std::vector<SeqId>{3});
  EXPECT_TRUE(kv.take_lost_sequences().empty()) << "reported once";
  EXPECT_EQ(kv.stats().cold_read_failures, 1);
  EXPECT_EQ(kv.query_prefix(a.tokens), 4) << "the lost block is no prefix hit any more";
  kv.check_invariants();
  // The caller recomputes: the sequence starts again and hits only the first block.
  kv.free_sequence(3);
  kv.add_sequence(3);
  ModelSeq c = a;
  c.computed = 0;
  ASSERT_TRUE(extend(hz, 3, c, 17));
  hz.verify(3, c, 0);
  kv.free_sequence(3);
  kv.check_invariants();
  std::filesystem::remove_all(dir);
}

struct PropertyParams {
  WarmFormat warm;
  bool cold;
  int32_t block_size;
  float tol;
  bool offload = false;         // a host tier with --kv-offload: sequences that cannot grow move blocks there
  bool host = false;            // a small host tier (no offload) above the file: its blocks move down to it
};

class KvProperty : public ::testing::TestWithParam<PropertyParams> {};

TEST_P(KvProperty, RandomOperationsKeepEverySequenceIntact) {
  const PropertyParams pp = GetParam();
  const std::string dir = test::make_temp_dir("strata-kv");
  KvConfig cfg = small_cfg(pp.block_size, 0);
  cfg.num_blocks.reset();
  const KvGeometry geo = small_geo(pp.block_size);
  cfg.memory_bytes = geo.bytes_per_block() * 40;
  cfg.warm_format = pp.warm;
  cfg.warm_fraction = 0.4;
  cfg.hot_tokens = pp.block_size;
  if (pp.cold) {
    cfg.spill_dir = dir;
    cfg.spill_bytes = 4 << 20;
  }
  if (pp.offload) {
    cfg.host_bytes = 24 * 2048;  // 24 slots of at most 2 KiB (a frame rounded up to 256 bytes)
    cfg.offload = true;
  }
  if (pp.host) cfg.host_bytes = 6 * (std::max(geo.bytes_per_block(), uint64_t{1}) + 8) + 7;  // 6 slots: often full
  Harness hz(cfg, geo);
  KvManager& kv = hz.kv();
  const bool any_cold = pp.cold || pp.offload || pp.host;
  if (pp.offload) {
    ASSERT_TRUE(kv.offloads());
  }
  std::mt19937 rng(99 + static_cast<unsigned>(pp.block_size));
  std::map<SeqId, ModelSeq> seqs;
  SeqId next_id = 1;
  const std::vector<std::vector<TokenId>> prefixes = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {40, 41, 42, 43, 44, 45, 46},
                                                      {1, 2, 3, 4, 5, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}};
  int ops = 0;
  for (int step = 0; step < 3000; ++step) {
    const int what = static_cast<int>(rng() % 100);
    if (what < 15 || seqs.empty()) {  // a new sequence, often with a shared prefix
      ModelSeq m;
      if (rng() % 3 != 0) {
        for (TokenId t : prefixes[rng() % prefixes.size()]) m.push(t);
      }
      const int extra = 1 + static_cast<int>(rng() % 20);
      for (int i = 0; i < extra; ++i) m.push(static_cast<TokenId>(rng() % 50));
      const SeqId id = next_id++;
      kv.add_sequence(id);
      const int32_t first = std::min<int32_t>(static_cast<int32_t>(m.tokens.size()), 1 + static_cast<int32_t>(rng() % 24));
      const int32_t before = kv.blocks_needed(id, m.tokens, first);
      const int32_t avail = kv.num_available_blocks();
      const bool ok = extend(hz, id, m, first);
      EXPECT_EQ(ok, before <= avail) << "the dry run must predict the allocation";
      if (!ok) {
        kv.free_sequence(id);
        continue;
      }
      seqs[id] = std::move(m);
    } else if (what < 65) {  // a step of a random running sequence: rest of its prompt, or one new token
      auto it = std::next(seqs.begin(), static_cast<long>(rng() % seqs.size()));
      ModelSeq& m = it->second;
      if (m.swapped) continue;
      if (m.computed == static_cast<int32_t>(m.tokens.size())) m.push(static_cast<TokenId>(rng() % 50));
      const int32_t n = static_cast<int32_t>(m.tokens.size()) - m.computed;
      bool ok = extend(hz, it->first, m, n);
      if (!ok && pp.offload) {  // as the scheduler does: its own old blocks to host slots, then again
        const int32_t short_by = kv.blocks_needed(it->first, m.tokens, m.computed + n) - kv.num_available_blocks();
        const int32_t host_before = kv.host_blocks(it->first);
        const int32_t moved = kv.offload(it->first, short_by);
        EXPECT_EQ(kv.host_blocks(it->first), host_before + moved);
        kv.check_invariants();
        ok = moved == short_by && extend(hz, it->first, m, n);
        if (moved == short_by) {
          EXPECT_TRUE(ok) << "offload made the room the allocation lacked";
        }
        if (!ok) hz.apply();
      }
      if (!ok) {
        m.tokens.resize(static_cast<size_t>(m.computed));
        m.prefix_hash.resize(static_cast<size_t>(m.computed));
      }
    } else if (pp.offload && what < 68) {  // offload a few blocks of a running sequence at random
      auto it = std::next(seqs.begin(), static_cast<long>(rng() % seqs.size()));
      if (it->second.swapped) continue;
      const int32_t before = kv.host_blocks(it->first);
      const int32_t moved = kv.offload(it->first, 1 + static_cast<int32_t>(rng() % 4));
      EXPECT_EQ(kv.host_blocks(it->first), before + moved);
      for (BlockId b : kv.block_table(it->first)) {
        EXPECT_TRUE(b < kv.num_hot_blocks() || b >= kv.host_id_base() || pp.warm != WarmFormat::kNone) << b;
      }
    } else if (what < 72) {  // fork
      auto it = std::next(seqs.begin(), static_cast<long>(rng() % seqs.size()));
      if (it->second.swapped || it->second.computed < static_cast<int32_t>(it->second.tokens.size())) continue;
      const SeqId id = next_id++;
      kv.fork(it->first, id);
      seqs[id] = it->second;
    } else if (what < 85) {  // free
      auto it = std::next(seqs.begin(), static_cast<long>(rng() % seqs.size()));
      kv.free_sequence(it->first);
      seqs.erase(it);
    } else if (any_cold && what < 93) {  // swap out
      auto it = std::next(seqs.begin(), static_cast<long>(rng() % seqs.size()));
      if (it->second.swapped) continue;
      if (kv.swap_out(it->first)) it->second.swapped = true;
    } else if (any_cold) {  // swap in
      for (auto& [id, m] : seqs) {
        if (m.swapped && kv.swap_in(id)) {
          m.swapped = false;
          break;
        }
      }
    }
    hz.apply();
    kv.check_invariants();
    if (step % 7 == 0) {
      for (auto& [id, m] : seqs) {
        if (!m.swapped) hz.verify(id, m, pp.tol);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    ++ops;
  }
  for (auto& [id, m] : seqs) kv.free_sequence(id);  // swapped ones release their cold slots
  hz.apply();
  hz.storage().drain_io();
  kv.check_invariants();
  const KvStats st = kv.stats();
  EXPECT_EQ(st.hot.used, 0);
  EXPECT_EQ(st.warm.used, 0);
  EXPECT_EQ(st.cold.used, 0);
  EXPECT_EQ(st.sequences, 0);
  EXPECT_GT(st.prefix_hit_tokens, 0);
  if (pp.warm != WarmFormat::kNone) {
    EXPECT_GT(st.reencoded_blocks, 0);
  }
  if (pp.cold) {
    EXPECT_GT(st.swap_outs, 0);
    EXPECT_GT(st.spill_bytes_in, 0u);
  }
  if (pp.host && pp.cold) {
    EXPECT_GT(st.file_migrations, 0) << "the small host tier must have been full";
    EXPECT_GT(st.file_fetches, 0);
  }
  if (pp.offload) {
    EXPECT_GT(st.offloaded_blocks, 0);
    EXPECT_EQ(st.host_resident_blocks, 0);
    EXPECT_EQ(st.host.used, 0);
  }
  EXPECT_GT(ops, 1000);
  std::filesystem::remove_all(dir);
}

// Warm tolerances: half a quantization step for values in [-2, 2] (expected_value), so a codec
// that truncates instead of rounding, or is off by one level, fails:
//   int8: scale = max|x| / 127 <= 2/127 (f16-rounded, relative 2^-11): half = 0.00788;
//   fp8:  scale = max|x| / 448; the widest e4m3 step is 32 (values in [256, 448]): half = 16 * 2/448
//         = 0.0714;
//   int4: scale <= 4/15 (f16-rounded); the top level may also carry the scale's rounding
//         (15 * 2^-11 of a step): 0.2668 * (0.5 + 0.0073) = 0.1354.
INSTANTIATE_TEST_SUITE_P(
    Configs, KvProperty,
    ::testing::Values(PropertyParams{WarmFormat::kNone, false, 4, 0}, PropertyParams{WarmFormat::kNone, true, 4, 0},
                      PropertyParams{WarmFormat::kInt8, true, 4, 0.0079f}, PropertyParams{WarmFormat::kFp8, false, 8, 0.0715f},
                      PropertyParams{WarmFormat::kInt4, true, 16, 0.1354f}, PropertyParams{WarmFormat::kInt4, false, 5, 0.1354f},
                      // --kv-offload: host tier alone, above a file, with a warm tier
                      PropertyParams{WarmFormat::kNone, false, 4, 0, true},
                      PropertyParams{WarmFormat::kNone, true, 4, 0, true}, PropertyParams{WarmFormat::kInt8, false, 4, 0.0079f, true},
                      // a small host tier above the file: blocks move down when it is full
                      PropertyParams{WarmFormat::kNone, true, 4, 0, false, true},
                      PropertyParams{WarmFormat::kInt8, true, 4, 0.0079f, false, true}));

}  // namespace
}  // namespace strata
