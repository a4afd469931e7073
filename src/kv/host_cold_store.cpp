#include "kv/host_cold_store.h"

#include <cstring>

#include "core/anon_memory.h"
#include "core/check.h"
#include "core/error.h"
#include "core/units.h"

namespace strata {

HostColdStore::HostColdStore(uint64_t total_bytes, uint64_t slot_bytes, const HostAllocator& alloc)
    : slot_bytes_(slot_bytes), num_slots_(static_cast<int64_t>(slot_bytes ? total_bytes / slot_bytes : 0)), pinned_(alloc != nullptr) {
  STRATA_CHECK(slot_bytes > 0);
  if (num_slots_ == 0) {
    fail("--kv-host-memory {} is smaller than one KV block ({})", format_bytes(total_bytes), format_bytes(slot_bytes));
  }
  const uint64_t bytes = static_cast<uint64_t>(num_slots_) * slot_bytes_;
  if (alloc) {
    memory_ = alloc(bytes);
    STRATA_CHECK(memory_.data != nullptr, "the host allocator returned no memory");
  } else {
    auto anon = std::make_shared<AnonymousMemory>(bytes);
    memory_.data = anon->data();
    memory_.owner = std::move(anon);
  }
}

std::string HostColdStore::describe() const {
  return fmt::format("host memory ({}{}, {} slots of {})", pinned_ ? "pinned, " : "",
                     format_bytes(static_cast<uint64_t>(num_slots_) * slot_bytes_), num_slots_, format_bytes(slot_bytes_));
}

uint8_t* HostColdStore::slot_memory(int64_t slot) {
  STRATA_CHECK(slot >= 0 && slot < num_slots_, "host cold slot {} out of range [0, {})", slot, num_slots_);
  return memory_.data + static_cast<uint64_t>(slot) * slot_bytes_;
}

void HostColdStore::write(int64_t slot, std::vector<uint8_t> bytes) {
  STRATA_CHECK(bytes.size() <= slot_bytes_, "{} bytes for a host cold slot of {}", bytes.size(), slot_bytes_);
  if (!bytes.empty()) std::memcpy(slot_memory(slot), bytes.data(), bytes.size());
}

uint64_t HostColdStore::read(int64_t slot, uint64_t n) {
  STRATA_CHECK(n <= slot_bytes_, "read of {} bytes from a host cold slot of {}", n, slot_bytes_);
  const uint8_t* p = slot_memory(slot);
  const uint64_t ticket = next_ticket_++;
  reads_.emplace(ticket, std::vector<uint8_t>(p, p + n));
  return ticket;
}

std::vector<uint8_t> HostColdStore::wait(uint64_t ticket) {
  auto it = reads_.find(ticket);
  STRATA_CHECK(it != reads_.end(), "wait for unknown host cold-store ticket {}", ticket);
  std::vector<uint8_t> bytes = std::move(it->second);
  reads_.erase(it);
  return bytes;
}

}  // namespace strata
