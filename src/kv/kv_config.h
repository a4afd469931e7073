// User-facing configuration of the KV cache (the --kv-* flags of every subcommand), validated
// once. Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kv/cold_store.h"
#include "kv/evict_policy.h"

#include "kv/kv_arena.h"
#include "kv/kv_types.h"
#include "kv/warm_format.h"

namespace strata {

inline constexpr uint64_t kDefaultKvMemoryBytes = uint64_t{1} << 30;
// Share of the device memory free after the weights (less 2 GiB) that the KV cache takes on a GPU
// when no flag sizes it (engine/engine.cpp).
inline constexpr double kDeviceKvShare = 0.9;

struct KvConfig {
  int32_t block_size = 16;            // tokens per block
  KvDtype dtype = KvDtype::kF16;      // hot-tier element type
  std::optional<uint64_t> memory_bytes;  // pool size in bytes (--kv-memory)
  std::optional<int32_t> num_blocks;     // or in blocks (--kv-blocks); wins over memory_bytes

  bool prefix_cache = true;              // --no-prefix-cache turns it off
  int32_t hot_tokens = 256;              // most recent tokens of each sequence kept hot
  WarmFormat warm_format = WarmFormat::kNone;  // --kv-warm-dtype
  double warm_fraction = 0.75;           // share of the KV memory given to the warm pool when on
  // Re-encodes begin on KvStorage's encoder thread right after the commit that plans them
  // (KvStorage::start_reencodes; host backends); false, or STRATA_KV_REENCODE_AHEAD=0: in execute().
  bool reencode_ahead = true;
  // The cold tier: host memory (--kv-host-memory; pinned on a GPU) and/or a file below it
  // (--kv-spill-dir, --kv-spill-size). With both, host slots are taken first, and the file is a
  // tier below the host part: a block that wants a host slot when none is free makes the least
  // recently written host block that nothing reads move down to a file slot (KvManager, a
  // kMigrate op). host_migrate = false (--kv-no-host-migrate): nothing moves between the parts,
  // the file takes what the full host part cannot (the behaviour before migration).
  uint64_t host_bytes = 0;               // host tier size; 0 = none
  std::string spill_dir;                 // file tier directory; empty = none
  uint64_t spill_bytes = 0;              // file tier size
  bool host_migrate = true;
  // --kv-offload (needs host_bytes): a running sequence that cannot grow in the hot pool keeps its
  // oldest full private blocks in host slots, where attention reads them in place (KvManager::
  // offload), instead of being preempted or waiting: a sequence may be longer than the hot pool.
  bool offload = false;
  // Test hook: when set, the cold tier is the store this returns (given the bytes one slot must
  // hold) instead of the stores above; host_bytes, spill_dir and spill_bytes are then unused.
  // Tests inject stores that fail on demand through it (tests/engine/engine_cold_failure_test.cpp).
  std::function<std::unique_ptr<ColdStore>(uint64_t slot_bytes)> cold_store_factory;

  // The remote tier shared by replicas (kv/remote_pool.h): a Redis URL, empty = none.
  std::string remote_url;                // --kv-remote
  int32_t remote_timeout_ms = 50;        // --kv-remote-timeout-ms: a lookup answered later is a miss
  int64_t remote_ttl_s = 86400;          // --kv-remote-ttl: expiry of published blocks, 0 = none
  enum class RemoteWrite : uint8_t { kAlways, kOnEvict };
  RemoteWrite remote_write = RemoteWrite::kAlways;  // --kv-remote-write: publish at commit, or when evicted from RAM
  int32_t remote_queue_blocks = 1024;    // --kv-remote-queue: publishes waiting beyond this are dropped (counted)

  // Eviction within sequences (--kv-evict, --kv-budget, --kv-sinks, --kv-recent; kv/kv_evictor.h).
  EvictConfig evict;

  // Number of blocks for a model of the given geometry: --kv-blocks, else --kv-memory divided by
  // the bytes of one block, else kDefaultKvMemoryBytes worth. Throws strata::Error when the result
  // is zero (memory smaller than one block).
  int32_t resolve_num_blocks(const KvGeometry& g) const;

  // With a warm tier the memory is split: hot blocks and warm slots of `warm_format`.
  struct PoolSizes {
    int32_t hot_blocks = 0;
    int32_t warm_slots = 0;
  };
  PoolSizes resolve_pools(const KvGeometry& g) const;
};

}  // namespace strata
