// Everything the KV manager accounts, in one struct that is cheap to copy (for /metrics, bench
// reports and tests). Counters are cumulative since start; gauges are current values.
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace strata {

struct KvTierStats {
  int64_t slots = 0;        // capacity in slots (blocks for hot, warm slots, cold slots)
  int64_t used = 0;         // referenced by sequences
  int64_t cached = 0;       // unreferenced but holding prefix-cache content (evictable)
  int64_t free = 0;         // empty
  uint64_t bytes_total = 0;  // capacity in bytes, scales included
  uint64_t bytes_used = 0;   // bytes of used + cached slots
};

// Cold-tier moves that KvStorage does itself, as the engine thread sees them (KvStorage::
// transfer_stats()), for the swap-or-recompute choice (sched/preempt_cost.h): payload bytes spilled
// plus fetched through the store's write/read (file slots; every slot on the host), and the seconds
// execute() spent on those ops (capture and queueing a write, waiting for a read and restoring).
// Host-memory slots on a device backend move through the backend's batched transfers instead,
// whose bytes and copy-stream seconds are KvStorage::device_transfer_stats() (TransferStats).
struct KvTransferStats {
  uint64_t cold_bytes = 0;
  double cold_seconds = 0;
  // Re-encodes into the warm tier (host backends; a device queues kernels and is not timed here):
  // how many ops ran, how many of those ran ahead (KvStorage::start_reencodes, on the storage's
  // encoder thread while the engine thread samples), the seconds execute() — the engine thread,
  // before the forward pass — spent on re-encodes (encoding them itself, or waiting for or helping
  // with the ones started ahead: the critical-path cost), and the seconds the encoder thread spent.
  int64_t reencode_ops = 0;
  int64_t reencode_ops_ahead = 0;
  double reencode_blocking_seconds = 0;
  double reencode_ahead_seconds = 0;
};

struct KvStats {
  KvTierStats hot;
  KvTierStats warm;
  KvTierStats cold;  // the whole cold tier: host + file
  KvTierStats host;  // its slots in host memory (--kv-host-memory), taken first
  KvTierStats file;  // its slots in the spill file (--kv-spill-dir)
  KvTransferStats transfer;  // KvManager leaves it empty: the engine copies KvStorage's in
  int32_t block_size = 0;
  int64_t tokens_stored = 0;         // tokens held by all sequences' tables
  int64_t fragmented_slots = 0;      // unused token slots in partially filled last blocks
  int64_t sequences = 0;
  int64_t swapped_sequences = 0;
  // Prefix cache (tokens).
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  // Data movement.
  int64_t cow_copies = 0;
  int64_t reencoded_blocks = 0;
  int64_t evicted_blocks = 0;        // cached blocks dropped or spilled to make room
  uint64_t spill_bytes_out = 0;
  uint64_t spill_bytes_in = 0;
  // Blocks (slots) spilled to and fetched from each part of the cold tier.
  int64_t host_spills = 0;
  int64_t file_spills = 0;
  int64_t host_fetches = 0;
  int64_t file_fetches = 0;
  // Blocks moved from host slots down to file slots to free a host slot (the file as a tier below
  // host memory: KvManager::migrates()), and their payload bytes.
  int64_t file_migrations = 0;
  uint64_t migrated_bytes = 0;
  int64_t swap_outs = 0;             // sequences swapped out
  // --kv-offload: hot blocks of running sequences moved to host slots and attended there
  // (offloaded_blocks, also counted in host_spills), the blocks running sequences hold in host
  // slots now (a gauge), and what the forward passes read from them: blocks summed over passes
  // and sequences (each read in every layer), and those blocks' bytes (K and V, every layer).
  int64_t offloaded_blocks = 0;
  int64_t host_resident_blocks = 0;
  int64_t host_attended_blocks = 0;
  uint64_t host_attended_bytes = 0;
  int64_t swap_ins = 0;
  // Cold-tier reads that failed (I/O error, short read, checksum mismatch): the blocks were
  // treated as lost and their sequences recompute them.
  int64_t cold_read_failures = 0;
  // The remote tier: blocks fetched from it that became cached blocks here, and loads that failed
  // (bytes of the wrong size).
  int64_t remote_imported_blocks = 0;
  int64_t remote_load_failures = 0;
  // Eviction within sequences (--kv-evict): tokens dropped, tokens moved into the holes, shared
  // blocks copied so that a sequence could compact its own copy.
  int64_t evicted_tokens = 0;
  int64_t compacted_tokens = 0;
  int64_t evict_copies = 0;
  // Recall (--kv-recall): demoted blocks loaded back into hot staging blocks, in tokens.
  int64_t recalled_tokens = 0;
  // The recall store (filled by the engine from it): host memory its demoted blocks take
  // (--kv-recall-memory bounds it), blocks written to its spill file, blocks dropped past the cap.
  uint64_t recall_bytes = 0;
  int64_t recall_spilled_blocks = 0;
  int64_t recall_dropped_blocks = 0;

  // Share of the RAM tiers that sequences hold, by bytes. Prefix-cached slots that no sequence
  // holds are evictable, so they count as available (as vLLM's KV usage does); `cached` and
  // `bytes_used` still show them.
  double usage_ratio() const {
    const uint64_t total = hot.bytes_total + warm.bytes_total;
    return total ? (held_bytes(hot) + held_bytes(warm)) / static_cast<double>(total) : 0.0;
  }

 private:
  static double held_bytes(const KvTierStats& t) {
    return t.slots ? static_cast<double>(t.bytes_total) * static_cast<double>(t.used) / static_cast<double>(t.slots) : 0.0;
  }
};

}  // namespace strata
