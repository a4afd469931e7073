#include "kv/cold_store.h"

#include "core/check.h"
#include "kv/file_cold_store.h"
#include "kv/kv_config.h"

namespace strata {

std::unique_ptr<ColdStore> make_cold_store(const KvConfig& cfg, uint64_t slot_bytes) {
  std::unique_ptr<ColdStore> store;
  if (cfg.cold_store_factory) {
    store = cfg.cold_store_factory(slot_bytes);
    STRATA_CHECK(store != nullptr, "the cold store factory returned no store");
  } else if (!cfg.spill_dir.empty()) {
    store = std::make_unique<FileColdStore>(cfg.spill_dir, cfg.spill_bytes, slot_bytes);
  }
  return store;
}

}  // namespace strata
