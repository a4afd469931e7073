// The KV cache manager: every KV byte of every sequence, in blocks of block_size tokens.
//
// RAM tiers: a hot pool of full-precision blocks and, with --kv-warm-dtype, a warm pool of
// compact slots (kv/warm_format.h) for blocks older than the hot window. A sequence's block table
// lists, per logical block, a hot block id or a warm sub-block id (>= the number of hot blocks),
// and attention reads both directly. Below RAM, an optional cold tier (ColdStore) takes the
// blocks of swapped-out sequences and prefix-cached blocks evicted from RAM; nothing reads a
// cold block except to bring it back.
//
// Prefix caching (vLLM-style): a full block's hash chains its parent's, its tokens and the
// model fingerprint; a hash map finds the longest cached prefix of a new sequence; blocks are
// shared by reference count; a block whose count reaches zero stays cached (LRU) until its slot
// is needed. Forked sequences share all blocks; the first write to a shared partial block copies
// it (copy-on-write).
//
// Prepare, then apply: allocate/commit/free/fork/swap_* update the bookkeeping at once and queue
// the data movement they imply (copies, re-encodes, spills, swap-ins); apply() performs it, and
// must run before the next forward pass. Allocation never throws for lack of memory: it returns
// false and changes nothing, and the scheduler decides (wait, preempt, swap).
//
// Thread-safety: engine thread only (the cold store does its I/O on its own thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/anon_memory.h"
#include "core/types.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/cold_store.h"
#include "kv/kv_arena.h"
#include "kv/kv_config.h"
#include "kv/kv_stats.h"
#include "kv/warm_format.h"

namespace strata {

class ThreadPool;
using SeqId = int64_t;

class KvManager {
 public:
  // Sizes the pools from `cfg` (throws strata::Error for impossible sizes or an unusable spill
  // directory). `fingerprint` identifies the model, so caches never mix models.
  KvManager(const KvGeometry& geo, const KvConfig& cfg, uint64_t fingerprint, ThreadPool* pool = nullptr);
  ~KvManager();
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  const KvConfig& config() const { return cfg_; }
  int32_t block_size() const { return geo_.block_size; }
  int32_t num_hot_blocks() const { return hot_pool_.num_blocks(); }
  bool has_cold_tier() const { return cold_store_ != nullptr; }

  // --- sequences ---------------------------------------------------------------------------

  // Starts tracking an empty sequence. Precondition: `s` is not tracked.
  void add_sequence(SeqId s);
  bool has_sequence(SeqId s) const { return seqs_.count(s) > 0; }

  // Tokens of `tokens` found in the prefix cache (whole blocks, leaving at least one token to
  // compute). Pure query.
  int32_t query_prefix(std::span<const TokenId> tokens) const;

  // Hot blocks that allocate(s, tokens, n_tokens) would take from the pool now (new blocks,
  // copy-on-write copies, cold prefix hits brought back, cached blocks revived). Pure query.
  int32_t blocks_needed(SeqId s, std::span<const TokenId> tokens, int32_t n_tokens) const;

  // Blocks the hot pool can hand out now (free + cached).
  int32_t num_available_blocks() const { return hot_pool_.num_available(); }

  // Makes room for tokens [0, n_tokens) of sequence s. On the first call for an empty sequence,
  // attaches the longest cached prefix of `tokens` (returned in *cached_tokens; those tokens need
  // no computation). Returns false, changing nothing, when the pools cannot provide the blocks.
  // `tokens` holds at least the sequence's tokens so far (prompt + generated).
  bool allocate(SeqId s, std::span<const TokenId> tokens, int32_t n_tokens, int32_t* cached_tokens = nullptr);

  // After a forward pass: the KV of tokens [0, n_computed) is written. Full blocks get their hash
  // and enter the prefix cache; blocks that left the hot window are queued for re-encoding.
  void commit(SeqId s, std::span<const TokenId> tokens, int32_t n_computed);

  // A new sequence sharing all of parent's blocks (n > 1 samples of one prompt).
  void fork(SeqId parent, SeqId child);

  // Releases the sequence's blocks, tail first (so tails are evicted before the prefixes others
  // share), and stops tracking it.
  void free_sequence(SeqId s);

  // Swap preemption: moves the blocks only this sequence holds to the cold tier and frees their
  // RAM. False (nothing changed) without a cold tier or when it is full.
  bool swap_out(SeqId s);
  // Hot blocks (and warm slots) swap_in(s) needs.
  int32_t blocks_to_swap_in(SeqId s) const;
  // Brings a swapped sequence back; its data is in RAM after the next apply(). False when RAM
  // cannot hold it (nothing changed).
  bool swap_in(SeqId s);
  bool is_swapped(SeqId s) const;

  int32_t num_tokens(SeqId s) const;  // tokens with slots
  // Block table for attention. Precondition: not swapped; valid until the next call that
  // changes this sequence.
  std::span<const BlockId> block_table(SeqId s) const;

  // --- data ------------------------------------------------------------------------------

  // Performs the queued data movement (see the class comment). Call before each forward pass.
  // A cold-tier read that fails (the store reports an error, or the bytes are short or fail their
  // checksum) never throws: the RAM slot it was meant to fill is lost, counted in
  // KvStats::cold_read_failures, dropped from the prefix cache, and every sequence that references
  // it (or data derived from it in the same apply) is reported by take_lost_sequences().
  void apply();
  bool has_pending_ops() const;

  // Sequences whose KV could not be restored by the last apply() (a swapped-in sequence, or one
  // whose prefix hit came from the cold tier), each once, in no particular order. Their tables are
  // unchanged: the caller must free_sequence() them (and may add them again to recompute) before
  // any of them runs a forward pass.
  std::vector<SeqId> take_lost_sequences();

  std::span<const KvLayerView> layer_views() const { return views_; }

  KvStats stats() const;

  // Aborts (STRATA_CHECK) when any invariant is broken: per-pool lists and counts; every slot's
  // reference count equals the references from sequence tables; every hash in the map points to a
  // slot that holds it, and that hash still matches the (parent, tokens) it was computed from; no
  // slot is both cached and referenced; pending ops reference live slots.
  void check_invariants() const;

  // Flushes the cold store's queue (tests, shutdown).
  void drain_io();

 private:
  enum class Tier : uint8_t { kHot, kWarm, kCold };
  struct Loc {
    Tier tier = Tier::kHot;
    int32_t slot = -1;
    int32_t sub = 0;  // sub-block within a warm slot (or a cold copy of one)
    friend bool operator==(const Loc&, const Loc&) = default;
  };
  struct SlotHashes {  // the prefix-cache identity of each sub-block of a slot
    std::vector<BlockHash> hash;    // [span]; empty = not registered
    std::vector<BlockHash> parent;  // [span]
    std::vector<std::vector<TokenId>> tokens;  // [span][block_size], to re-verify the hash
  };
  struct ColdInfo {  // what a cold slot holds
    Tier content = Tier::kHot;  // kHot: one hot block; kWarm: one warm slot
    int32_t n_subs = 1;
  };
  struct Seq {
    std::vector<Loc> table;         // one entry per logical block
    std::vector<BlockId> ids;       // encoded table for attention (RAM entries only)
    std::vector<BlockHash> hashes;  // hash of each full block, as far as committed
    int32_t n_tokens = 0;
    int32_t n_committed = 0;
    bool swapped = false;
  };
  // Data movement, executed by apply() in the order it was planned (so a slot is always read
  // before a later plan reuses it).
  struct Op {
    enum class Kind : uint8_t { kCopy, kReencode, kSpill, kFetch } kind;
    Loc src;                  // kCopy: hot block; kSpill: RAM slot; kFetch: cold slot
    Loc dst;                  // kCopy: hot block; kReencode: warm slot; kSpill: cold slot; kFetch: RAM slot
    std::vector<BlockId> hot;  // kReencode: the span hot blocks, in order
    uint64_t ticket = 0;       // kFetch: read already issued (prefetch), 0 = not yet
  };

  struct Hit {
    Loc loc;
    BlockHash hash;
  };
  // The cached prefix of a fresh sequence's tokens, stopping at the first miss or where the pools
  // could not bring a cold block back; *hot_taken = hot blocks the hits take from availability.
  std::vector<Hit> find_hits(std::span<const TokenId> tokens, int32_t* hot_taken) const;

  BlockPool& pool(Tier t);
  const BlockPool& pool(Tier t) const;
  int32_t span_of(Tier t) const { return t == Tier::kWarm ? warm_span_ : 1; }
  BlockId encode(const Loc& l) const;
  SlotHashes& hashes_of(const Loc& l);
  const SlotHashes& hashes_of(const Loc& l) const;

  // Allocation in a RAM tier, evicting (and spilling) a cached slot if needed.
  std::optional<int32_t> take_slot(Tier t);
  std::optional<int32_t> take_cold_slot();
  void forget_slot_hashes(const Loc& slot_loc);  // drops the slot's registrations from the map
  void move_slot_hashes(const Loc& from, const Loc& to);
  void release_ref(const Loc& l);
  void rebuild_ids(Seq& q) const;
  int32_t cow_needed(const Seq& q, int32_t n_tokens) const;
  void plan_reencode(SeqId id, Seq& q);
  uint64_t slot_bytes(Tier content) const;
  // Bytes of one slot of the given content (header + payload) in the cold tier. Each cold slot
  // starts with a checksum of its payload seeded with the slot and its write generation, so torn,
  // garbage or stale (older generation) content is detected on the way back.
  uint64_t cold_frame_bytes(Tier content) const { return kColdHeaderBytes + slot_bytes(content); }
  uint64_t cold_checksum(int32_t cold_slot, const uint8_t* payload, size_t n) const;
  // Appends the slot's bytes to `out`.
  void capture(const Loc& slot_loc, std::vector<uint8_t>& out) const;
  void restore(const Loc& slot_loc, const uint8_t* bytes, size_t n);
  // The payload of a finished cold read, or false when the read failed or its frame is bad.
  bool read_cold(Op& op, std::vector<uint8_t>& bytes);
  void reencode(const Op& op);
  bool cold_write_pending(int32_t cold_slot) const;

  KvGeometry geo_;
  KvConfig cfg_;
  uint64_t fingerprint_;
  ThreadPool* threads_;
  int32_t warm_span_ = 1;

  BlockPool hot_pool_;
  std::unique_ptr<KvArena> hot_arena_;
  BlockPool warm_pool_;
  int64_t warm_k_slot_bytes_ = 0, warm_v_slot_bytes_ = 0;
  AnonymousMemory warm_memory_;
  std::unique_ptr<ColdStore> cold_store_;
  BlockPool cold_pool_;
  std::vector<ColdInfo> cold_info_;
  static constexpr uint64_t kColdHeaderBytes = 8;
  std::vector<uint32_t> cold_gen_;  // per cold slot: writes so far (part of the checksum seed)
  std::vector<uint8_t> cold_bad_;   // per cold slot: its content was lost before it was written
  std::vector<SeqId> lost_;         // see take_lost_sequences()

  std::vector<SlotHashes> hot_hashes_, warm_hashes_, cold_hashes_;
  std::unordered_map<BlockHash, Loc, BlockHashHasher> cache_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<KvLayerView> views_;

  std::vector<Op> ops_;

  KvStats counters_;
};

}  // namespace strata
