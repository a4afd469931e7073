#include "kv/cold_store.h"

#include "core/check.h"
#include "kv/file_cold_store.h"
#include "kv/host_cold_store.h"
#include "kv/kv_config.h"
#include "kv/tiered_cold_store.h"

namespace strata {

std::unique_ptr<ColdStore> make_cold_store(const KvConfig& cfg, uint64_t slot_bytes, const HostAllocator& host_alloc) {
  if (cfg.cold_store_factory) {
    std::unique_ptr<ColdStore> store = cfg.cold_store_factory(slot_bytes);
    STRATA_CHECK(store != nullptr, "the cold store factory returned no store");
    return store;
  }
  std::unique_ptr<ColdStore> host, file;
  if (cfg.host_bytes > 0) host = std::make_unique<HostColdStore>(cfg.host_bytes, slot_bytes, host_alloc);
  if (!cfg.spill_dir.empty()) file = std::make_unique<FileColdStore>(cfg.spill_dir, cfg.spill_bytes, slot_bytes);
  if (host && file) return std::make_unique<TieredColdStore>(std::move(host), std::move(file));
  return host ? std::move(host) : std::move(file);
}

int64_t count_host_slots(ColdStore& store) {
  // Host slots are a prefix: the first slot without host memory, by bisection.
  int64_t lo = 0, hi = store.num_slots();
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (store.slot_memory(mid) != nullptr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace strata
