// The host tier of the cold store (kv/host_cold_store.h) and the host-then-file tiering
// (kv/tiered_cold_store.h, make_cold_store): bytes written to a slot read back exactly, in
// submission order; the slots are in the memory the allocator gave, one after the other, and
// slot_memory() points at them; corruption of that memory is caught by KvStorage's framing like a
// damaged file slot; with a file below, the host slots come first and the KV manager's cold pool
// takes them first (BlockPool's preferred range).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/host_cold_store.h"
#include "kv/kv_storage.h"
#include "kv/tiered_cold_store.h"
#include "support/test_support.h"

namespace strata {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return b;
}

// An allocator over a vector the test can inspect, counting its calls.
struct VectorAllocator {
  std::shared_ptr<std::vector<uint8_t>> memory;
  int calls = 0;
  HostAllocator get() {
    return [this](uint64_t bytes) {
      ++calls;
      memory = std::make_shared<std::vector<uint8_t>>(bytes, 0xAB);
      return HostMemory{memory->data(), memory};
    };
  }
};

TEST(HostColdStore, BytesWrittenReadBackExactly) {
  HostColdStore store(10 * 4096 + 100, 4096);
  EXPECT_EQ(store.num_slots(), 10) << "capacity is whole slots";
  EXPECT_EQ(store.slot_bytes(), 4096u);
  EXPECT_NE(store.describe().find("host memory"), std::string::npos) << store.describe();
  for (int64_t s = 0; s < 10; ++s) store.write(s, pattern(4096, static_cast<uint8_t>(s)));
  std::vector<uint64_t> tickets;
  for (int64_t s = 9; s >= 0; --s) tickets.push_back(store.read(s, 4096));
  const uint64_t short_ticket = store.read(3, 10);
  for (int64_t s = 9; s >= 0; --s) EXPECT_EQ(store.wait(tickets[static_cast<size_t>(9 - s)]), pattern(4096, static_cast<uint8_t>(s))) << s;
  const auto whole = pattern(4096, 3);
  EXPECT_EQ(store.wait(short_ticket), std::vector<uint8_t>(whole.begin(), whole.begin() + 10));
  store.drain();
}

TEST(HostColdStore, ReadsSeeTheWritesQueuedBeforeThemAndNoneAfter) {
  HostColdStore store(4 * 512, 512);
  store.write(1, pattern(512, 1));
  const uint64_t a = store.read(1, 512);
  store.write(1, pattern(512, 2));  // overwritten after the read was queued
  const uint64_t b = store.read(1, 512);
  store.write(2, pattern(100, 5));  // a partial slot
  const uint64_t c = store.read(2, 100);
  EXPECT_EQ(store.wait(b), pattern(512, 2));
  EXPECT_EQ(store.wait(a), pattern(512, 1));
  EXPECT_EQ(store.wait(c), pattern(100, 5));
}

TEST(HostColdStore, SlotsLieInTheAllocatorsMemoryOneAfterTheOther) {
  VectorAllocator alloc;
  HostColdStore store(3 * 256, 256, alloc.get());
  ASSERT_EQ(alloc.calls, 1);
  ASSERT_EQ(alloc.memory->size(), 3u * 256);
  EXPECT_NE(store.describe().find("pinned"), std::string::npos) << store.describe();
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(store.slot_memory(s), alloc.memory->data() + s * 256) << s;
  store.write(2, pattern(256, 7));
  EXPECT_EQ(std::vector<uint8_t>(alloc.memory->begin() + 512, alloc.memory->end()), pattern(256, 7));
  // What a device path writes into slot memory directly is what a later read returns.
  const auto direct = pattern(256, 8);
  std::memcpy(store.slot_memory(0), direct.data(), direct.size());
  EXPECT_EQ(store.wait(store.read(0, 256)), direct);
}

TEST(HostColdStore, AStoreSmallerThanOneSlotIsAnErrorNamingTheFlag) {
  try {
    HostColdStore store(1000, 4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-host-memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("smaller than one KV block"), std::string::npos) << e.what();
  }
}

class TieredColdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("strata-tiered"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TieredColdStoreTest, HostSlotsComeFirstThenTheFilesAndEachKeepsItsBytes) {
  KvConfig cfg;
  cfg.host_bytes = 3 * 512;
  cfg.spill_dir = dir_;
  cfg.spill_bytes = 5 * 512;
  std::unique_ptr<ColdStore> store = make_cold_store(cfg, 512);
  ASSERT_NE(dynamic_cast<TieredColdStore*>(store.get()), nullptr);
  EXPECT_EQ(store->num_slots(), 8);
  EXPECT_EQ(count_host_slots(*store), 3);
  for (int64_t s = 0; s < 3; ++s) EXPECT_NE(store->slot_memory(s), nullptr) << s;
  for (int64_t s = 3; s < 8; ++s) EXPECT_EQ(store->slot_memory(s), nullptr) << s;
  EXPECT_NE(store->describe().find("host memory"), std::string::npos) << store->describe();
  EXPECT_NE(store->describe().find(dir_), std::string::npos) << store->describe();
  for (int64_t s = 0; s < 8; ++s) store->write(s, pattern(512, static_cast<uint8_t>(10 + s)));
  std::vector<uint64_t> tickets;
  for (int64_t s = 0; s < 8; ++s) tickets.push_back(store->read(s, 512));
  store->write(2, pattern(512, 99));  // after the reads: they do not see it
  store->write(6, pattern(512, 98));
  for (int64_t s = 7; s >= 0; --s) EXPECT_EQ(store->wait(tickets[static_cast<size_t>(s)]), pattern(512, static_cast<uint8_t>(10 + s))) << s;
  EXPECT_EQ(store->wait(store->read(2, 512)), pattern(512, 99));
  EXPECT_EQ(store->wait(store->read(6, 512)), pattern(512, 98));
  // A host slot's memory holds its latest write.
  EXPECT_EQ(std::vector<uint8_t>(store->slot_memory(2), store->slot_memory(2) + 512), pattern(512, 99));
  store->drain();
}

TEST_F(TieredColdStoreTest, TheConfigurationPicksHostFileBothOrNone) {
  KvConfig cfg;
  EXPECT_EQ(make_cold_store(cfg, 512), nullptr);
  cfg.host_bytes = 4 * 512;
  auto host = make_cold_store(cfg, 512);
  ASSERT_NE(dynamic_cast<HostColdStore*>(host.get()), nullptr);
  EXPECT_EQ(count_host_slots(*host), 4);
  VectorAllocator alloc;
  auto pinned = make_cold_store(cfg, 512, alloc.get());
  EXPECT_EQ(alloc.calls, 1) << "the host tier's memory comes from the allocator when given";
  EXPECT_EQ(pinned->slot_memory(1), alloc.memory->data() + 512);
  cfg.host_bytes = 0;
  cfg.spill_dir = dir_;
  cfg.spill_bytes = 4 * 512;
  auto file = make_cold_store(cfg, 512);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(count_host_slots(*file), 0);
  EXPECT_EQ(file->slot_memory(0), nullptr);
}

TEST(BlockPoolPreferredRange, LowestFreeIdFirstAndItsCountsKept) {
  BlockPool p(6, 2);  // ids 0, 1 preferred (host slots), 2..5 the rest (file slots)
  auto take = [&] { return p.allocate()->id; };
  EXPECT_EQ(take(), 0);
  EXPECT_EQ(take(), 1);
  EXPECT_EQ(take(), 2);
  EXPECT_EQ(take(), 3);
  EXPECT_EQ(p.preferred_counts().used, 2);
  EXPECT_EQ(p.preferred_counts().free, 0);
  // Freed in the order 3, 0: a LIFO list would hand out 0 then 3; here the lowest goes first.
  p.decref(3);
  p.decref(0);
  EXPECT_EQ(p.preferred_counts().free, 1);
  EXPECT_EQ(take(), 0);
  p.decref(2);
  p.decref(1);
  EXPECT_EQ(take(), 1);
  // A cached preferred block counts as cached, and a hit takes it out of the LRU queue.
  BlockHash h;
  h.hi = 7;
  h.lo = 7;
  p.set_hash(1, h);
  p.decref(1);
  EXPECT_EQ(p.preferred_counts().cached, 1);
  EXPECT_EQ(p.preferred_counts().used, 1);
  p.check_invariants();
  p.incref(1);
  EXPECT_EQ(p.preferred_counts().cached, 0);
  EXPECT_EQ(p.preferred_counts().used, 2);
  p.check_invariants();
  // Without a preferred range the order stays LIFO.
  BlockPool q(4);
  q.allocate();
  q.allocate();
  q.allocate();
  q.decref(0);
  q.decref(2);
  EXPECT_EQ(q.allocate()->id, 2);
  EXPECT_EQ(q.preferred_counts().free, 0);
}

// KvStorage over a host tier: blocks spilled there come back byte for byte; memory damaged in a
// host slot (through slot_memory, as a stray device write would) fails the fetch's checksum.
const KvGeometry kGeo{2, 2, 8, 4, KvDtype::kF32};

void fill_hot(KvStorage& s, BlockId b, uint8_t seed) {
  for (const KvLayerView& v : s.views()) {
    const int64_t bs = v.block_stride_bytes();
    const auto k = pattern(static_cast<size_t>(bs), seed), vv = pattern(static_cast<size_t>(bs), static_cast<uint8_t>(seed + 100));
    std::memcpy(v.k + b * bs, k.data(), k.size());
    std::memcpy(v.v + b * bs, vv.data(), vv.size());
  }
}
std::vector<uint8_t> hot_bytes(const KvStorage& s, BlockId b) {
  std::vector<uint8_t> out;
  for (const KvLayerView& v : s.views()) {
    const int64_t bs = v.block_stride_bytes();
    out.insert(out.end(), v.k + b * bs, v.k + (b + 1) * bs);
    out.insert(out.end(), v.v + b * bs, v.v + (b + 1) * bs);
  }
  return out;
}
KvOp op(KvOp::Kind k, KvSlot src, KvSlot dst) { return KvOp{k, src, dst, {}, {}, {}}; }

TEST(HostColdStore, KvStorageSpillsAndFetchesThroughItAndItsFramingCatchesDamage) {
  KvConfig cfg;
  cfg.block_size = kGeo.block_size;
  cfg.dtype = kGeo.dtype;
  cfg.num_blocks = 8;
  cfg.host_bytes = 4 * (kGeo.bytes_per_block() + 8);
  ColdStore* store = nullptr;
  cfg.cold_store_factory = [&](uint64_t slot_bytes) {
    auto c = cfg;
    c.cold_store_factory = nullptr;
    auto s = make_cold_store(c, slot_bytes);
    store = s.get();
    return s;
  };
  KvStorage s(kGeo, cfg);
  ASSERT_EQ(s.capacity().cold_slots, 4);
  EXPECT_EQ(s.capacity().cold_host_slots, 4);
  const KvSlot h0{KvTier::kHot, 0}, h1{KvTier::kHot, 1}, h2{KvTier::kHot, 2}, h3{KvTier::kHot, 3};
  const KvSlot c0{KvTier::kCold, 0}, c1{KvTier::kCold, 1};
  fill_hot(s, 0, 1);
  fill_hot(s, 1, 2);
  const auto b0 = hot_bytes(s, 0), b1 = hot_bytes(s, 1);
  ASSERT_EQ(s.execute(std::vector<KvOp>{op(KvOp::Kind::kSpill, h0, c0), op(KvOp::Kind::kSpill, h1, c1)}),
            (std::vector<KvOpStatus>{KvOpStatus::kOk, KvOpStatus::kOk}));
  // The payload sits after the 8-byte frame header in the slot's memory, in capture order.
  EXPECT_EQ(std::vector<uint8_t>(store->slot_memory(0) + 8, store->slot_memory(0) + 8 + b0.size()), b0);
  fill_hot(s, 0, 3);
  EXPECT_EQ(s.execute(std::vector<KvOp>{op(KvOp::Kind::kFetch, c0, h2)})[0], KvOpStatus::kOk);
  EXPECT_EQ(hot_bytes(s, 2), b0);
  store->slot_memory(1)[8 + 17] ^= 0x10;  // one flipped bit in the payload
  EXPECT_EQ(s.execute(std::vector<KvOp>{op(KvOp::Kind::kFetch, c1, h3)})[0], KvOpStatus::kReadFailed);
  EXPECT_GT(s.transfer_stats().cold_bytes, 0u);
}

}  // namespace
}  // namespace strata
