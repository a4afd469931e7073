// The cold tier: fixed-size slots below the RAM pools: host memory (HostColdStore, pinned on a
// GPU: --kv-host-memory), a file on disk (FileColdStore: --kv-spill-dir), or both, the host slots
// first (TieredColdStore). The KV manager decides what goes there; the store only moves bytes,
// asynchronously or not, in submission order.
// Thread-safety: all methods are called by the engine thread; implementations do their I/O on
// their own background thread(s) and must keep submission order per slot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata {

struct KvConfig;

class ColdStore {
 public:
  virtual ~ColdStore() = default;

  virtual int64_t num_slots() const = 0;
  virtual uint64_t slot_bytes() const = 0;
  virtual std::string describe() const = 0;  // for logs: "file /tmp/x (4.00 GiB, 1024 slots)"

  // Queues a write of `bytes` (at most slot_bytes) to `slot`; takes ownership of the buffer so
  // the caller can go on at once.
  virtual void write(int64_t slot, std::vector<uint8_t> bytes) = 0;

  // Queues a read of `n` bytes of `slot` and returns a ticket. Reads after a write to the same
  // slot see that write.
  virtual uint64_t read(int64_t slot, uint64_t n) = 0;

  // Waits for a read and returns its bytes. Throws strata::Error (naming the slot) when that read
  // failed, or when the last write to its slot failed; errors belong to one read: the store keeps
  // serving the others. KvStorage reports a failed read as a failed op (the sequence is recomputed).
  virtual std::vector<uint8_t> wait(uint64_t ticket) = 0;

  // Waits until every queued operation is done (for tests and shutdown).
  virtual void drain() = 0;

  // (-Wextra: the default ignores its argument; the declaration below is shared with h12b verbatim.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
  // Host memory of `slot` when this store keeps its slots in host memory that a device can copy
  // to and from directly (pinned), else nullptr. KvStorage's device path then copies a block
  // between the device and this memory itself, without write()/read().
  virtual uint8_t* slot_memory(int64_t slot) { return nullptr; }
#pragma GCC diagnostic pop
};

// Host memory for a store's slots: the bytes and whatever keeps them alive (a backend's
// DeviceBuffer of MemoryUse::kPinnedHost, say).
struct HostMemory {
  uint8_t* data = nullptr;
  std::shared_ptr<void> owner;
};
using HostAllocator = std::function<HostMemory(uint64_t bytes)>;

// The cold tier a configuration asks for, with slots of at least `slot_bytes`: the test hook's
// store when cfg.cold_store_factory is set; else with cfg.host_bytes a HostColdStore (its memory
// from `host_alloc` when given — pinned memory of the backend — else anonymous memory), and below
// it, with cfg.spill_dir, a FileColdStore: both in one TieredColdStore whose host slots come
// first; else the FileColdStore alone; else none (nullptr). The one place that names a concrete
// store. Throws strata::Error as the stores do.
std::unique_ptr<ColdStore> make_cold_store(const KvConfig& cfg, uint64_t slot_bytes, const HostAllocator& host_alloc = {});

// How many of `store`'s first slots are in host memory (slot_memory() != nullptr): the host tier of
// a TieredColdStore, every slot of a HostColdStore, 0 for a file. Host slots come first.
int64_t count_host_slots(ColdStore& store);

}  // namespace strata
