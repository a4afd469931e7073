// KV block transfers (Backend::kv_blocks_to_host / kv_blocks_to_device / copy_to_device_async,
// transfer_fence / transfer_wait) and KvStorage's path for cold slots in host memory
// (ColdStore::slot_memory; on the CPU through KvStorage::use_host_transfers), on the CPU backend
// here and on the CUDA backend in tests/cuda/cuda_kv_transfer_test.cpp (this file compiled with
// STRATA_KV_TRANSFER_TEST_CUDA, label `cuda`, SKIPPED with the reason where no GPU is usable).
//
// Every expectation is computed here from the test's own host copy of the arenas: a block's host
// bytes are, layer by layer, its K bytes then its V bytes (a hot block's block_size x kv_heads x
// head_dim elements; a warm slot's warm_k_slot_bytes then warm_v_slot_bytes), written out below
// without the backend's kv_block_pieces. Copies are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "kv/kv_storage.h"
#include "kv/memory_cold_store.h"
#include "kv/tiered_cold_store.h"
#include "kv/warm_format.h"

#if defined(STRATA_KV_TRANSFER_TEST_CUDA) && __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define STRATA_KV_TRANSFER_TEST_PINNED 1
#endif

namespace strata {
namespace {

// The instantiation prefix names the device, so the two executables' tests have their own names.
#ifdef STRATA_KV_TRANSFER_TEST_CUDA
constexpr DeviceKind kDevice = DeviceKind::kCuda;
#define KV_TRANSFER_DEVICE Cuda
#else
constexpr DeviceKind kDevice = DeviceKind::kCpu;
#define KV_TRANSFER_DEVICE Cpu
#endif

// Host memory for transfers: page-locked (cudaHostAlloc) when asked for and this is the CUDA
// test, else ordinary memory (which transfers must handle too, only slower).
class HostBytes {
 public:
  HostBytes(size_t n, bool pinned) : n_(n) {
#ifdef STRATA_KV_TRANSFER_TEST_PINNED
    if (pinned) {
      void* p = nullptr;
      if (cudaHostAlloc(&p, std::max<size_t>(n, 1), cudaHostAllocDefault) != cudaSuccess) throw Error("cudaHostAlloc failed");
      pinned_ = static_cast<uint8_t*>(p);
      std::memset(pinned_, 0, n);
      return;
    }
#endif
    (void)pinned;
    plain_.assign(n, 0);
  }
  ~HostBytes() {
#ifdef STRATA_KV_TRANSFER_TEST_PINNED
    if (pinned_) (void)cudaFreeHost(pinned_);
#endif
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  uint8_t* data() { return pinned_ ? pinned_ : plain_.data(); }
  size_t size() const { return n_; }
  std::vector<uint8_t> bytes(size_t at, size_t n) { return {data() + at, data() + at + n}; }

 private:
  size_t n_;
  uint8_t* pinned_ = nullptr;
  std::vector<uint8_t> plain_;
};

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::vector<uint8_t> download(Backend& be, const uint8_t* p, size_t n) {
  std::vector<uint8_t> out(n);
  be.copy_to_host(out.data(), p, n);
  return out;
}

// Several layers of KV arenas, hot and warm, with random bytes: the host copy (the expectation)
// and the backend's.
struct Arenas {
  struct Layer {
    std::vector<uint8_t> k, v, wk, wv;  // host copies
    std::unique_ptr<DeviceBuffer> dk, dv, dwk, dwv;
  };
  std::vector<Layer> layers;
  std::vector<KvLayerView> views;  // backend memory
  int64_t hot_bytes = 0;           // one layer's K (or V) of a hot block
  int64_t warm_k = 0, warm_v = 0;  // one layer's warm slot bytes

  Arenas(Backend& be, int32_t n_layer, KvDtype dtype, WarmFormat warm, int32_t hot_blocks, int32_t warm_slots,
         std::mt19937& rng) {
    KvLayerView v;
    v.dtype = dtype;
    v.block_size = 16;
    v.n_kv_heads = 2;
    v.head_dim = 32;
    hot_bytes = v.block_stride_bytes();
    if (warm != WarmFormat::kNone) {
      v.n_hot_blocks = hot_blocks;
      v.warm_format = warm;
      v.warm_span = warm_span(warm, v.block_size);
      v.warm_k_slot_bytes = warm_k = warm_slot_bytes(warm, false, v.block_size, v.n_kv_heads, v.head_dim);
      v.warm_v_slot_bytes = warm_v = warm_slot_bytes(warm, true, v.block_size, v.n_kv_heads, v.head_dim);
    }
    auto put = [&](std::vector<uint8_t>& h, std::unique_ptr<DeviceBuffer>& d, size_t n) -> uint8_t* {
      h = random_bytes(n, rng);
      d = be.allocate(n, MemoryUse::kKvCache);
      be.copy_to_device(d->data(), h.data(), n);
      return d->data();
    };
    layers.resize(static_cast<size_t>(n_layer));
    for (Layer& l : layers) {
      KvLayerView lv = v;
      lv.k = put(l.k, l.dk, static_cast<size_t>(hot_bytes * hot_blocks));
      lv.v = put(l.v, l.dv, static_cast<size_t>(hot_bytes * hot_blocks));
      if (warm != WarmFormat::kNone) {
        lv.warm_k = put(l.wk, l.dwk, static_cast<size_t>(warm_k * warm_slots));
        lv.warm_v = put(l.wv, l.dwv, static_cast<size_t>(warm_v * warm_slots));
      }
      views.push_back(lv);
    }
  }

  size_t block_bytes(bool warm) const {
    return layers.size() * static_cast<size_t>(warm ? warm_k + warm_v : 2 * hot_bytes);
  }
  // The block's bytes as they move: per layer K then V, from the host copy.
  std::vector<uint8_t> expected(bool warm, int32_t i) const {
    std::vector<uint8_t> out;
    for (const Layer& l : layers) {
      if (warm) {
        out.insert(out.end(), l.wk.begin() + i * warm_k, l.wk.begin() + (i + 1) * warm_k);
        out.insert(out.end(), l.wv.begin() + i * warm_v, l.wv.begin() + (i + 1) * warm_v);
      } else {
        out.insert(out.end(), l.k.begin() + i * hot_bytes, l.k.begin() + (i + 1) * hot_bytes);
        out.insert(out.end(), l.v.begin() + i * hot_bytes, l.v.begin() + (i + 1) * hot_bytes);
      }
    }
    return out;
  }
  // Writes `bytes` (a block's moving form) into the host copy of block i.
  void set(bool warm, int32_t i, const uint8_t* p) {
    for (Layer& l : layers) {
      if (warm) {
        std::memcpy(l.wk.data() + i * warm_k, p, static_cast<size_t>(warm_k));
        p += warm_k;
        std::memcpy(l.wv.data() + i * warm_v, p, static_cast<size_t>(warm_v));
        p += warm_v;
      } else {
        std::memcpy(l.k.data() + i * hot_bytes, p, static_cast<size_t>(hot_bytes));
        p += hot_bytes;
        std::memcpy(l.v.data() + i * hot_bytes, p, static_cast<size_t>(hot_bytes));
        p += hot_bytes;
      }
    }
  }
  // Every arena of the backend equals the host copy.
  void expect_device_equals_host(Backend& be) const {
    for (size_t l = 0; l < layers.size(); ++l) {
      SCOPED_TRACE(::testing::Message() << "layer " << l);
      const Layer& h = layers[l];
      EXPECT_TRUE(download(be, views[l].k, h.k.size()) == h.k) << "hot K";
      EXPECT_TRUE(download(be, views[l].v, h.v.size()) == h.v) << "hot V";
      if (!h.wk.empty()) {
        EXPECT_TRUE(download(be, views[l].warm_k, h.wk.size()) == h.wk) << "warm K";
        EXPECT_TRUE(download(be, views[l].warm_v, h.wv.size()) == h.wv) << "warm V";
      }
    }
  }
};

struct Format {
  KvDtype dtype;
  WarmFormat warm;
};

class KvTransfer : public ::testing::TestWithParam<bool> {  // param: pinned host memory
 protected:
  void SetUp() override {
    try {
      (void)resolve_device(kDevice);
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
    be_ = make_backend(BackendOptions{kDevice, 2});
  }
  Backend& be() { return *be_; }
  bool pinned() const { return GetParam(); }
  std::unique_ptr<Backend> be_;
};

// Blocks to host and back into other ids, hot and warm mixed, destinations partly contiguous (one
// copy for a run) and partly scattered.
TEST_P(KvTransfer, BlocksToHostAndBackInOtherIds) {
  std::mt19937 rng(7);
  for (const Format f : {Format{KvDtype::kF16, WarmFormat::kInt8}, Format{KvDtype::kBF16, WarmFormat::kInt4},
                         Format{KvDtype::kF32, WarmFormat::kFp8}}) {
    SCOPED_TRACE(::testing::Message() << kv_dtype_name(f.dtype) << " + " << warm_format_name(f.warm));
    Arenas a(be(), 3, f.dtype, f.warm, 12, 5, rng);
    const std::vector<std::pair<bool, int32_t>> out = {{false, 5}, {false, 2}, {true, 3}, {false, 11}, {true, 0}, {false, 7}};
    // Host layout: the first three back to back in one buffer, the others each in their own.
    std::vector<size_t> at;
    size_t total = 0;
    for (int i = 0; i < 3; ++i) {
      at.push_back(total);
      total += a.block_bytes(out[static_cast<size_t>(i)].first);
    }
    HostBytes run(total, pinned());
    std::vector<std::unique_ptr<HostBytes>> own;
    std::vector<KvBlockTransfer> down;
    for (size_t i = 0; i < out.size(); ++i) {
      uint8_t* mem = nullptr;
      if (i < 3) {
        mem = run.data() + at[i];
      } else {
        own.push_back(std::make_unique<HostBytes>(a.block_bytes(out[i].first), pinned()));
        mem = own.back()->data();
      }
      down.push_back({out[i].first, out[i].second, mem});
    }
    const uint64_t t = be().kv_blocks_to_host(a.views, down);
    be().transfer_wait(t);
    for (size_t i = 0; i < out.size(); ++i) {
      const std::vector<uint8_t> got(down[i].mem, down[i].mem + a.block_bytes(out[i].first));
      EXPECT_TRUE(got == a.expected(out[i].first, out[i].second)) << "block " << i << " on the host";
    }

    // Back into other ids of the same tier; the host copy follows.
    const std::vector<int32_t> into = {0, 9, 4, 3, 1, 10};
    std::vector<KvBlockTransfer> up;
    for (size_t i = 0; i < out.size(); ++i) {
      up.push_back({out[i].first, into[i], down[i].mem});
      a.set(out[i].first, into[i], down[i].mem);
    }
    const uint64_t t2 = be().kv_blocks_to_device(a.views, up);
    be().transfer_fence(t2);
    a.expect_device_equals_host(be());
    be().transfer_wait(t2);
  }
}

// Ops issued after a transfer to the host may overwrite its blocks at once: the host gets the
// content from before. Ops issued before a transfer to the device are done with the old content.
TEST_P(KvTransfer, OrderedAgainstTheOps) {
  std::mt19937 rng(8);
  Arenas a(be(), 2, KvDtype::kF16, WarmFormat::kNone, 8, 0, rng);
  const size_t n = a.block_bytes(false);
  HostBytes host(2 * n, pinned());
  const std::vector<uint8_t> before = a.expected(false, 3);
  const KvBlockTransfer down[] = {{false, 3, host.data()}};
  const uint64_t t = be().kv_blocks_to_host(a.views, down);
  // Overwrite block 3 with block 6, by an op, right away.
  for (const KvLayerView& v : a.views) be().kv_copy_block(v, 6, 3);
  be().transfer_wait(t);
  EXPECT_TRUE(host.bytes(0, n) == before);
  // Copy block 3 (now 6's bytes) to block 1 by an op, then fetch other bytes into block 3.
  for (const KvLayerView& v : a.views) be().kv_copy_block(v, 3, 1);
  const std::vector<uint8_t> fresh = random_bytes(n, rng);
  std::memcpy(host.data() + n, fresh.data(), n);
  const KvBlockTransfer up[] = {{false, 3, host.data() + n}};
  const uint64_t t2 = be().kv_blocks_to_device(a.views, up);
  be().transfer_fence(t2);
  a.set(false, 3, a.expected(false, 6).data());
  a.set(false, 1, a.expected(false, 6).data());
  a.set(false, 3, fresh.data());
  a.expect_device_equals_host(be());
}

// Sources in the backend's own memory (a read-ahead area, filled by copy_to_device_async).
TEST_P(KvTransfer, FromBackendMemoryAfterAnAsyncCopy) {
  std::mt19937 rng(9);
  Arenas a(be(), 2, KvDtype::kBF16, WarmFormat::kInt8, 6, 4, rng);
  const size_t hot = a.block_bytes(false), warm = a.block_bytes(true);
  HostBytes host(hot + warm, pinned());
  const std::vector<uint8_t> src = random_bytes(hot + warm, rng);
  std::memcpy(host.data(), src.data(), src.size());
  auto area = be().allocate(hot + warm, MemoryUse::kActivations);
  const TransferPiece pieces[] = {{area->data(), host.data(), hot}, {area->data() + hot, host.data() + hot, warm}};
  (void)be().copy_to_device_async(pieces);
  const KvBlockTransfer up[] = {{false, 4, area->data()}, {true, 2, area->data() + hot}};
  const uint64_t t = be().kv_blocks_to_device(a.views, up);
  be().transfer_fence(t);
  a.set(false, 4, src.data());
  a.set(true, 2, src.data() + hot);
  a.expect_device_equals_host(be());
}

// More blocks than the staging buffer holds (the CUDA test shrinks it): chunks, in order.
TEST_P(KvTransfer, ManyBlocksInChunks) {
  std::mt19937 rng(10);
  Arenas a(be(), 4, KvDtype::kF16, WarmFormat::kInt4, 64, 16, rng);
  std::vector<std::pair<bool, int32_t>> out;
  for (int32_t b = 0; b < 64; b += 2) out.push_back({false, b});
  for (int32_t s = 1; s < 16; s += 3) out.push_back({true, s});
  std::shuffle(out.begin(), out.end(), rng);
  size_t total = 0;
  std::vector<size_t> at;
  for (const auto& [w, i] : out) {
    at.push_back(total);
    total += a.block_bytes(w);
  }
  HostBytes host(total, pinned());
  std::vector<KvBlockTransfer> down, up;
  for (size_t i = 0; i < out.size(); ++i) down.push_back({out[i].first, out[i].second, host.data() + at[i]});
  be().transfer_wait(be().kv_blocks_to_host(a.views, down));
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_TRUE(host.bytes(at[i], a.block_bytes(out[i].first)) == a.expected(out[i].first, out[i].second)) << i;
  }
  // Back shifted by one id (hot b -> b + 1, warm s -> s - 1): every source is read before any
  // destination is written, since the data comes from the host copy.
  for (size_t i = 0; i < out.size(); ++i) {
    const int32_t to = out[i].first ? out[i].second - 1 : out[i].second + 1;
    up.push_back({out[i].first, to, host.data() + at[i]});
  }
  for (size_t i = 0; i < out.size(); ++i) a.set(up[i].warm, up[i].index, up[i].mem);
  be().transfer_fence(be().kv_blocks_to_device(a.views, up));
  a.expect_device_equals_host(be());
  const TransferStats st = be().transfer_stats();
  if (kDevice == DeviceKind::kCpu) {
    EXPECT_EQ(st.bytes_to_host, 0u);  // memcpy: nothing crosses a bus
  } else {
    EXPECT_EQ(st.bytes_to_host, total);
    EXPECT_EQ(st.bytes_to_device, total);
    EXPECT_GT(be().measure_transfer_bandwidth_gbs(true, 8 << 20, 2), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(KV_TRANSFER_DEVICE, KvTransfer, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return std::string(p.param ? "pinned" : "pageable"); });

// --- KvStorage with a cold store in host memory ---------------------------------------------------

// A cold store whose slots are host memory (slot_memory); write() and read() must not be used for
// them. Reads of slots without memory (none here) would fail the test.
class HostSlotStore : public ColdStore {
 public:
  HostSlotStore(int64_t slots, uint64_t slot_bytes, bool pinned) : n_(slots), slot_bytes_(slot_bytes), mem_(slots * slot_bytes, pinned) {}
  int64_t num_slots() const override { return n_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override { return "host slots (test)"; }
  void write(int64_t, std::vector<uint8_t>) override { ++store_calls; }
  uint64_t read(int64_t, uint64_t) override {
    ++store_calls;
    return 1;
  }
  std::vector<uint8_t> wait(uint64_t) override { return {}; }
  void drain() override {}
  uint8_t* slot_memory(int64_t slot) override { return mem_.data() + static_cast<uint64_t>(slot) * slot_bytes_; }
  int store_calls = 0;

 private:
  int64_t n_;
  uint64_t slot_bytes_;
  HostBytes mem_;
};

class KvStorageHostSlots : public KvTransfer {};

// The storage config of these tests: geo's blocks, `blocks` of them, an int8 warm tier of half the
// memory when `warm`.
KvConfig host_slots_config(const KvGeometry& geo, int32_t blocks, bool warm) {
  KvConfig cfg;
  cfg.block_size = geo.block_size;
  cfg.dtype = geo.dtype;
  cfg.num_blocks = blocks;
  if (warm) {
    cfg.warm_format = WarmFormat::kInt8;
    cfg.warm_fraction = 0.5;
  }
  return cfg;
}

KvOp spill(KvSlot src, int32_t cold) { return KvOp{KvOp::Kind::kSpill, src, {KvTier::kCold, cold}, {}, {}, {}}; }
KvOp fetch(int32_t cold, KvSlot dst) { return KvOp{KvOp::Kind::kFetch, {KvTier::kCold, cold}, dst, {}, {}, {}}; }
KvOp copy(BlockId src, BlockId dst) { return KvOp{KvOp::Kind::kCopy, {KvTier::kHot, src}, {KvTier::kHot, dst}, {}, {}, {}}; }

// Fills every arena of a storage with random bytes (through the backend).
void randomize(Backend& be, KvStorage& s, std::mt19937& rng) {
  const KvCapacity& c = s.capacity();
  for (const KvLayerView& v : s.views()) {
    for (uint8_t* p : {v.k, v.v}) {
      const auto b = random_bytes(static_cast<size_t>(v.block_stride_bytes() * c.hot_blocks), rng);
      be.copy_to_device(p, b.data(), b.size());
    }
    if (c.warm_slots == 0) continue;
    const auto wk = random_bytes(static_cast<size_t>(v.warm_k_slot_bytes * c.warm_slots), rng);
    const auto wv = random_bytes(static_cast<size_t>(v.warm_v_slot_bytes * c.warm_slots), rng);
    be.copy_to_device(v.warm_k, wk.data(), wk.size());
    be.copy_to_device(v.warm_v, wv.data(), wv.size());
  }
}

// The bytes of hot block b / warm slot w of a storage (through the backend).
std::vector<uint8_t> storage_block(Backend& be, KvStorage& s, bool warm, int32_t i) {
  std::vector<uint8_t> out;
  for (const KvLayerView& v : s.views()) {
    const int64_t kb = warm ? v.warm_k_slot_bytes : v.block_stride_bytes();
    const int64_t vb = warm ? v.warm_v_slot_bytes : v.block_stride_bytes();
    const auto k = download(be, (warm ? v.warm_k : v.k) + i * kb, static_cast<size_t>(kb));
    const auto vv = download(be, (warm ? v.warm_v : v.v) + i * vb, static_cast<size_t>(vb));
    out.insert(out.end(), k.begin(), k.end());
    out.insert(out.end(), vv.begin(), vv.end());
  }
  return out;
}

// Spill hot blocks and a warm slot, overwrite the arenas, fetch them back (some into other ids,
// some read ahead): the bytes come back, the slots hold them as they move (payload from byte 0),
// and the store's write()/read() are never called.
TEST_P(KvStorageHostSlots, SpillOverwriteFetch) {
  const KvGeometry geo{3, 2, 32, 16, KvDtype::kF16};  // layers, kv heads, head_dim, block_size
  KvConfig cfg = host_slots_config(geo, 32, true);
  HostSlotStore* store = nullptr;
  const bool pin = pinned();
  cfg.cold_store_factory = [&store, pin](uint64_t slot_bytes) {
    auto s = std::make_unique<HostSlotStore>(8, slot_bytes, pin);
    store = s.get();
    return s;
  };
  KvStorage s(geo, cfg, nullptr, &be());
  s.use_host_transfers();  // the CPU backend's memcpy transfers; a device backend's anyway
  ASSERT_NE(store, nullptr);
  ASSERT_GE(s.capacity().hot_blocks, 8);
  ASSERT_GE(s.capacity().warm_slots, 4);
  std::mt19937 rng(11);
  randomize(be(), s, rng);
  const auto hot1 = storage_block(be(), s, false, 1), hot4 = storage_block(be(), s, false, 4);
  const auto hot6 = storage_block(be(), s, false, 6), warm2 = storage_block(be(), s, true, 2);

  const std::vector<KvOp> spills = {spill({KvTier::kHot, 1}, 0), spill({KvTier::kHot, 4}, 5), spill({KvTier::kWarm, 2}, 3),
                                   spill({KvTier::kHot, 6}, 6)};
  for (KvOpStatus st : s.execute(spills)) EXPECT_EQ(st, KvOpStatus::kOk);
  // Overwrite by an op at once: block 4 := block 6, block 1 := block 6 (the spills read first).
  for (const KvLayerView& v : s.views()) {
    be().kv_copy_block(v, 6, 4);
    be().kv_copy_block(v, 6, 1);
  }
  s.drain_io();
  const uint64_t hot_n = s.capacity().hot_block_bytes, warm_n = s.capacity().warm_slot_bytes;
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(0), store->slot_memory(0) + hot_n) == hot1);
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(5), store->slot_memory(5) + hot_n) == hot4);
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(3), store->slot_memory(3) + warm_n) == warm2);
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(6), store->slot_memory(6) + hot_n) == hot6);

  // Read two of them ahead (a device backend copies them into its area now), then fetch all.
  const std::pair<int32_t, KvTier> ahead[] = {{5, KvTier::kHot}, {3, KvTier::kWarm}};
  s.prefetch(ahead);
  const std::vector<KvOp> fetches = {fetch(0, {KvTier::kHot, 2}), fetch(5, {KvTier::kHot, 1}), fetch(3, {KvTier::kWarm, 0}),
                                    fetch(6, {KvTier::kHot, 4})};
  for (KvOpStatus st : s.execute(fetches)) EXPECT_EQ(st, KvOpStatus::kOk);
  EXPECT_TRUE(storage_block(be(), s, false, 2) == hot1);
  EXPECT_TRUE(storage_block(be(), s, false, 1) == hot4);
  EXPECT_TRUE(storage_block(be(), s, true, 0) == warm2);
  EXPECT_TRUE(storage_block(be(), s, false, 4) == hot6);
  EXPECT_EQ(s.prefetch_hits(), kDevice == DeviceKind::kCpu ? 0 : 2);  // the host reads no slot ahead
  EXPECT_EQ(store->store_calls, 0);
  EXPECT_EQ(s.bytes_to_host(), kDevice == DeviceKind::kCpu ? 0u : 3 * hot_n + warm_n);
  EXPECT_EQ(s.bytes_to_device(), kDevice == DeviceKind::kCpu ? 0u : 3 * hot_n + warm_n);
}

// In one list: spill a block, then fetch other bytes into it, then spill it again to another slot
// (the second spill must see the fetched bytes: the batch is issued in between).
TEST_P(KvStorageHostSlots, DependentOpsInOneList) {
  const KvGeometry geo{2, 2, 32, 16, KvDtype::kBF16};
  KvConfig cfg = host_slots_config(geo, 4, false);
  HostSlotStore* store = nullptr;
  const bool pin = pinned();
  cfg.cold_store_factory = [&store, pin](uint64_t slot_bytes) {
    auto s = std::make_unique<HostSlotStore>(4, slot_bytes, pin);
    store = s.get();
    return s;
  };
  KvStorage s(geo, cfg, nullptr, &be());
  s.use_host_transfers();  // the CPU backend's memcpy transfers; a device backend's anyway
  std::mt19937 rng(12);
  randomize(be(), s, rng);
  const uint64_t n = s.capacity().hot_block_bytes;
  const auto b0 = storage_block(be(), s, false, 0), b1 = storage_block(be(), s, false, 1);
  const std::vector<KvOp> first = {spill({KvTier::kHot, 1}, 2)};
  ASSERT_EQ(s.execute(first)[0], KvOpStatus::kOk);
  const std::vector<KvOp> list = {spill({KvTier::kHot, 0}, 0), fetch(2, {KvTier::kHot, 0}), spill({KvTier::kHot, 0}, 1),
                                 copy(0, 3)};
  for (KvOpStatus st : s.execute(list)) EXPECT_EQ(st, KvOpStatus::kOk);
  s.drain_io();
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(0), store->slot_memory(0) + n) == b0);
  EXPECT_TRUE(std::vector<uint8_t>(store->slot_memory(1), store->slot_memory(1) + n) == b1);
  EXPECT_TRUE(storage_block(be(), s, false, 0) == b1);
  EXPECT_TRUE(storage_block(be(), s, false, 3) == b1);
  EXPECT_EQ(store->store_calls, 0);
}

// The file part below host slots, in memory: KvStorage writes its framed blocks and reads them
// through write()/read() as it would a file's.
using test::MemoryColdStore;

KvOp migrate(int32_t host, int32_t file, KvTier content) {
  KvOp o{KvOp::Kind::kMigrate, {KvTier::kCold, host}, {KvTier::kCold, file}, {}, {}, {}};
  o.content = content;
  return o;
}

// Host slots above a file part: a block in a host slot (its payload alone, written by the
// backend's transfers) moves to a file slot — in the same list as the spill that wrote it (the
// batch is issued and waited for first) and as the spill that overwrites its host slot next — and
// comes back from the file exactly; the file slot holds the payload after an 8-byte frame header.
TEST_P(KvStorageHostSlots, MigrateToTheFileThenFetch) {
  const KvGeometry geo{3, 2, 32, 16, KvDtype::kF16};
  KvConfig cfg = host_slots_config(geo, 16, true);
  HostSlotStore* host = nullptr;
  MemoryColdStore* file = nullptr;
  const bool pin = pinned();
  cfg.cold_store_factory = [&host, &file, pin](uint64_t slot_bytes) {
    auto h = std::make_unique<HostSlotStore>(2, slot_bytes, pin);
    auto f = std::make_unique<MemoryColdStore>(4, slot_bytes);
    host = h.get();
    file = f.get();
    return std::make_unique<TieredColdStore>(std::move(h), std::move(f));
  };
  KvStorage s(geo, cfg, nullptr, &be());
  s.use_host_transfers();  // the CPU backend's memcpy transfers; a device backend's anyway
  ASSERT_NE(host, nullptr);
  ASSERT_EQ(s.capacity().cold_host_slots, 2);
  ASSERT_GE(s.capacity().warm_slots, 2);
  std::mt19937 rng(13);
  randomize(be(), s, rng);
  const uint64_t hot_n = s.capacity().hot_block_bytes;
  const auto hot1 = storage_block(be(), s, false, 1), hot3 = storage_block(be(), s, false, 3);
  const auto warm1 = storage_block(be(), s, true, 1);
  const std::vector<KvOp> first = {spill({KvTier::kHot, 1}, 0), migrate(0, 3, KvTier::kHot), spill({KvTier::kHot, 3}, 0),
                                  spill({KvTier::kWarm, 1}, 1)};
  for (KvOpStatus st : s.execute(first)) EXPECT_EQ(st, KvOpStatus::kOk);
  const std::vector<KvOp> second = {migrate(1, 4, KvTier::kWarm), spill({KvTier::kHot, 1}, 1)};
  for (KvOpStatus st : s.execute(second)) EXPECT_EQ(st, KvOpStatus::kOk);
  s.drain_io();
  ASSERT_TRUE(file->slots_.count(1) && file->slots_.count(2));  // cold slots 3 and 4
  EXPECT_TRUE(std::vector<uint8_t>(file->slots_[1].begin() + 8, file->slots_[1].end()) == hot1);
  EXPECT_TRUE(std::vector<uint8_t>(file->slots_[2].begin() + 8, file->slots_[2].end()) == warm1);
  EXPECT_TRUE(std::vector<uint8_t>(host->slot_memory(0), host->slot_memory(0) + hot_n) == hot3);
  EXPECT_TRUE(std::vector<uint8_t>(host->slot_memory(1), host->slot_memory(1) + hot_n) == hot1);
  // Overwrite the arenas, then fetch everything back into other ids.
  randomize(be(), s, rng);
  const std::vector<KvOp> back = {fetch(3, {KvTier::kHot, 5}), fetch(4, {KvTier::kWarm, 0}), fetch(0, {KvTier::kHot, 6}),
                                 fetch(1, {KvTier::kHot, 7})};
  for (KvOpStatus st : s.execute(back)) EXPECT_EQ(st, KvOpStatus::kOk);
  EXPECT_TRUE(storage_block(be(), s, false, 5) == hot1);
  EXPECT_TRUE(storage_block(be(), s, true, 0) == warm1);
  EXPECT_TRUE(storage_block(be(), s, false, 6) == hot3);
  EXPECT_TRUE(storage_block(be(), s, false, 7) == hot1);
  EXPECT_EQ(host->store_calls, 0) << "host slots move through the transfers only";
}

INSTANTIATE_TEST_SUITE_P(KV_TRANSFER_DEVICE, KvStorageHostSlots, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return std::string(p.param ? "pinned" : "pageable"); });

}  // namespace
}  // namespace strata
