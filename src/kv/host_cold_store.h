// A ColdStore whose slots are in one buffer of host memory (--kv-host-memory): on a GPU backend
// page-locked memory of the backend (MemoryUse::kPinnedHost, through a HostAllocator), which the
// device copies to and from at full PCIe speed and which slot_memory() exposes to KvStorage's
// device path; without an allocator, anonymous memory. write() and read() are memcpy, done at
// once on the calling thread: a read copies the slot when it is queued, so it sees every write
// queued before it and none queued after (the submission order of ColdStore), and wait() only
// hands the bytes over. Nothing can fail but a wait() for an unknown ticket (a broken invariant).
// KvStorage frames the bytes (checksum per slot) as for any store, so corrupted memory is
// detected when a block is fetched.
// Thread-safety: engine thread only (see ColdStore); no thread of its own.
#pragma once

#include <map>

#include "kv/cold_store.h"

namespace strata {

class HostColdStore : public ColdStore {
 public:
  // total_bytes / slot_bytes slots. Throws strata::Error naming --kv-host-memory when that is 0
  // slots, or when the memory cannot be had.
  HostColdStore(uint64_t total_bytes, uint64_t slot_bytes, const HostAllocator& alloc = {});

  int64_t num_slots() const override { return num_slots_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override;  // "host memory (pinned, 4.00 GiB, 1024 slots of 4.00 MiB)"

  void write(int64_t slot, std::vector<uint8_t> bytes) override;
  uint64_t read(int64_t slot, uint64_t n) override;
  std::vector<uint8_t> wait(uint64_t ticket) override;
  void drain() override {}
  uint8_t* slot_memory(int64_t slot) override;

 private:
  uint64_t slot_bytes_;
  int64_t num_slots_;
  bool pinned_;  // memory from the allocator (the backend's), for describe()
  HostMemory memory_;
  std::map<uint64_t, std::vector<uint8_t>> reads_;  // by ticket, until waited for
  uint64_t next_ticket_ = 1;
};

}  // namespace strata
