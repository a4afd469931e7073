// A pool of fixed-size KV blocks identified by integer ids (one pool per tier), in the manner of
// vLLM's block pool: each block has a reference count and an optional content hash. A block whose
// count drops to zero goes to the free list when it has no hash, or to the tail of an LRU queue of
// cached blocks when it has one, so that a later request with the same prefix can revive it.
// Allocation takes from the free list first (most recently freed first, or lowest id first with a
// preferred range) and evicts the least recently used cached block only when the free list is
// empty. Running out is normal: allocate() returns nullopt.
// Block metadata holds no pointers (indices only); the bytes live in a separate arena.
// Thread-safety: not thread-safe; owned and used by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_types.h"

namespace strata {

class BlockPool {
 public:
  // With preferred > 0, ids [0, preferred) form a preferred range (the cold pool's host-memory
  // slots before its file slots): the free list then hands out the lowest free id first (a heap)
  // instead of the most recently freed one, and the range's counts are kept (preferred_counts()).
  explicit BlockPool(int32_t num_blocks, int32_t preferred = 0);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }  // no hash, count 0
  int32_t num_cached() const { return num_cached_; }                        // hash, count 0
  int32_t num_available() const { return num_free() + num_cached(); }       // allocatable now
  int32_t num_used() const { return num_blocks() - num_available(); }       // count > 0

  struct Allocation {
    BlockId id;
    BlockHash evicted;  // the hash the block carried when it was evicted from the cache, else empty
  };
  // A block with count 1 and no hash: from the free list, else the LRU cached block (whose hash
  // the caller must drop from its map, or spill). nullopt when nothing is available.
  std::optional<Allocation> allocate();
  // The same within the preferred range only: its lowest free id, else its least recently used
  // cached block. nullopt when the range has neither (whatever is available above it).
  std::optional<Allocation> allocate_preferred();
  // The same outside the preferred range: its lowest free id, else its least recently used cached
  // block. nullopt when neither is there.
  std::optional<Allocation> allocate_outside_preferred();
  // Moves block `from`'s state — its count, its hash and, when cached, its place in the LRU queue —
  // to `to`, and hands `from` out as allocate() does: count 1, no hash (a block moved between the
  // cold pool's parts keeps its recency). Preconditions: `from` is used or cached; `to` was just
  // allocated (count 1, no hash).
  void relocate(BlockId from, BlockId to);
  // Convenience for callers without a prefix cache: asserts no hash was evicted.
  std::optional<BlockId> allocate_plain();

  // Adds a reference; a cached block with count 0 leaves the LRU queue (a prefix-cache hit).
  void incref(BlockId id);
  // Drops a reference. At zero the block becomes cached (has a hash) or free. Returns true at zero.
  bool decref(BlockId id);

  void set_hash(BlockId id, const BlockHash& h);  // precondition: count > 0
  // Forgets the hash; a cached block (count 0) moves to the free list.
  void clear_hash(BlockId id);
  const BlockHash& hash(BlockId id) const { return blocks_[idx(id)].hash; }

  struct RangeCounts {
    int32_t used = 0;
    int32_t cached = 0;
    int32_t free = 0;
  };
  // Counts of the preferred range (all zero without one).
  RangeCounts preferred_counts() const {
    return {preferred_ - free_preferred_ - cached_preferred_, cached_preferred_, free_preferred_};
  }

  int32_t ref_count(BlockId id) const { return blocks_[idx(id)].ref_count; }
  bool is_cached(BlockId id) const { return blocks_[idx(id)].in_lru; }

  // Aborts (STRATA_CHECK) when the free list, LRU queue and counts disagree.
  void check_invariants() const;

 private:
  struct Meta {
    int32_t ref_count = 0;
    BlockHash hash;
    int32_t prev = -1;  // LRU neighbours (indices), -1 = none
    int32_t next = -1;
    bool in_lru = false;
    bool in_free = false;
  };
  static size_t idx(BlockId id) { return static_cast<size_t>(id); }
  void lru_push_back(BlockId id);
  void lru_remove(BlockId id);

  std::vector<Meta> blocks_;
  void free_push(BlockId id);
  BlockId free_pop();
  // Block id (free, or cached when `cached`: out of the LRU queue, its hash reported as evicted)
  // handed out with one reference.
  Allocation take(BlockId id, bool cached);

  std::vector<BlockId> free_;  // LIFO, or a min-heap with a preferred range
  int32_t preferred_ = 0;
  int32_t free_preferred_ = 0;    // free ids below preferred_
  int32_t cached_preferred_ = 0;  // cached ids below preferred_
  int32_t lru_head_ = -1;
  int32_t lru_tail_ = -1;
  int32_t num_cached_ = 0;
};

}  // namespace strata
