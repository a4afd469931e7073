// Two cold stores as one (--kv-host-memory with --kv-spill-dir): slots [0, n_upper) are the upper
// store's (host memory), [n_upper, n_upper + n_lower) the lower one's (the file). The KV manager
// takes the upper slots first (its cold pool prefers low ids: BlockPool's preferred range), so
// the file holds only what the host tier cannot. This store moves nothing between its parts: the
// KV manager does, when the host part is full (a kMigrate op: KvStorage reads the host slot and
// writes the file slot through write()/read() like any other).
// Thread-safety: see ColdStore; each store keeps its own submission order, and a slot belongs to
// exactly one of them.
#pragma once

#include "kv/cold_store.h"

namespace strata {

class TieredColdStore : public ColdStore {
 public:
  // Preconditions: both stores exist and have slots of the same size.
  TieredColdStore(std::unique_ptr<ColdStore> upper, std::unique_ptr<ColdStore> lower);

  int64_t num_slots() const override { return n_upper_ + lower_->num_slots(); }
  uint64_t slot_bytes() const override { return upper_->slot_bytes(); }
  std::string describe() const override;  // "<upper>, then <lower>"

  void write(int64_t slot, std::vector<uint8_t> bytes) override;
  uint64_t read(int64_t slot, uint64_t n) override;
  std::vector<uint8_t> wait(uint64_t ticket) override;  // throws as the store that read does
  void drain() override;
  uint8_t* slot_memory(int64_t slot) override;

  int64_t upper_slots() const { return n_upper_; }

 private:
  std::unique_ptr<ColdStore> upper_, lower_;
  int64_t n_upper_;
};

}  // namespace strata
