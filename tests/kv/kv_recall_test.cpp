// Recall of evicted tokens (--kv-recall): the RecallStore copies demoted rows exactly and
// summarises each full block by its keys' per-channel min/max (a bound no key of the block
// exceeds); the votes pick the block a query points at; the KV manager's staging blocks are
// counted, released by free and swap-out and never shared by a fork; and the KvEvictor, driven
// step by step over a real KvStorage, demotes what h2o drops, loads the block the query points at
// for the next step (once), and puts it before the sequence's own slots in the attention table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "kv/file_cold_store.h"
#include "kv/kv_evictor.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "kv/recall_store.h"
#include "support/test_support.h"

namespace strata {
namespace {

// 2 layers, 2 KV heads of 4 channels, blocks of 4 tokens, f32.
const KvGeometry kGeo{2, 2, 4, 4, KvDtype::kF32};
constexpr int32_t kRow = 2 * 4;  // floats of one token's K (or V) in one layer

KvConfig config(int32_t blocks) {
  KvConfig c;
  c.block_size = kGeo.block_size;
  c.dtype = kGeo.dtype;
  c.num_blocks = blocks;
  return c;
}

float* k_row(const KvLayerView& v, BlockId b, int32_t off) {
  return reinterpret_cast<float*>(v.k) + (static_cast<int64_t>(b) * kGeo.block_size + off) * kRow;
}
float* v_row(const KvLayerView& v, BlockId b, int32_t off) {
  return reinterpret_cast<float*>(v.v) + (static_cast<int64_t>(b) * kGeo.block_size + off) * kRow;
}

struct World {
  explicit World(const KvConfig& cfg) : storage(kGeo, cfg), kv(kGeo, cfg, storage.capacity(), 7) {}
  explicit World(int32_t blocks) : World(config(blocks)) {}
  void run_ops() {
    const std::vector<KvOp> ops = kv.take_ops();
    const auto st = storage.execute(ops);
    kv.complete(ops, st);
    for (KvOpStatus s : st) ASSERT_EQ(s, KvOpStatus::kOk);
  }
  KvStorage storage;
  KvManager kv;
};

TEST(RecallStore, DemotedRowsAreCopiedExactlyAndSummarised) {
  World w(16);
  std::vector<TokenId> tokens(12, 5);
  w.kv.add_sequence(1);
  ASSERT_TRUE(w.kv.allocate(1, tokens, 12));
  w.run_ops();
  const std::span<const BlockId> table = w.kv.block_table(1);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (const KvLayerView& v : w.storage.views()) {
    for (int32_t slot = 0; slot < 12; ++slot) {
      for (int32_t e = 0; e < kRow; ++e) {
        k_row(v, table[slot / 4], slot % 4)[e] = u(rng);
        v_row(v, table[slot / 4], slot % 4)[e] = u(rng);
      }
    }
  }
  RecallStore store(kGeo.n_layer, kGeo.block_size, kGeo.n_kv_heads, kGeo.head_dim, kGeo.dtype);
  const std::vector<int32_t> slots = {1, 5, 6, 9, 10}, positions = {101, 105, 106, 109, 110};
  store.demote(1, w.storage.views(), table, slots, positions);
  ASSERT_EQ(store.num_blocks(1), 1);
  EXPECT_EQ(store.open_tokens(1), 1);
  const RecallBlock& b = store.block(1, 0);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{101, 105, 106, 109}));
  ASSERT_EQ(b.image->bytes()->size(), kGeo.bytes_per_block());
  const auto* img = reinterpret_cast<const float*>(b.image->bytes()->data());
  for (int32_t l = 0; l < kGeo.n_layer; ++l) {
    const KvLayerView& v = w.storage.views()[static_cast<size_t>(l)];
    const float* kimg = img + static_cast<size_t>(l) * 2 * 4 * kRow;
    const float* vimg = kimg + 4 * kRow;
    for (int32_t r = 0; r < 4; ++r) {
      const int32_t slot = slots[static_cast<size_t>(r)];
      EXPECT_EQ(0, std::memcmp(kimg + r * kRow, k_row(v, table[slot / 4], slot % 4), kRow * sizeof(float))) << l << " " << r;
      EXPECT_EQ(0, std::memcmp(vimg + r * kRow, v_row(v, table[slot / 4], slot % 4), kRow * sizeof(float))) << l << " " << r;
      for (int32_t e = 0; e < kRow; ++e) {
        const float k = kimg[r * kRow + e];
        EXPECT_LE(b.kmin[static_cast<size_t>(l * kRow + e)], k);
        EXPECT_GE(b.kmax[static_cast<size_t>(l * kRow + e)], k);
      }
    }
    for (int32_t e = 0; e < kRow; ++e) {  // the bounds are attained
      float mn = kimg[e], mx = kimg[e];
      for (int32_t r = 1; r < 4; ++r) {
        mn = std::min(mn, kimg[r * kRow + e]);
        mx = std::max(mx, kimg[r * kRow + e]);
      }
      EXPECT_EQ(b.kmin[static_cast<size_t>(l * kRow + e)], mn);
      EXPECT_EQ(b.kmax[static_cast<size_t>(l * kRow + e)], mx);
    }
  }
  // A fork shares the demoted blocks; erasing the parent leaves the child's.
  store.fork(1, 2);
  store.erase(1);
  EXPECT_EQ(store.num_blocks(1), 0);
  EXPECT_EQ(store.num_blocks(2), 1);
  EXPECT_EQ(store.open_tokens(2), 1);
}

TEST(RecallStore, QuestBoundIsAnUpperBoundOfEveryKeyAndTightForOneKey) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.5f);
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t d = 1 + trial % 9, n = 1 + trial % 17;
    std::vector<float> q(static_cast<size_t>(d)), keys(static_cast<size_t>(n * d)), mn(static_cast<size_t>(d), 1e30f),
        mx(static_cast<size_t>(d), -1e30f);
    for (float& x : q) x = g(rng);
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t c = 0; c < d; ++c) {
        const float k = g(rng);
        keys[static_cast<size_t>(i * d + c)] = k;
        mn[static_cast<size_t>(c)] = std::min(mn[static_cast<size_t>(c)], k);
        mx[static_cast<size_t>(c)] = std::max(mx[static_cast<size_t>(c)], k);
      }
    }
    const float bound = quest_bound(q.data(), mn.data(), mx.data(), d);
    float best = -1e30f;
    for (int32_t i = 0; i < n; ++i) {
      float dot = 0;
      for (int32_t c = 0; c < d; ++c) dot += q[static_cast<size_t>(c)] * keys[static_cast<size_t>(i * d + c)];
      best = std::max(best, dot);
      ASSERT_LE(dot, bound + 1e-4f * (1 + std::abs(bound))) << "trial " << trial;
    }
    if (n == 1) {
      ASSERT_NEAR(best, bound, 1e-4f * (1 + std::abs(bound))) << "trial " << trial;
    }
  }
}

TEST(RecallStore, VotesPickTheBlockTheQueryPointsAt) {
  World w(16);
  std::vector<TokenId> tokens(12, 5);
  w.kv.add_sequence(1);
  ASSERT_TRUE(w.kv.allocate(1, tokens, 12));
  w.run_ops();
  const std::span<const BlockId> table = w.kv.block_table(1);
  // Block i's keys lie along channel i of every head (small noise elsewhere).
  for (const KvLayerView& v : w.storage.views()) {
    for (int32_t slot = 0; slot < 12; ++slot) {
      for (int32_t e = 0; e < kRow; ++e) k_row(v, table[slot / 4], slot % 4)[e] = e % 4 == slot / 4 ? 3.0f : 0.01f * (slot % 4);
    }
  }
  RecallStore store(kGeo.n_layer, kGeo.block_size, kGeo.n_kv_heads, kGeo.head_dim, kGeo.dtype);
  std::vector<int32_t> slots(12);
  for (int32_t i = 0; i < 12; ++i) slots[static_cast<size_t>(i)] = i;
  store.demote(1, w.storage.views(), table, slots, slots);
  ASSERT_EQ(store.num_blocks(1), 3);
  const int32_t n_head = 4;  // two query heads per KV head
  for (int32_t target = 0; target < 3; ++target) {
    std::vector<float> q(static_cast<size_t>(kGeo.n_layer * n_head * 4), 0.0f);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int32_t>(i % 4) == target ? 1.0f : 0.0f;
    const std::vector<float> votes = store.estimate(1, q, n_head, 1);
    ASSERT_EQ(votes.size(), 3u);
    EXPECT_EQ(votes[static_cast<size_t>(target)], static_cast<float>(kGeo.n_layer * n_head)) << target;
    EXPECT_EQ(RecallStore::top_k(votes, 1), (std::vector<int32_t>{target}));
  }
  // Ties go to the later block; k beyond the count gives all.
  EXPECT_EQ(RecallStore::top_k(std::vector<float>{1, 2, 2, 0}, 2), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(RecallStore::top_k(std::vector<float>{1, 1}, 5), (std::vector<int32_t>{1, 0}));
}

// --kv-recall-memory: the images past the cap leave host memory oldest first: into the spill file
// when there is one (read back byte for byte, and freed with their last holder), else dropped
// (never voted for again, their summaries freed). Blocks are built from rows written here, so the
// expected bytes do not come from the store.
TEST(RecallStore, MemoryCapSpillsTheOldestToTheFileOrDropsThem) {
  const int64_t image = 2 * int64_t{kGeo.n_layer} * kGeo.block_size * kRow * static_cast<int64_t>(sizeof(float));
  const int32_t n = 4;  // tokens demoted per call: one full block
  auto rows_of = [&](int32_t b) {  // demote_rows layout, every float = 1000 * block + index
    std::vector<float> rows(static_cast<size_t>(2 * kGeo.n_layer * n * kRow));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(1000 * b + static_cast<int32_t>(i));
    return rows;
  };
  // The image of block b as the store lays it out: per layer, K block then V block.
  auto image_of = [&](int32_t b) {
    const std::vector<float> r = rows_of(b);
    std::vector<float> img;
    for (int32_t l = 0; l < kGeo.n_layer; ++l) {
      const float* k = r.data() + static_cast<size_t>(l) * 2 * n * kRow;
      img.insert(img.end(), k, k + n * kRow);
      img.insert(img.end(), k + n * kRow, k + 2 * n * kRow);
    }
    return img;
  };
  for (const bool with_file : {true, false}) {
    SCOPED_TRACE(with_file ? "spill file" : "no spill file");
    const std::string dir = test::make_temp_dir("recall_spill");
    std::unique_ptr<ColdStore> cold;
    if (with_file) cold = std::make_unique<FileColdStore>(dir, 3 * static_cast<uint64_t>(image), static_cast<uint64_t>(image));
    RecallStore store(kGeo.n_layer, kGeo.block_size, kGeo.n_kv_heads, kGeo.head_dim, kGeo.dtype,
                      2 * static_cast<uint64_t>(image), std::move(cold));
    for (int32_t b = 0; b < 6; ++b) {
      const std::vector<float> rows = rows_of(b);
      const std::vector<int32_t> pos = {4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3};
      store.demote_rows(1, reinterpret_cast<const uint8_t*>(rows.data()), pos);
      EXPECT_LE(store.bytes(), 2 * static_cast<uint64_t>(image));
    }
    ASSERT_EQ(store.num_blocks(1), 6);
    // Blocks 4 and 5 in memory; 0..2 in the file (3 slots) or dropped; 3 dropped in both cases
    // (the file holds three).
    EXPECT_EQ(store.counters().spilled_blocks, with_file ? 3 : 0);
    EXPECT_EQ(store.counters().dropped_blocks, with_file ? 1 : 4);
    for (int32_t b = 0; b < 6; ++b) {
      const bool want = b >= 4 || (with_file && b <= 2);
      EXPECT_EQ(store.available(1, b), want) << b;
      const auto img = store.image(1, b);
      if (!want) {
        EXPECT_EQ(img, nullptr) << b;
        continue;
      }
      ASSERT_NE(img, nullptr) << b;
      const std::vector<float> expect = image_of(b);
      ASSERT_EQ(img->size(), expect.size() * sizeof(float));
      EXPECT_EQ(0, std::memcmp(img->data(), expect.data(), img->size())) << b;
    }
    EXPECT_EQ(store.counters().cold_reads, with_file ? 3 : 0);
    // A dropped block is never voted for, whatever the query.
    std::vector<float> q(static_cast<size_t>(kGeo.n_layer) * 2 * kGeo.head_dim, 1.0f);
    const std::vector<float> votes = store.estimate(1, q, 2, 6);
    for (int32_t b = 0; b < 6; ++b) {
      if (!store.available(1, b)) {
        EXPECT_EQ(votes[static_cast<size_t>(b)], 0.0f) << b;
      }
    }
    store.forget_dropped(1);
    EXPECT_TRUE(store.block(1, 3).kmin.empty());
    EXPECT_FALSE(store.block(1, 4).kmin.empty());
    // A fork shares the images; erasing both frees them.
    store.fork(1, 2);
    store.erase(1);
    EXPECT_GT(store.bytes(), 0u);
    store.erase(2);
    EXPECT_EQ(store.bytes(), 0u);
    std::filesystem::remove_all(dir);
  }
}

TEST(KvManagerRecall, StagingBlocksAreCountedReleasedAndNeverShared) {
  const std::string dir = test::make_temp_dir("strata-recall");
  KvConfig cfg = config(8);
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  {
    World w(cfg);
    KvManager& kv = w.kv;
    std::vector<TokenId> tokens(8, 9);
    kv.add_sequence(1);
    ASSERT_TRUE(kv.allocate(1, tokens, 8));
    w.run_ops();
    kv.commit(1, tokens, 8);
    EXPECT_EQ(kv.num_available_blocks(), 6);
    EXPECT_EQ(kv.set_recall_blocks(1, 3), 3);
    EXPECT_EQ(kv.recall_blocks(1).size(), 3u);
    EXPECT_EQ(kv.num_available_blocks(), 3);
    kv.check_invariants();
    // Growth leaves `reserve` blocks available.
    EXPECT_EQ(kv.set_recall_blocks(1, 10, 1), 5);
    EXPECT_EQ(kv.num_available_blocks(), 1);
    EXPECT_EQ(kv.set_recall_blocks(1, 2), 2);
    EXPECT_EQ(kv.num_available_blocks(), 4);
    kv.check_invariants();
    // A load lands in the staging block and counts a block of recalled tokens.
    auto image = std::make_shared<const std::vector<uint8_t>>(kGeo.bytes_per_block(), uint8_t{0x3c});
    kv.load_recall_block(1, 1, image);
    const std::vector<KvOp> ops = kv.take_ops();
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops[0].kind, KvOp::Kind::kLoad);
    EXPECT_EQ(ops[0].dst, (KvSlot{KvTier::kHot, kv.recall_blocks(1)[1]}));
    const auto st = w.storage.execute(ops);
    kv.complete(ops, st);
    EXPECT_EQ(st[0], KvOpStatus::kOk);
    EXPECT_EQ(w.storage.views()[1].k[static_cast<size_t>(kv.recall_blocks(1)[1]) * 4 * kRow * 4], 0x3c);
    EXPECT_EQ(kv.stats().recalled_tokens, kGeo.block_size);
    // A fork shares the table, not the staging blocks.
    kv.fork(1, 2);
    EXPECT_TRUE(kv.recall_blocks(2).empty());
    kv.check_invariants();
    kv.free_sequence(2);
    // A swap-out releases them.
    ASSERT_TRUE(kv.swap_out(1));
    w.run_ops();
    EXPECT_TRUE(kv.recall_blocks(1).empty());
    EXPECT_EQ(kv.num_available_blocks(), 8);
    kv.check_invariants();
    ASSERT_TRUE(kv.swap_in(1));
    w.run_ops();
    EXPECT_EQ(kv.set_recall_blocks(1, 1), 1);
    kv.free_sequence(1);
    EXPECT_EQ(kv.num_available_blocks(), 8);
    EXPECT_EQ(kv.stats().hot.used, 0);
    kv.check_invariants();
  }
  std::filesystem::remove_all(dir);
}

// h2o with a budget of 8 (no sinks, 4 recent, 4 heavy hitters) over tokens whose keys point along
// channel (position / 4) % 4 and whose first V value is the position; positions 0..3 get all the
// attention, so h2o keeps them and drops the others in order, one per step.
TEST(KvEvictorRecall, DemotesWhatH2oDropsAndLoadsTheBlockTheQueryPointsAt) {
  World w(32);
  EvictConfig ec;
  ec.kind = EvictKind::kH2o;
  ec.budget = 8;
  ec.sinks = 0;
  ec.recall = true;
  ec.recall_blocks = 1;
  ec.validate();
  const int32_t n_head = 2;
  KvEvictor ev(w.kv, ec, kGeo.n_layer, n_head, w.storage.views());
  std::vector<TokenId> tokens(64, 3);
  w.kv.add_sequence(1);
  int32_t channel = 1;  // the query points at the keys of positions 4..7, 20..23, ...
  std::vector<BlockId> table;
  for (int32_t pos = 0; pos < 40; ++pos) {
    SCOPED_TRACE(pos);
    ASSERT_TRUE(w.kv.allocate(1, tokens, pos + 1));
    w.run_ops();
    const KvEvictor::StepImportance imp = ev.prepare(1, pos, 1, 1);
    ev.attention_table(1, table);
    const int32_t slot = ev.kv_slot(1, pos);
    const std::vector<int32_t> staged = ev.staged(1);
    ASSERT_EQ(table.size(), staged.size() + w.kv.block_table(1).size());
    EXPECT_EQ(slot, static_cast<int32_t>(staged.size()) * 4 + pos - w.kv.num_evicted(1));
    // The staged block is in the table before the sequence's own blocks, with the demoted bytes.
    const RecallStore& store = *ev.recall_store();
    for (size_t i = 0; i < staged.size(); ++i) {
      const RecallBlock& b = store.block(1, staged[i]);
      const auto* img = reinterpret_cast<const float*>(b.image->bytes()->data());
      for (int32_t r = 0; r < 4; ++r) {
        for (int32_t l = 0; l < kGeo.n_layer; ++l) {
          const KvLayerView& v = w.storage.views()[static_cast<size_t>(l)];
          EXPECT_EQ(v_row(v, table[i], r)[0], static_cast<float>(b.positions[static_cast<size_t>(r)]));
          EXPECT_EQ(0, std::memcmp(k_row(v, table[i], r), img + (l * 8 + r) * kRow, kRow * sizeof(float)));
        }
      }
    }
    // The forward pass: this token's K and V, its attention mass, and its query.
    for (const KvLayerView& v : w.storage.views()) {
      for (int32_t e = 0; e < kRow; ++e) {
        k_row(v, table[static_cast<size_t>(slot / 4)], slot % 4)[e] = e % 4 == (pos / 4) % 4 ? 3.0f : 0.0f;
        v_row(v, table[static_cast<size_t>(slot / 4)], slot % 4)[e] = static_cast<float>(pos);
      }
    }
    ASSERT_NE(imp.buffer, nullptr);
    ASSERT_NE(imp.query, nullptr);
    EXPECT_EQ(imp.kv_offset, static_cast<int32_t>(staged.size()) * 4);
    const std::vector<int32_t> positions = w.kv.slot_positions(1);
    for (size_t i = 0; i < positions.size(); ++i) {
      imp.buffer[static_cast<size_t>(imp.kv_offset) + i] = positions[i] < 4 ? 1.0f : 0.0f;
    }
    if (pos == 30) channel = 2;  // from now on the query points at positions 8..11, 24..27, ...
    for (int32_t i = 0; i < kGeo.n_layer * n_head * 4; ++i) imp.query[i] = i % 4 == channel ? 1.0f : 0.0f;
    w.kv.commit(1, tokens, pos + 1);
    const int64_t loaded_before = ev.stats().recalled_tokens;
    ev.after_step(1, pos, 1, 1, ec.budget);
    w.kv.check_invariants();
    EXPECT_EQ(w.kv.num_tokens(1), std::min(pos + 1, 8));
    const int32_t demoted = std::max(0, pos + 1 - 8);
    EXPECT_EQ(ev.stats().demoted_tokens, demoted);
    EXPECT_EQ(ev.recall_store()->num_blocks(1), demoted / 4);
    if (demoted / 4 == 0) {
      EXPECT_TRUE(ev.staged(1).empty());
      continue;
    }
    // Demoted blocks hold positions 4..7, 8..11, ...: block i's keys point along channel (i + 1) % 4.
    const int32_t n_blocks = demoted / 4;
    int32_t want = -1;
    for (int32_t i = n_blocks - 1; i >= 0; --i) {
      if ((i + 1) % 4 == channel) {
        want = i;
        break;
      }
    }
    if (want < 0) continue;  // no block along the query: any choice is valid
    EXPECT_EQ(ev.staged(1), (std::vector<int32_t>{want}));
    const bool changed = loaded_before != ev.stats().recalled_tokens;
    // A load only when the choice changed (the latest block along the query is new, or the query turned).
    EXPECT_EQ(changed, pos + 1 - 8 == 4 * want + 4 || pos == 30) << "want " << want;
    w.run_ops();
  }
  EXPECT_GT(w.kv.stats().recalled_tokens, 0);
  EXPECT_EQ(w.kv.stats().recalled_tokens, ev.stats().recalled_tokens);
  ev.forget(1);
  w.kv.free_sequence(1);
  EXPECT_EQ(w.kv.num_available_blocks(), 32);
  w.kv.check_invariants();
}

}  // namespace
}  // namespace strata
