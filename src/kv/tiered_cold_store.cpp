#include "kv/tiered_cold_store.h"

#include <fmt/format.h>

#include "core/check.h"

namespace strata {

// Tickets carry their store in the low bit: (ticket << 1) | lower.
TieredColdStore::TieredColdStore(std::unique_ptr<ColdStore> upper, std::unique_ptr<ColdStore> lower)
    : upper_(std::move(upper)), lower_(std::move(lower)) {
  STRATA_CHECK(upper_ && lower_ && upper_->slot_bytes() == lower_->slot_bytes(), "tiered cold store: slot sizes differ");
  n_upper_ = upper_->num_slots();
}

std::string TieredColdStore::describe() const { return fmt::format("{}, then {}", upper_->describe(), lower_->describe()); }

void TieredColdStore::write(int64_t slot, std::vector<uint8_t> bytes) {
  STRATA_CHECK(slot >= 0 && slot < num_slots(), "cold slot {} out of range", slot);
  if (slot < n_upper_) upper_->write(slot, std::move(bytes));
  else lower_->write(slot - n_upper_, std::move(bytes));
}

uint64_t TieredColdStore::read(int64_t slot, uint64_t n) {
  STRATA_CHECK(slot >= 0 && slot < num_slots(), "cold slot {} out of range", slot);
  if (slot < n_upper_) return upper_->read(slot, n) << 1;
  return (lower_->read(slot - n_upper_, n) << 1) | 1;
}

std::vector<uint8_t> TieredColdStore::wait(uint64_t ticket) {
  return (ticket & 1) ? lower_->wait(ticket >> 1) : upper_->wait(ticket >> 1);
}

void TieredColdStore::drain() {
  upper_->drain();
  lower_->drain();
}

uint8_t* TieredColdStore::slot_memory(int64_t slot) {
  STRATA_CHECK(slot >= 0 && slot < num_slots(), "cold slot {} out of range", slot);
  return slot < n_upper_ ? upper_->slot_memory(slot) : lower_->slot_memory(slot - n_upper_);
}

}  // namespace strata
