// KvStorage (kv/kv_storage.h) on real bytes: each KvOp kind moves exactly the bytes it names (a
// copy-on-write copy, a re-encode equal to the reference codec, spills and fetches of hot blocks
// and warm slots through the cold tier), and a fetch that fails reports its own status, takes what
// derives from it in the same list along, and leaves every other op done.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "kv/host_cold_store.h"
#include "kv/kv_storage.h"
#include "kv/tiered_cold_store.h"
#include "kv/memory_cold_store.h"
#include "kv/warm_format.h"
#include "support/test_support.h"

namespace strata {
namespace {

const KvGeometry kGeo{2, 2, 8, 4, KvDtype::kF32};

KvConfig config(int32_t blocks) {
  KvConfig c;
  c.block_size = kGeo.block_size;
  c.dtype = kGeo.dtype;
  c.num_blocks = blocks;
  return c;
}

using test::MemoryColdStore;

// Storage with an in-memory cold tier of 16 slots; *store points at it.
std::unique_ptr<KvStorage> with_memory_store(KvConfig cfg, MemoryColdStore** store) {
  cfg.cold_store_factory = [store](uint64_t slot_bytes) {
    auto s = std::make_unique<MemoryColdStore>(16, slot_bytes);
    *store = s.get();
    return s;
  };
  return std::make_unique<KvStorage>(kGeo, cfg);
}

// The bytes of hot block b (every layer, K then V).
std::vector<uint8_t> hot_bytes(const KvStorage& s, BlockId b) {
  std::vector<uint8_t> out;
  for (const KvLayerView& v : s.views()) {
    const int64_t bs = v.block_stride_bytes();
    out.insert(out.end(), v.k + b * bs, v.k + (b + 1) * bs);
    out.insert(out.end(), v.v + b * bs, v.v + (b + 1) * bs);
  }
  return out;
}

std::vector<uint8_t> warm_bytes(const KvStorage& s, int32_t slot) {
  std::vector<uint8_t> out;
  for (const KvLayerView& v : s.views()) {
    out.insert(out.end(), v.warm_k + slot * v.warm_k_slot_bytes, v.warm_k + (slot + 1) * v.warm_k_slot_bytes);
    out.insert(out.end(), v.warm_v + slot * v.warm_v_slot_bytes, v.warm_v + (slot + 1) * v.warm_v_slot_bytes);
  }
  return out;
}

// Fills hot block b with f32 values in [-2, 2) that depend on (b, seed, position).
void fill_hot(KvStorage& s, BlockId b, uint32_t seed) {
  for (const KvLayerView& v : s.views()) {
    const int64_t n = v.block_stride_bytes() / 4;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t h = (static_cast<uint32_t>(b) * 2654435761u) ^ (seed * 40503u) ^ static_cast<uint32_t>(i * 97 + 13);
      const float kf = static_cast<float>(h % 4000) / 1000.0f - 2.0f;
      const float vf = static_cast<float>((h / 7) % 4000) / 1000.0f - 2.0f;
      std::memcpy(v.k + b * v.block_stride_bytes() + i * 4, &kf, 4);
      std::memcpy(v.v + b * v.block_stride_bytes() + i * 4, &vf, 4);
    }
  }
}

KvOp op(KvOp::Kind k, KvSlot src, KvSlot dst) { return KvOp{k, src, dst, {}, {}, {}}; }
constexpr auto kCopy = KvOp::Kind::kCopy;
constexpr auto kSpill = KvOp::Kind::kSpill;
constexpr auto kFetch = KvOp::Kind::kFetch;
KvSlot hot(int32_t i) { return {KvTier::kHot, i}; }
KvSlot warm(int32_t i) { return {KvTier::kWarm, i}; }
KvSlot cold(int32_t i) { return {KvTier::kCold, i}; }

TEST(KvStorage, CapacityAndViewsFollowTheConfiguration) {
  KvStorage s(kGeo, config(10));
  EXPECT_EQ(s.capacity().hot_blocks, 10);
  EXPECT_EQ(s.capacity().warm_slots, 0);
  EXPECT_EQ(s.capacity().cold_slots, 0);
  EXPECT_FALSE(s.has_cold_tier());
  EXPECT_EQ(s.capacity().hot_block_bytes, kGeo.bytes_per_block());
  ASSERT_EQ(s.views().size(), 2u);
  EXPECT_EQ(s.views()[0].block_stride_bytes(), 4 * 2 * 8 * 4);
  EXPECT_EQ(s.capacity().ram_tokens(kGeo.block_size), 40);
}

TEST(KvStorage, ACopyMovesOneBlockInEveryLayer) {
  KvStorage s(kGeo, config(8));
  for (BlockId b = 0; b < 8; ++b) fill_hot(s, b, 1);
  const std::vector<uint8_t> src = hot_bytes(s, 2), other = hot_bytes(s, 6);
  EXPECT_EQ(s.execute(std::vector<KvOp>{op(kCopy, hot(2), hot(5))}), std::vector<KvOpStatus>{KvOpStatus::kOk});
  EXPECT_EQ(hot_bytes(s, 5), src);
  EXPECT_EQ(hot_bytes(s, 2), src);
  EXPECT_EQ(hot_bytes(s, 6), other);
}

TEST(KvStorage, AReencodeWritesWhatTheReferenceCodecWrites) {
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    KvConfig cfg = config(0);
    cfg.num_blocks.reset();
    cfg.memory_bytes = kGeo.bytes_per_block() * 48;
    cfg.warm_format = f;
    cfg.warm_fraction = 0.5;
    KvStorage s(kGeo, cfg);
    const int32_t span = s.capacity().warm_span;
    ASSERT_GT(s.capacity().warm_slots, 1);
    ASSERT_GE(s.capacity().hot_blocks, 2 * span);
    std::vector<BlockId> blocks;
    for (int32_t j = 0; j < span; ++j) {
      blocks.push_back(2 * j + 1);
      fill_hot(s, 2 * j + 1, 7);
    }
    // The reference: warm_encode of the same blocks, layer by layer.
    std::vector<uint8_t> expected;
    for (const KvLayerView& v : s.views()) {
      std::vector<uint8_t> k(static_cast<size_t>(v.warm_k_slot_bytes)), vv(static_cast<size_t>(v.warm_v_slot_bytes));
      warm_encode(f, v, blocks.data(), span, k.data(), vv.data());
      expected.insert(expected.end(), k.begin(), k.end());
      expected.insert(expected.end(), vv.begin(), vv.end());
    }
    const KvOp re{KvOp::Kind::kReencode, {}, warm(1), blocks, {}, {}};
    EXPECT_EQ(s.execute(std::vector<KvOp>{re}), std::vector<KvOpStatus>{KvOpStatus::kOk});
    EXPECT_EQ(warm_bytes(s, 1), expected) << warm_format_name(f);
  }
}

// A storage with a warm tier of format f (hot blocks and warm slots half and half of 48 blocks).
KvConfig warm_config(WarmFormat f) {
  KvConfig cfg = config(0);
  cfg.num_blocks.reset();
  cfg.memory_bytes = kGeo.bytes_per_block() * 48;
  cfg.warm_format = f;
  cfg.warm_fraction = 0.5;
  return cfg;
}

// The reference codec's bytes of hot `blocks` of s, every layer (as warm_bytes lays them out).
std::vector<uint8_t> reference_warm(const KvStorage& s, WarmFormat f, const std::vector<BlockId>& blocks) {
  std::vector<uint8_t> expected;
  for (const KvLayerView& v : s.views()) {
    std::vector<uint8_t> k(static_cast<size_t>(v.warm_k_slot_bytes)), vv(static_cast<size_t>(v.warm_v_slot_bytes));
    warm_encode(f, v, blocks.data(), static_cast<int32_t>(blocks.size()), k.data(), vv.data());
    expected.insert(expected.end(), k.begin(), k.end());
    expected.insert(expected.end(), vv.begin(), vv.end());
  }
  return expected;
}

KvOp reencode_op(int32_t slot, std::vector<BlockId> blocks) { return KvOp{KvOp::Kind::kReencode, {}, warm(slot), std::move(blocks), {}, {}}; }

TEST(KvStorage, ReencodesStartedAheadWriteWhatTheReferenceCodecWrites) {
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    KvStorage s(kGeo, warm_config(f));
    ASSERT_TRUE(s.reencodes_ahead());
    const int32_t span = s.capacity().warm_span;
    ASSERT_GE(s.capacity().warm_slots, 3);
    ASSERT_GE(s.capacity().hot_blocks, 2 * span + 1);
    std::vector<BlockId> a, b;
    for (int32_t j = 0; j < span; ++j) {
      a.push_back(2 * j);
      b.push_back(2 * j + 1);
      fill_hot(s, 2 * j, 3);
      fill_hot(s, 2 * j + 1, 4);
    }
    const std::vector<uint8_t> want_a = reference_warm(s, f, a), want_b = reference_warm(s, f, b);
    const std::vector<uint8_t> other = warm_bytes(s, 0);
    const std::vector<KvOp> ops{reencode_op(2, a), reencode_op(1, b)};
    s.start_reencodes(ops);
    EXPECT_EQ(s.execute(ops), (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
    EXPECT_EQ(warm_bytes(s, 2), want_a) << warm_format_name(f);
    EXPECT_EQ(warm_bytes(s, 1), want_b) << warm_format_name(f);
    EXPECT_EQ(warm_bytes(s, 0), other) << "no other slot is written";
    const KvTransferStats t = s.transfer_stats();
    EXPECT_EQ(t.reencode_ops, 2);
    EXPECT_EQ(t.reencode_ops_ahead, 2) << "both ran ahead, execute() did not encode them again";
  }
}

TEST(KvStorage, AReencodeAfterAnOpThatWritesHotBlocksWaitsForExecute) {
  // [copy hot 7 -> hot 0, re-encode (0, 1, ...) -> warm 1]: the re-encode must read block 0 after
  // the copy, so it cannot start ahead.
  const WarmFormat f = WarmFormat::kInt8;
  KvStorage s(kGeo, warm_config(f));
  KvStorage twin(kGeo, warm_config(f));
  const int32_t span = s.capacity().warm_span;
  std::vector<BlockId> blocks;
  for (int32_t j = 0; j < span; ++j) blocks.push_back(j);
  for (KvStorage* st : {&s, &twin}) {
    for (BlockId b = 0; b < 8; ++b) fill_hot(*st, b, 5);
  }
  // The expected bytes: the copy alone on the twin (a copy is checked above), then the codec.
  ASSERT_EQ(twin.execute(std::vector<KvOp>{op(kCopy, hot(7), hot(0))})[0], KvOpStatus::kOk);
  const std::vector<uint8_t> want = reference_warm(twin, f, blocks);
  ASSERT_NE(want, reference_warm(s, f, blocks)) << "the copy must change what is encoded";
  const std::vector<KvOp> ops{op(kCopy, hot(7), hot(0)), reencode_op(1, blocks)};
  s.start_reencodes(ops);
  EXPECT_EQ(s.execute(ops), (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  EXPECT_EQ(warm_bytes(s, 1), want);
  EXPECT_EQ(s.transfer_stats().reencode_ops, 1);
  EXPECT_EQ(s.transfer_stats().reencode_ops_ahead, 0);
}

TEST(KvStorage, AReencodeStartedAheadButDroppedStandsForNoOtherOp) {
  // A re-encode started ahead and then dropped from the list (its sequence ended: KvManager drops
  // it) must not stand for a different op into the same slot, in this execute() or a later one.
  const WarmFormat f = WarmFormat::kInt4;
  KvStorage s(kGeo, warm_config(f));
  const int32_t span = s.capacity().warm_span;
  std::vector<BlockId> a, b;
  for (int32_t j = 0; j < span; ++j) {
    a.push_back(j);
    b.push_back(span + j);
  }
  for (BlockId x = 0; x < 2 * span; ++x) fill_hot(s, x, 6);
  const std::vector<uint8_t> want_b = reference_warm(s, f, b), want_a = reference_warm(s, f, a);
  s.start_reencodes(std::vector<KvOp>{reencode_op(0, a)});
  EXPECT_EQ(s.execute(std::vector<KvOp>{reencode_op(0, b)}), std::vector<KvOpStatus>{KvOpStatus::kOk});
  EXPECT_EQ(warm_bytes(s, 0), want_b);
  EXPECT_EQ(s.transfer_stats().reencode_ops_ahead, 0);
  // Started ahead, then an empty list: nothing is left over for the next one.
  s.start_reencodes(std::vector<KvOp>{reencode_op(0, a)});
  EXPECT_TRUE(s.execute({}).empty());
  fill_hot(s, a[0], 8);  // a new content of block a[0]: a later re-encode of `a` must see it
  const std::vector<uint8_t> want_a2 = reference_warm(s, f, a);
  ASSERT_NE(want_a2, want_a);
  EXPECT_EQ(s.execute(std::vector<KvOp>{reencode_op(0, a)}), std::vector<KvOpStatus>{KvOpStatus::kOk});
  EXPECT_EQ(warm_bytes(s, 0), want_a2);
  EXPECT_EQ(s.transfer_stats().reencode_ops_ahead, 0);
}

TEST(KvStorage, ReencodesAheadAreOffOnRequest) {
  KvConfig cfg = warm_config(WarmFormat::kInt8);
  cfg.reencode_ahead = false;
  KvStorage s(kGeo, cfg);
  EXPECT_FALSE(s.reencodes_ahead());
  const int32_t span = s.capacity().warm_span;
  std::vector<BlockId> a;
  for (int32_t j = 0; j < span; ++j) {
    a.push_back(j);
    fill_hot(s, j, 2);
  }
  const std::vector<uint8_t> want = reference_warm(s, WarmFormat::kInt8, a);
  const std::vector<KvOp> ops{reencode_op(0, a)};
  s.start_reencodes(ops);
  EXPECT_EQ(s.execute(ops)[0], KvOpStatus::kOk);
  EXPECT_EQ(warm_bytes(s, 0), want);
  EXPECT_EQ(s.transfer_stats().reencode_ops_ahead, 0);
  EXPECT_FALSE(KvStorage(kGeo, config(8)).reencodes_ahead()) << "no warm tier, nothing to start";
}

// 24 blocks' memory, half of it an int8 warm tier, spilling to a 1 MiB file in dir.
KvConfig spill_config(const std::string& dir) {
  KvConfig cfg = config(0);
  cfg.num_blocks.reset();
  cfg.memory_bytes = kGeo.bytes_per_block() * 24;
  cfg.warm_format = WarmFormat::kInt8;
  cfg.warm_fraction = 0.5;
  cfg.spill_dir = dir;
  cfg.spill_bytes = 1 << 20;
  return cfg;
}

// Hot blocks 4.. (a warm span of them) filled from `seed` and re-encoded into warm slot 0; their ids.
std::vector<BlockId> fill_warm0(KvStorage& s, int seed) {
  std::vector<BlockId> group;
  for (int32_t j = 0; j < s.capacity().warm_span; ++j) {
    group.push_back(4 + j);
    fill_hot(s, 4 + j, seed);
  }
  EXPECT_EQ(s.execute(std::vector<KvOp>{KvOp{KvOp::Kind::kReencode, {}, warm(0), group, {}, {}}})[0], KvOpStatus::kOk);
  return group;
}

TEST(KvStorage, SpilledHotBlocksAndWarmSlotsComeBackByteForByte) {
  const std::string dir = test::make_temp_dir("strata-kvs");
  {
    KvStorage s(kGeo, spill_config(dir));
    ASSERT_TRUE(s.has_cold_tier());
    EXPECT_GE(s.capacity().cold_slot_bytes, s.capacity().hot_block_bytes + 8);
    EXPECT_GE(s.capacity().cold_slot_bytes, s.capacity().warm_slot_bytes + 8);
    fill_hot(s, 1, 9);
    fill_warm0(s, 3);
    const std::vector<uint8_t> h1 = hot_bytes(s, 1), w0 = warm_bytes(s, 0);
    // Out, then the RAM slots are reused by something else, then back into other slots.
    EXPECT_EQ(s.execute(std::vector<KvOp>{op(kSpill, hot(1), cold(3)), op(kSpill, warm(0), cold(7))}),
              (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
    fill_hot(s, 1, 10);
    EXPECT_NE(hot_bytes(s, 1), h1);
    EXPECT_EQ(s.execute(std::vector<KvOp>{op(kFetch, cold(3), hot(2)), op(kFetch, cold(7), warm(1))}),
              (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
    EXPECT_EQ(hot_bytes(s, 2), h1);
    EXPECT_EQ(warm_bytes(s, 1), w0);
    // A fetch of a slot written earlier in the same list reads that write.
    fill_hot(s, 0, 11);
    const std::vector<uint8_t> h0 = hot_bytes(s, 0);
    EXPECT_EQ(s.execute(std::vector<KvOp>{op(kSpill, hot(0), cold(3)), op(kFetch, cold(3), hot(6))}),
              (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
    EXPECT_EQ(hot_bytes(s, 6), h0);
  }
  std::filesystem::remove_all(dir);
}

KvOp migrate(int32_t host, int32_t file, KvTier content) {
  KvOp o{KvOp::Kind::kMigrate, cold(host), cold(file), {}, {}, {}};
  o.content = content;
  return o;
}

// Host memory above a spill file (make_cold_store, 2 host slots): a block moved from a host slot to
// a file slot, its host slot overwritten in the same list, comes back from the file exactly as it
// was written, hot blocks and warm slots alike.
TEST(KvStorage, AMigratedBlockComesBackFromTheFileByteForByte) {
  const std::string dir = test::make_temp_dir("strata-kvs");
  KvConfig cfg = spill_config(dir);
  {
    // Slots as large as a hot block or a warm slot with their frame: 2 in host memory.
    KvConfig no_spill = cfg;
    no_spill.spill_dir.clear();
    KvStorage probe(kGeo, no_spill);
    cfg.host_bytes = 2 * (std::max(probe.capacity().hot_block_bytes, probe.capacity().warm_slot_bytes) + 8);
  }
  {
    KvStorage s(kGeo, cfg);
    ASSERT_EQ(s.capacity().cold_host_slots, 2);
    fill_warm0(s, 3);
    fill_hot(s, 1, 9);
    fill_hot(s, 2, 19);
    const std::vector<uint8_t> h1 = hot_bytes(s, 1), h2 = hot_bytes(s, 2), w0 = warm_bytes(s, 0);
    ASSERT_EQ(s.execute(std::vector<KvOp>{op(kSpill, hot(1), cold(0)), op(kSpill, warm(0), cold(1))}),
              (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
    // Down to file slots 5 and 2, each host slot taken by the next block right after; the RAM
    // copies change meanwhile.
    EXPECT_EQ(s.execute(std::vector<KvOp>{migrate(0, 5, KvTier::kHot), op(kSpill, hot(2), cold(0)),
                                          migrate(1, 2, KvTier::kWarm), op(kSpill, hot(2), cold(1))}),
              (std::vector<KvOpStatus>(4, KvOpStatus::kOk)));
    fill_hot(s, 1, 10);
    fill_hot(s, 2, 20);
    fill_warm0(s, 4);
    EXPECT_NE(hot_bytes(s, 1), h1);
    EXPECT_NE(warm_bytes(s, 0), w0);
    EXPECT_EQ(s.execute(std::vector<KvOp>{op(kFetch, cold(5), hot(3)), op(kFetch, cold(2), warm(1)),
                                          op(kFetch, cold(0), hot(6)), op(kFetch, cold(1), hot(7))}),
              (std::vector<KvOpStatus>(4, KvOpStatus::kOk)));
    EXPECT_EQ(hot_bytes(s, 3), h1);
    EXPECT_EQ(warm_bytes(s, 1), w0);
    EXPECT_EQ(hot_bytes(s, 6), h2);
    EXPECT_EQ(hot_bytes(s, 7), h2);
    // Moved and fetched again within one list: the fetch reads what the move wrote.
    fill_hot(s, 0, 30);
    const std::vector<uint8_t> h0 = hot_bytes(s, 0);
    EXPECT_EQ(s.execute(std::vector<KvOp>{op(kSpill, hot(0), cold(0)), migrate(0, 7, KvTier::kHot),
                                          op(kFetch, cold(7), hot(8))}),
              (std::vector<KvOpStatus>(3, KvOpStatus::kOk)));
    EXPECT_EQ(hot_bytes(s, 8), h0);
  }
  std::filesystem::remove_all(dir);
}

// A host slot whose frame is damaged fails its move (kReadFailed), and the file slot it was moving
// to reads as lost afterwards; a block whose content was lost earlier in the list moves as lost.
TEST(KvStorage, AMoveOfADamagedHostSlotFailsAndLosesTheFileSlot) {
  HostColdStore* host = nullptr;
  MemoryColdStore* file = nullptr;
  KvConfig cfg = config(8);
  cfg.cold_store_factory = [&](uint64_t slot_bytes) {
    auto h = std::make_unique<HostColdStore>(2 * slot_bytes, slot_bytes);
    auto f = std::make_unique<MemoryColdStore>(4, slot_bytes);
    host = h.get();
    file = f.get();
    return std::make_unique<TieredColdStore>(std::move(h), std::move(f));
  };
  KvStorage s(kGeo, cfg);
  ASSERT_EQ(s.capacity().cold_host_slots, 2);
  fill_hot(s, 0, 1);
  fill_hot(s, 1, 2);
  ASSERT_EQ(s.execute(std::vector<KvOp>{op(kSpill, hot(0), cold(0)), op(kSpill, hot(1), cold(1))}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  host->slot_memory(0)[20] ^= 0x10;  // a flipped bit in host memory
  EXPECT_EQ(s.execute(std::vector<KvOp>{migrate(0, 2, KvTier::kHot), migrate(1, 3, KvTier::kHot)}),
            (std::vector<KvOpStatus>{KvOpStatus::kReadFailed, KvOpStatus::kOk}));
  EXPECT_FALSE(file->slots_.count(0)) << "nothing written for the damaged block";
  ASSERT_TRUE(file->slots_.count(1));
  // The frame in the file is sealed for its new slot: the same payload after the 8-byte header.
  const std::vector<uint8_t> h1 = hot_bytes(s, 1);
  EXPECT_EQ(std::vector<uint8_t>(file->slots_[1].begin() + 8, file->slots_[1].end()), h1);
  EXPECT_EQ(s.execute(std::vector<KvOp>{op(kFetch, cold(2), hot(4)), op(kFetch, cold(3), hot(5))}),
            (std::vector<KvOpStatus>{KvOpStatus::kSourceLost, KvOpStatus::kOk}));
  EXPECT_EQ(hot_bytes(s, 5), h1);
  // Lost content spilled to a host slot moves as lost.
  file->failing_.insert(1);
  EXPECT_EQ(s.execute(std::vector<KvOp>{op(kFetch, cold(3), hot(6)), op(kSpill, hot(6), cold(0)), migrate(0, 2, KvTier::kHot)}),
            (std::vector<KvOpStatus>{KvOpStatus::kReadFailed, KvOpStatus::kSourceLost, KvOpStatus::kSourceLost}));
}

TEST(KvStorage, AReadAheadServesALaterFetchUnlessItsSlotIsWrittenAgain) {
  MemoryColdStore* store = nullptr;
  auto s = with_memory_store(config(8), &store);
  const std::vector<std::pair<int32_t, KvTier>> slot2{{2, KvTier::kHot}};
  fill_hot(*s, 1, 5);
  const std::vector<uint8_t> first = hot_bytes(*s, 1);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(2))})[0], KvOpStatus::kOk);

  // Read ahead, then fetched in a later step: no second read, the bytes of the spill.
  s->prefetch(slot2);
  s->prefetch(slot2);  // asked again while in flight: still one read
  EXPECT_EQ(store->reads_issued(), 1);
  fill_hot(*s, 1, 6);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(2), hot(3))})[0], KvOpStatus::kOk);
  EXPECT_EQ(store->reads_issued(), 1);
  EXPECT_EQ(s->prefetch_hits(), 1);
  EXPECT_EQ(hot_bytes(*s, 3), first);

  // Written again after the read ahead (in a later list, or earlier in the same list): the stale
  // read is dropped and the fetch reads the new content.
  const std::vector<uint8_t> second = hot_bytes(*s, 1);
  s->prefetch(slot2);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(2))})[0], KvOpStatus::kOk);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(2), hot(4))})[0], KvOpStatus::kOk);
  EXPECT_EQ(hot_bytes(*s, 4), second);
  fill_hot(*s, 1, 7);
  const std::vector<uint8_t> third = hot_bytes(*s, 1);
  s->prefetch(slot2);
  EXPECT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(2)), op(kFetch, cold(2), hot(5))}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  EXPECT_EQ(hot_bytes(*s, 5), third);
  EXPECT_EQ(s->prefetch_hits(), 1);

  // A read ahead not asked for again is dropped; the fetch then reads the slot itself.
  s->prefetch(slot2);
  const int64_t reads = store->reads_issued();
  s->prefetch({});
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(2), hot(6))})[0], KvOpStatus::kOk);
  EXPECT_EQ(store->reads_issued(), reads + 1);
  EXPECT_EQ(hot_bytes(*s, 6), third);
  EXPECT_EQ(s->prefetch_hits(), 1);
  // Out-of-range and lost slots are ignored.
  const std::vector<std::pair<int32_t, KvTier>> bad{{-1, KvTier::kHot}, {99, KvTier::kHot}, {3, KvTier::kCold}};
  s->prefetch(bad);
  EXPECT_EQ(store->reads_issued(), reads + 1);
}

TEST(KvStorage, AFailedFetchFailsItsOwnOpAndWhatDerivesFromItOnly) {
  MemoryColdStore* store = nullptr;
  auto s = with_memory_store(config(12), &store);
  ASSERT_NE(store, nullptr);
  for (BlockId b = 0; b < 12; ++b) fill_hot(*s, b, 5);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(2)), op(kSpill, hot(8), cold(9))}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  const std::vector<uint8_t> h0 = hot_bytes(*s, 0), h8 = hot_bytes(*s, 8);
  store->failing_.insert(2);
  const std::vector<KvOp> ops = {
      op(kCopy, hot(0), hot(10)),   // ok
      op(kFetch, cold(2), hot(3)),  // the store fails this read
      op(kCopy, hot(3), hot(4)),    // copies lost content
      op(kSpill, hot(3), cold(5)),  // nothing worth writing: cold slot 5 is lost too
      op(kFetch, cold(5), hot(6)),  // so this fetch fails as well
      op(kFetch, cold(9), hot(7)),  // ok
      op(kSpill, hot(0), cold(11)), // ok
  };
  const std::vector<KvOpStatus> st = s->execute(ops);
  EXPECT_EQ(st, (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kReadFailed, KvOpStatus::kSourceLost,
                                         KvOpStatus::kSourceLost, KvOpStatus::kSourceLost, KvOpStatus::kOk,
                                         KvOpStatus::kOk}));
  EXPECT_EQ(hot_bytes(*s, 10), h0);
  EXPECT_EQ(hot_bytes(*s, 7), h8);
  EXPECT_FALSE(store->slots_.count(5)) << "a lost block is not written";
  ASSERT_TRUE(store->slots_.count(11));
  // A later list fetches the good slot; the lost one stays lost until written again.
  EXPECT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(11), hot(2)), op(kFetch, cold(5), hot(3))}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kSourceLost}));
  EXPECT_EQ(hot_bytes(*s, 2), h0);
}

TEST(KvStorage, DamagedOrStaleColdSlotsFailTheirChecksum) {
  MemoryColdStore* store = nullptr;
  auto s = with_memory_store(config(6), &store);
  fill_hot(*s, 0, 1);
  fill_hot(*s, 1, 2);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(0), cold(0)), op(kSpill, hot(1), cold(1))}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  store->slots_[0][20] ^= 0x40;                 // a flipped bit
  store->slots_[1].resize(store->slots_[1].size() / 2);  // a torn write
  EXPECT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(0), hot(2)), op(kFetch, cold(1), hot(3))}),
            (std::vector<KvOpStatus>{KvOpStatus::kReadFailed, KvOpStatus::kReadFailed}));
  // Stale content: slot 1's first generation put back after a second write.
  fill_hot(*s, 1, 3);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(4))})[0], KvOpStatus::kOk);
  const std::vector<uint8_t> gen1 = store->slots_[4];
  fill_hot(*s, 1, 4);
  ASSERT_EQ(s->execute(std::vector<KvOp>{op(kSpill, hot(1), cold(4))})[0], KvOpStatus::kOk);
  store->slots_[4] = gen1;
  EXPECT_EQ(s->execute(std::vector<KvOp>{op(kFetch, cold(4), hot(5))})[0], KvOpStatus::kReadFailed);
}

}  // namespace
}  // namespace strata
