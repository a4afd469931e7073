// kv_view_digest: every field of a KvLayerView counts (a recorded pass replayed for a view that
// differs in any field would run with stale kernel arguments — the --kv-offload replay bug was a
// key that left out the host-slot fields), equal views give equal digests, and the seed chains.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <vector>

#include "kv/kv_types.h"
#include "kv/kv_view_digest.h"
#include "kv/warm_format.h"

namespace strata {
namespace {

KvLayerView sample_view() {
  static uint8_t arena[4096], warm[4096], host[4096];
  KvLayerView v;
  v.k = arena;
  v.v = arena + 2048;
  v.dtype = KvDtype::kF16;
  v.block_size = 16;
  v.n_kv_heads = 4;
  v.head_dim = 64;
  v.n_hot_blocks = 10;
  v.warm_format = WarmFormat::kInt8;
  v.warm_span = 2;
  v.warm_k = warm;
  v.warm_v = warm + 2048;
  v.warm_k_slot_bytes = 4160;
  v.warm_v_slot_bytes = 4160;
  v.host_base = 30;
  v.host = host;
  v.host_slot_bytes = 65792;
  v.host_k_offset = 0;
  v.host_v_offset = 2048;
  return v;
}

TEST(KvViewDigest, EveryFieldChangesTheDigest) {
  const KvLayerView base = sample_view();
  const uint64_t d0 = kv_view_digest(base, 0);
  EXPECT_EQ(kv_view_digest(sample_view(), 0), d0) << "equal views, equal digests";
  // One change per field (18 fields: KvLayerView's size is pinned in kv_view_digest.cpp).
  const std::vector<std::pair<const char*, std::function<void(KvLayerView&)>>> changes = {
      {"k", [](KvLayerView& v) { v.k += 64; }},
      {"v", [](KvLayerView& v) { v.v += 64; }},
      {"dtype", [](KvLayerView& v) { v.dtype = KvDtype::kBF16; }},
      {"block_size", [](KvLayerView& v) { v.block_size = 32; }},
      {"n_kv_heads", [](KvLayerView& v) { v.n_kv_heads = 8; }},
      {"head_dim", [](KvLayerView& v) { v.head_dim = 128; }},
      {"n_hot_blocks", [](KvLayerView& v) { v.n_hot_blocks = 11; }},
      {"warm_format", [](KvLayerView& v) { v.warm_format = WarmFormat::kFp8; }},
      {"warm_span", [](KvLayerView& v) { v.warm_span = 4; }},
      {"warm_k", [](KvLayerView& v) { v.warm_k += 64; }},
      {"warm_v", [](KvLayerView& v) { v.warm_v += 64; }},
      {"warm_k_slot_bytes", [](KvLayerView& v) { v.warm_k_slot_bytes += 1; }},
      {"warm_v_slot_bytes", [](KvLayerView& v) { v.warm_v_slot_bytes += 1; }},
      {"host_base", [](KvLayerView& v) { v.host_base = INT32_MAX; }},
      {"host", [](KvLayerView& v) { v.host = nullptr; }},
      {"host_slot_bytes", [](KvLayerView& v) { v.host_slot_bytes += 256; }},
      {"host_k_offset", [](KvLayerView& v) { v.host_k_offset += 16; }},
      {"host_v_offset", [](KvLayerView& v) { v.host_v_offset += 16; }},
  };
  std::set<uint64_t> seen = {d0};
  for (const auto& [name, change] : changes) {
    KvLayerView v = base;
    change(v);
    const uint64_t d = kv_view_digest(v, 0);
    EXPECT_NE(d, d0) << name;
    EXPECT_TRUE(seen.insert(d).second) << name << ": the digest of another change";
  }
}

TEST(KvViewDigest, TheSeedChainsViews) {
  const KvLayerView a = sample_view();
  KvLayerView b = a;
  b.host_k_offset = 4096;
  EXPECT_NE(kv_view_digest(a, 1), kv_view_digest(a, 2));
  // Layer order counts: (a, b) and (b, a) are different passes.
  EXPECT_NE(kv_view_digest(b, kv_view_digest(a, 0)), kv_view_digest(a, kv_view_digest(b, 0)));
}

}  // namespace
}  // namespace strata
