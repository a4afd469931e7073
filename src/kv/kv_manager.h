// The KV cache manager: the bookkeeping of every KV block of every sequence, in blocks of
// block_size tokens. It owns no bytes: KvStorage (kv/kv_storage.h) does, and executes the KvOps
// (kv/kv_ops.h) this class plans.
//
// RAM tiers: a hot pool of full-precision blocks and, with --kv-warm-dtype, a warm pool of
// compact slots (kv/warm_format.h) for blocks older than the hot window. A sequence's block table
// lists, per logical block, a hot block id or a warm sub-block id (>= the number of hot blocks),
// and attention reads both directly. Below RAM, an optional cold tier (ColdStore) takes the
// blocks of swapped-out sequences and prefix-cached blocks evicted from RAM (with host memory and
// a file, the file is a tier below the host part: migrates()); nothing reads a cold block except to bring it back, but with --kv-offload (offload()): a running sequence that
// cannot grow in the hot pool moves its oldest full private hot blocks into host slots of the cold
// tier and keeps them in its table, where attention reads them in place (block ids >= host_id_base()).
//
// Prefix caching (vLLM-style): a full block's hash chains its parent's, its tokens and the
// model fingerprint; a hash map finds the longest cached prefix of a new sequence; blocks are
// shared by reference count; a block whose count reaches zero stays cached (LRU) until its slot
// is needed. Forked sequences share all blocks; the first write to a shared partial block copies
// it (copy-on-write).
//
// Prepare, then apply: allocate/commit/free/fork/swap_* update the bookkeeping at once and plan
// the data movement they imply (copies, re-encodes, spills, fetches) as KvOps, in order; the
// caller takes them (take_ops), has KvStorage::execute them before the next forward pass, and
// hands the statuses back (complete). Allocation never throws for lack of memory: it returns
// false and changes nothing, and the scheduler decides (wait, preempt, swap).
//
// Thread-safety: engine thread only.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/types.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_config.h"
#include "kv/kv_ops.h"
#include "kv/kv_stats.h"
#include "kv/warm_format.h"

namespace strata {

class KvManager {
 public:
  // Pools of the sizes of `cap` (the storage's: KvStorage::capacity()), with the policies of `cfg`
  // (throws strata::Error for a bad one). `fingerprint` identifies the model, so caches never mix
  // models.
  KvManager(const KvGeometry& geo, const KvConfig& cfg, const KvCapacity& cap, uint64_t fingerprint);
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  const KvConfig& config() const { return cfg_; }
  int32_t block_size() const { return geo_.block_size; }
  int32_t num_hot_blocks() const { return hot_pool_.num_blocks(); }
  bool has_cold_tier() const { return cap_.cold_slots > 0; }
  bool publishes() const { return publish_; }
  bool has_warm_tier() const { return cfg_.warm_format != WarmFormat::kNone; }
  // The hot window in effect: --kv-hot-tokens (or the controller's value), but at most what lets
  // one sequence grow without end in the hot pool: its window, one warm group of full blocks
  // waiting for re-encoding and the block its next token goes to
  // ((hot blocks - warm span - 1) * block size). A larger window would leave a sequence that the
  // whole pool holds (hot and warm) unable to reach its next token: it would preempt itself for
  // ever.
  int32_t hot_tokens() const;
  // The most tokens one sequence alone can hold: the hot pool and the warm pool together when
  // the hot pool can pass blocks on to the warm one (see hot_tokens), else the hot pool; with
  // --kv-offload, plus the host slots of the cold tier.
  int64_t max_sequence_tokens() const;
  // Moves the hot window (--kv-hot-tokens) at run time (a controller, sched/controller.h): from
  // each sequence's next commit, its whole blocks older than its last n tokens are re-encoded into
  // the warm tier (when there is one and it has room). A larger window re-encodes less from then
  // on; blocks already warm stay warm. Precondition: n >= 0.
  void set_hot_tokens(int32_t n);

  // --- sequences ---------------------------------------------------------------------------

  // Starts tracking an empty sequence. Precondition: `s` is not tracked.
  void add_sequence(SeqId s);
  bool has_sequence(SeqId s) const { return seqs_.count(s) > 0; }

  // Tokens of `tokens` found in the prefix cache (whole blocks, leaving at least one token to
  // compute). Pure query.
  int32_t query_prefix(std::span<const TokenId> tokens) const;
  // The same for the tokens of tracked, still empty sequence s: its prompt's block hashes are
  // computed once and kept for blocks_needed and allocate (and commit). Precondition: `tokens`
  // stay the same across these calls, up to the tokens allocate is given.
  int32_t query_prefix(SeqId s, std::span<const TokenId> tokens) const;
  // Tokens the first allocate(s, tokens, ...) would attach from the prefix cache right now: the
  // hits of query_prefix(s, tokens) as far as the pools can take them (a cold hit needs a free RAM
  // slot, and hits that take hot blocks (cold ones brought back, cached ones revived) always leave
  // one hot block available for the first token after them, so that the hits alone never make
  // the sequence's allocation impossible). 0 unless s is tracked and still empty. Pure query.
  int32_t prefix_hits(SeqId s, std::span<const TokenId> tokens) const;

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

  // After a forward pass: the KV of tokens [0, n_computed) is written (the tokens given to allocate
  // for those positions). Full blocks get their hash
  // and enter the prefix cache; blocks that left the hot window are queued for re-encoding.
  void commit(SeqId s, std::span<const TokenId> tokens, int32_t n_computed);

  // A new sequence sharing all of parent's blocks (n > 1 samples of one prompt).
  void fork(SeqId parent, SeqId child);

  // Releases the sequence's blocks, tail first (so tails are evicted before the prefixes others
  // share), and stops tracking it.
  void free_sequence(SeqId s);

  // Swap preemption: moves the blocks only this sequence holds to the cold tier and frees their
  // RAM. False (nothing changed) without a cold tier, when it is full, or when the sequence holds
  // no block alone (all shared with forks or prefix sharers: swapping would free nothing).
  bool swap_out(SeqId s);
  // The bytes swap_out(s) would move to the cold tier (the RAM slots only s holds), and that
  // bringing it back would read: the transfer half of --preempt auto's choice. 0 when swapped.
  uint64_t swap_out_bytes(SeqId s) const;
  // Hot blocks swap_in(s) needs, plus those allocating n_tokens right after it would take (new
  // blocks, a copy of a shared partial block; nothing for n_tokens within its slots).
  int32_t blocks_to_swap_in(SeqId s, int32_t n_tokens = 0) const;
  // Brings a swapped sequence back; its data is in RAM once the planned fetches ran. False when
  // RAM cannot hold it (nothing changed).
  bool swap_in(SeqId s);

  int32_t num_tokens(SeqId s) const;  // tokens with slots

  // --- eviction within a sequence (kv/kv_evictor.h) ------------------------------------------
  // A sequence that evicted tokens holds fewer slots than tokens: the n_tokens / n_computed
  // arguments of allocate, blocks_needed, commit and blocks_to_swap_in count the sequence's
  // tokens (positions), and slot = position - num_evicted() for the tokens appended since. Its
  // slots stay dense ([0, num_tokens(s))); each holds the token of its original position (RoPE
  // was applied there), in no particular order after a compaction, which attention does not
  // need: a new token sees every cached slot before its own.

  // Tokens dropped from s so far.
  int32_t num_evicted(SeqId s) const;
  // The position of the token in each slot, [num_tokens(s)].
  std::vector<int32_t> slot_positions(SeqId s) const;
  // 1 for the slots eviction may not drop: those in warm blocks (compaction works on hot blocks).
  std::vector<uint8_t> pinned_slots(SeqId s) const;
  // Drops the tokens of `slots` (distinct slot indices < num_tokens(s), none pinned) and
  // compacts: each hole below the new count takes one of the last kept tokens (its K and V rows
  // move; kept tokens keep their positions), emptied tail blocks are released. Blocks that
  // receive tokens are written only when this sequence holds them alone; a shared one (forks,
  // prefix cache) is first copied into a private block (a kCopy op). Private blocks that change
  // leave the prefix cache, and the sequence's prefix hashing stops at its first changed block.
  // Plans the kCopy and one kCompact op. Returns the moves (from slot, to slot), or nullopt,
  // changing nothing, when a private copy needs a hot block and none is available.
  // Preconditions: not swapped; every slot committed.
  std::optional<std::vector<std::pair<int32_t, int32_t>>> evict(SeqId s, std::span<const int32_t> slots);
  // Recall (--kv-recall, kv/kv_evictor.h): private hot blocks a sequence holds outside its table,
  // into which demoted blocks (kv/recall_store.h) are loaded to be attended before the table's
  // slots. They count as used hot blocks; free_sequence and swap_out release them (a swapped
  // sequence holds none) and a fork does not share them.
  // Grows or shrinks s's staging blocks towards n, growing only while more than `reserve` hot
  // blocks stay available; returns how many s holds. Precondition: not swapped.
  int32_t set_recall_blocks(SeqId s, int32_t n, int32_t reserve = 1);
  std::span<const BlockId> recall_blocks(SeqId s) const;
  // Plans a kLoad of `image` (one hot block's bytes as KvStorage lays them out) into staging block
  // i of s, and counts block_size recalled tokens.
  void load_recall_block(SeqId s, int32_t i, std::shared_ptr<const std::vector<uint8_t>> image);

  // --- offload (--kv-offload) ----------------------------------------------------------------
  // With cfg.offload and host slots in the cold tier, a running sequence may hold blocks in host
  // slots: full, committed blocks of hot content, never written again, read by attention in place
  // (KvLayerView::host_base). They stay there until the sequence is freed (their slots then cache
  // their prefix-cache content like any cold slot); swap_out leaves them where they are and
  // swap_in does not bring them back (a prefix hit on one from another sequence fetches a copy).

  bool offloads() const { return offload_; }
  // Block ids >= this name host slots: id = host_id_base() + slot (after every hot and warm id).
  int32_t host_id_base() const { return hot_pool_.num_blocks() + warm_pool_.num_blocks() * warm_span_; }
  // Moves up to n of s's oldest offloadable blocks — hot, full and committed, held by s alone (no
  // fork or prefix sharer; the prefix cache's registration moves with the block), not holding a
  // sink under an eviction policy — into host slots (free ones first, else the least recently
  // used cached one, whose content is dropped), planning a kDemote op each. Returns how many
  // moved: 0 without --kv-offload or when the host slots are all used. Precondition: not swapped.
  int32_t offload(SeqId s, int32_t n);
  // Blocks of s's table in host slots.
  int32_t host_blocks(SeqId s) const;
  // Accounts for one forward pass over s's KV: its host blocks and their bytes are read
  // (KvStats::host_attended_blocks, host_attended_bytes).
  void note_attended(SeqId s);

  // Block table for attention. Precondition: not swapped; valid until the next call that
  // changes this sequence.
  std::span<const BlockId> block_table(SeqId s) const;

  // The cold slots (with the tier of their content) that bringing s back would read: all of a
  // swapped sequence's, or a fresh sequence's cold prefix hits for `tokens` (its prompt). For
  // reading ahead (KvStorage::prefetch); pure query.
  std::vector<std::pair<int32_t, KvTier>> cold_reads_ahead(SeqId s, std::span<const TokenId> tokens) const;
  // The cold slots being read ahead now (what the caller last gave KvStorage::prefetch): until the
  // next call, their blocks never migrate from host memory to the file (the read would be wasted).
  void note_reads_ahead(std::span<const std::pair<int32_t, KvTier>> cold);

  // --- the cold tier's parts --------------------------------------------------------------------
  // With host slots and file slots (--kv-host-memory and --kv-spill-dir) and cfg.host_migrate, the
  // file is a tier below the host part: a cold slot wanted for a spill, a swap-out or an offload
  // when no host slot is free takes the host slot of the least recently written host block that
  // can move — held by nothing, or only by swapped-out sequences (not a block a running sequence
  // reads in place, nor, with --kv-offload, one of hot content a swapped sequence will read in place
  // again; not one that a fetch being planned or a read ahead reads) — after moving that block to a
  // file slot (a free one, else the file's least recently used cached block, dropped): a kMigrate
  // op planned before the op that overwrites the host slot. The prefix-cache registrations and the
  // swapped sequences' tables follow the block. Without a file slot or a block that can move, the
  // file takes the new block (or a cached block is dropped) as without migration.
  bool migrates() const { return migrate_; }

  // --- the remote tier (kv/remote_pool.h) ---------------------------------------------------
  // With cfg.remote_url set, committed full blocks (--kv-remote-write always) or blocks evicted
  // from RAM (on-evict) are planned as kPublish ops, and blocks found remotely come in through
  // import_block as cached blocks, which the next allocate finds like any prefix hit.

  // The hash chain of the full blocks of `tokens` that a new sequence could take from the prefix
  // cache (all but the last token), and how many of its first blocks are cached here (RAM or
  // cold). Pure queries.
  std::vector<BlockHash> prefix_chain(std::span<const TokenId> tokens) const;
  int32_t cached_prefix_blocks(std::span<const BlockHash> chain) const;
  bool is_cached(const BlockHash& h) const { return cfg_.prefix_cache && cache_.count(h) > 0; }

  // Makes the block (parent, tokens) a cached block whose content is `bytes` (one hot block, or a
  // warm slot of one block, all layers, as KvStorage lays them out: `content` says which), planning
  // a kLoad op. The parent must be cached (or empty for a first block). Takes a slot of that tier,
  // evicting the least recently used cached one but never the parent; always leaves one hot block
  // available. False, changing nothing, when the block is already cached, the parent is not, the
  // tier has no slot for it, or the prefix cache is off. Importing a chain longer than the
  // blocks available (num_available_blocks()) would evict its own first blocks: callers bound it.
  bool import_block(const BlockHash& parent, std::span<const TokenId> tokens, KvTier content,
                    std::shared_ptr<const std::vector<uint8_t>> bytes);

  // --- the plan ----------------------------------------------------------------------------

  // The KV ops planned since the last call, in planning order (so a slot is always read before a
  // later op reuses it). They must be executed (KvStorage::execute), in this order, before the next
  // forward pass, and their statuses handed to complete() before anything else is planned.
  std::vector<KvOp> take_ops();
  // The ops planned so far that the next take_ops() will hand out, unchanged (they may still be
  // dropped: a re-encode whose warm slot free_sequence frees). For KvStorage::start_reencodes.
  std::span<const KvOp> pending_ops() const { return ops_; }

  // Accounts for executed ops (counters) with their statuses. A failed op (a cold read that the
  // store reported as an error, or whose bytes were short or failed their checksum, and what was
  // derived from it) never throws: its destination is lost, counted in
  // KvStats::cold_read_failures when it was a fetch, dropped from the prefix cache, and every
  // sequence that references it is reported by take_lost_sequences().
  void complete(std::span<const KvOp> ops, std::span<const KvOpStatus> statuses);

  // Sequences whose KV could not be restored by the ops last completed (a swapped-in sequence, or
  // one whose prefix hit came from the cold tier), each once, in no particular order. Their tables
  // are unchanged: the caller must free_sequence() them (and may add them again to recompute)
  // before any of them runs a forward pass.
  std::vector<SeqId> take_lost_sequences();

  KvStats stats() const;

  // Aborts (STRATA_CHECK) when any invariant is broken: per-pool lists and counts; every slot's
  // reference count equals the references from sequence tables; every hash in the map points to a
  // slot that holds it, and that hash still matches the (parent, tokens) it was computed from; no
  // slot is both cached and referenced; pending ops reference live slots.
  void check_invariants() const;

 private:
  using Tier = KvTier;
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
  bool is_host(const Loc& l) const { return l.tier == Tier::kCold && l.slot < cap_.cold_host_slots; }
  struct ColdInfo {  // what a cold slot holds
    Tier content = Tier::kHot;  // kHot: one hot block; kWarm: one warm slot
    int32_t n_subs = 1;
  };
  // Migration (see migrates()): frees a host slot by moving a host block down to a file slot, and
  // returns that host slot, taken (count 1, no hash); nullopt, changing nothing, when a host slot
  // is free, nothing can move, or no file slot can be had.
  std::optional<int32_t> migrate_host_block();
  // A cold slot's content was (re)written now: the host part's recency order (host_order_).
  void note_cold_write(int32_t slot);
  // The prefix-cache map and slot hashes only (not the pools' flags); returns the first hash moved.
  BlockHash move_registrations(const Loc& from, const Loc& to);
  struct Seq {
    std::vector<Loc> table;         // one entry per logical block
    std::vector<BlockId> ids;       // encoded table for attention (RAM entries only)
    std::vector<BlockHash> hashes;  // hash of each full block, as far as committed
    // While the sequence is empty: the hash chain of its prompt's full blocks (computed once by
    // the first query); after the first allocate, the part inside the allocated tokens, for commit.
    mutable std::vector<BlockHash> chain;
    mutable bool chain_ready = false;
    int32_t n_tokens = 0;     // slots
    int32_t n_committed = 0;  // slots
    bool swapped = false;
    // Eviction: tokens dropped so far; the positions of the first positions.size() slots (the
    // slots after them hold position slot + n_evicted); blocks from hash_limit on are never
    // hashed (their content is no longer the prompt's tokens in order).
    int32_t n_evicted = 0;
    std::vector<int32_t> positions;
    int32_t hash_limit = INT32_MAX;
    std::vector<BlockId> recall;  // hot staging blocks for recalled blocks (set_recall_blocks)
  };
  struct Hit {
    Loc loc;
    BlockHash hash;
  };
  // Entry i of q's table is read in place when q runs (offload): a host slot of hot content
  // holding a full committed block.
  bool in_place(const Seq& q, size_t i) const;
  // The prompt hash chain of fresh sequence q (see Seq::chain).
  const std::vector<BlockHash>& prompt_chain(const Seq& q, std::span<const TokenId> tokens) const;
  // The cached prefix of a fresh sequence's chain, stopping at the first miss, where the pools
  // could not bring a cold block back, or where a hit would take the last available hot block
  // (the tokens after the hits need one); *hot_taken = hot blocks the hits take from availability.
  std::vector<Hit> find_hits(std::span<const BlockHash> chain, int32_t* hot_taken) const;

  BlockPool& pool(Tier t);
  const BlockPool& pool(Tier t) const;
  int32_t span_of(Tier t) const { return t == Tier::kWarm ? warm_span_ : 1; }
  // A warm tier that can take blocks: warm slots, and a hot pool of more than one warm group.
  bool warm_tier_usable() const;
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
  uint64_t slot_bytes(Tier content) const { return content == Tier::kHot ? cap_.hot_block_bytes : cap_.warm_slot_bytes; }
  static KvSlot slot_of(const Loc& l) { return KvSlot{l.tier, l.slot}; }

  KvGeometry geo_;
  KvConfig cfg_;
  KvCapacity cap_;
  uint64_t fingerprint_;
  int32_t warm_span_ = 1;
  bool offload_ = false;  // --kv-offload with host slots
  bool publish_ = false;  // plan kPublish ops (a remote tier is configured and the prefix cache is on)
  void plan_publish(const Loc& l, const BlockHash& h);

  BlockPool hot_pool_;
  BlockPool warm_pool_;
  BlockPool cold_pool_;
  std::vector<ColdInfo> cold_info_;
  bool migrate_ = false;  // host and file slots, cfg.host_migrate
  // Host slots by the time their content was written (a counter), oldest first: the candidates
  // of migrate_host_block. Entries of slots freed since are dropped when met.
  std::set<std::pair<uint64_t, int32_t>> host_order_;
  std::vector<uint64_t> cold_written_;  // per cold slot: the counter value of its last write
  uint64_t write_clock_ = 0;
  std::set<int32_t> reads_ahead_;       // note_reads_ahead
  std::vector<SeqId> lost_;         // see take_lost_sequences()

  std::vector<SlotHashes> hot_hashes_, warm_hashes_, cold_hashes_;
  std::unordered_map<BlockHash, Loc, BlockHashHasher> cache_;
  std::unordered_map<SeqId, Seq> seqs_;

  std::vector<KvOp> ops_;  // planned, not taken yet

  KvStats counters_;
};

}  // namespace strata
