#include "kv/kv_manager.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/check.h"
#include "core/error.h"

namespace strata {

namespace {
int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }
}  // namespace

KvManager::KvManager(const KvGeometry& geo, const KvConfig& cfg, const KvCapacity& cap, uint64_t fingerprint)
    : geo_(geo),
      cfg_(cfg),
      cap_(cap),
      fingerprint_(fingerprint ^ (static_cast<uint64_t>(geo.dtype) << 56) ^ static_cast<uint64_t>(geo.block_size)),
      warm_span_(cap.warm_span),
      hot_pool_(cap.hot_blocks),
      warm_pool_(cap.warm_slots),
      cold_pool_(cap.cold_slots, std::min(cap.cold_host_slots, cap.cold_slots)) {
  STRATA_CHECK(geo.block_size == cfg.block_size && geo.dtype == cfg.dtype);
  STRATA_CHECK(cap.warm_slots == 0 || cfg.warm_format != WarmFormat::kNone, "warm slots without a warm format");
  if (cfg.hot_tokens < 0) fail("--kv-hot-tokens must be >= 0, got {}", cfg.hot_tokens);
  auto slot_hashes = [](int32_t span) {
    return SlotHashes{std::vector<BlockHash>(static_cast<size_t>(span)), std::vector<BlockHash>(static_cast<size_t>(span)),
                      std::vector<std::vector<TokenId>>(static_cast<size_t>(span))};
  };
  hot_hashes_.assign(static_cast<size_t>(cap.hot_blocks), slot_hashes(1));
  warm_hashes_.assign(static_cast<size_t>(cap.warm_slots), slot_hashes(warm_span_));
  cold_info_.resize(static_cast<size_t>(cap.cold_slots));
  cold_hashes_.assign(static_cast<size_t>(cap.cold_slots), slot_hashes(warm_span_));
  counters_.block_size = geo.block_size;
  publish_ = !cfg.remote_url.empty() && cfg.prefix_cache;
  offload_ = cfg.offload && cap.cold_host_slots > 0;
  migrate_ = cfg.host_migrate && cap.cold_host_slots > 0 && cap.cold_slots > cap.cold_host_slots;
  cold_written_.assign(static_cast<size_t>(cap.cold_slots), 0);
}

BlockPool& KvManager::pool(Tier t) { return t == Tier::kHot ? hot_pool_ : t == Tier::kWarm ? warm_pool_ : cold_pool_; }
const BlockPool& KvManager::pool(Tier t) const {
  return t == Tier::kHot ? hot_pool_ : t == Tier::kWarm ? warm_pool_ : cold_pool_;
}

KvManager::SlotHashes& KvManager::hashes_of(const Loc& l) {
  auto& v = l.tier == Tier::kHot ? hot_hashes_ : l.tier == Tier::kWarm ? warm_hashes_ : cold_hashes_;
  return v[static_cast<size_t>(l.slot)];
}
const KvManager::SlotHashes& KvManager::hashes_of(const Loc& l) const {
  const auto& v = l.tier == Tier::kHot ? hot_hashes_ : l.tier == Tier::kWarm ? warm_hashes_ : cold_hashes_;
  return v[static_cast<size_t>(l.slot)];
}

BlockId KvManager::encode(const Loc& l) const {
  if (l.tier == Tier::kCold) {
    STRATA_CHECK(offload_ && is_host(l), "cold block {} is not addressable by attention", l.slot);
    return host_id_base() + l.slot;
  }
  if (l.tier == Tier::kHot) return l.slot;
  return hot_pool_.num_blocks() + l.slot * warm_span_ + l.sub;
}

void KvManager::rebuild_ids(Seq& q) const {
  q.ids.clear();
  if (q.swapped) return;
  for (const Loc& l : q.table) q.ids.push_back(encode(l));
}

// --- the prefix cache -------------------------------------------------------------------------

void KvManager::forget_slot_hashes(const Loc& slot_loc) {
  SlotHashes& sh = hashes_of(slot_loc);
  for (size_t i = 0; i < sh.hash.size(); ++i) {
    if (sh.hash[i].empty()) continue;
    auto it = cache_.find(sh.hash[i]);
    if (it != cache_.end() && it->second.tier == slot_loc.tier && it->second.slot == slot_loc.slot) cache_.erase(it);
    sh.hash[i] = {};
    sh.parent[i] = {};
    sh.tokens[i].clear();
  }
  pool(slot_loc.tier).clear_hash(slot_loc.slot);
}

BlockHash KvManager::move_registrations(const Loc& from, const Loc& to) {
  SlotHashes& a = hashes_of(from);
  SlotHashes& b = hashes_of(to);
  BlockHash first;
  for (size_t i = 0; i < a.hash.size(); ++i) {
    if (a.hash[i].empty()) continue;
    STRATA_CHECK(i < b.hash.size());
    cache_[a.hash[i]] = Loc{to.tier, to.slot, static_cast<int32_t>(i)};
    b.hash[i] = a.hash[i];
    b.parent[i] = a.parent[i];
    b.tokens[i] = std::move(a.tokens[i]);
    if (first.empty()) first = a.hash[i];
    a.hash[i] = {};
    a.parent[i] = {};
    a.tokens[i].clear();
  }
  return first;
}

void KvManager::move_slot_hashes(const Loc& from, const Loc& to) {
  // (A slot taken from the LRU queue has lost its pool hash already: its registrations say.)
  const BlockHash first = move_registrations(from, to);
  pool(from.tier).clear_hash(from.slot);
  if (!first.empty()) pool(to.tier).set_hash(to.slot, first);
}

std::optional<int32_t> KvManager::take_cold_slot() {
  if (!has_cold_tier()) return std::nullopt;
  if (std::optional<int32_t> host = migrate_host_block()) {
    note_cold_write(*host);
    return host;
  }
  auto a = cold_pool_.allocate();
  if (!a) return std::nullopt;
  if (!a->evicted.empty()) {
    forget_slot_hashes(Loc{Tier::kCold, a->id, 0});
    ++counters_.evicted_blocks;
  }
  note_cold_write(a->id);
  return a->id;
}

// --- the cold tier's parts --------------------------------------------------------------------

void KvManager::note_cold_write(int32_t slot) {
  if (!migrate_ || slot >= cap_.cold_host_slots) return;
  const auto i = static_cast<size_t>(slot);
  host_order_.erase({cold_written_[i], slot});
  cold_written_[i] = ++write_clock_;
  host_order_.insert({cold_written_[i], slot});
}

void KvManager::note_reads_ahead(std::span<const std::pair<int32_t, KvTier>> cold) {
  reads_ahead_.clear();
  for (const auto& r : cold) reads_ahead_.insert(r.first);
}

std::optional<int32_t> KvManager::migrate_host_block() {
  if (!migrate_ || cold_pool_.preferred_counts().free > 0 || host_order_.empty()) return std::nullopt;
  // A referenced block can move only when swapped-out sequences' tables hold every reference:
  // a running sequence's reference is a block attention reads in place, and a reference from no
  // table is a touch of the planning (a prefix hit or a swap-in about to fetch it).
  std::unordered_map<int32_t, int32_t> swapped_refs;
  bool counted = false;  // swapped_refs is filled on the first referenced candidate
  auto swapped_refs_of = [&](int32_t slot) {
    if (!counted) {
      for (const auto& [id, q] : seqs_) {
        if (!q.swapped) continue;
        for (const Loc& l : q.table) {
          if (is_host(l)) ++swapped_refs[l.slot];
        }
      }
      counted = true;
    }
    auto r = swapped_refs.find(slot);
    return r == swapped_refs.end() ? 0 : r->second;
  };
  int32_t victim = -1;
  for (auto it = host_order_.begin(); it != host_order_.end();) {
    const int32_t slot = it->second;
    const int32_t refs = cold_pool_.ref_count(slot);
    if (cold_written_[static_cast<size_t>(slot)] != it->first || (refs == 0 && !cold_pool_.is_cached(slot))) {
      it = host_order_.erase(it);  // rewritten since, or freed: nothing to move
      continue;
    }
    bool movable = !reads_ahead_.count(slot);
    if (movable && refs > 0) {
      movable = swapped_refs_of(slot) == refs &&
                // With --kv-offload a swapped sequence reads its host blocks of hot content in place
                // again after its swap-in (which does not fetch them): they stay in host memory.
                !(offload_ && cold_info_[static_cast<size_t>(slot)].content == Tier::kHot);
    }
    if (movable) {
      victim = slot;
      host_order_.erase(it);
      break;
    }
    ++it;
  }
  if (victim < 0) return std::nullopt;
  std::optional<BlockPool::Allocation> file = cold_pool_.allocate_outside_preferred();
  if (!file) {
    host_order_.insert({cold_written_[static_cast<size_t>(victim)], victim});  // changed nothing
    return std::nullopt;
  }
  if (!file->evicted.empty()) {  // the file's least recently used cached block makes room
    forget_slot_hashes(Loc{Tier::kCold, file->id, 0});
    ++counters_.evicted_blocks;
  }
  const Loc from{Tier::kCold, victim, 0};
  const Loc to{Tier::kCold, file->id, 0};
  const ColdInfo info = cold_info_[static_cast<size_t>(victim)];
  cold_info_[static_cast<size_t>(file->id)] = info;
  cold_written_[static_cast<size_t>(file->id)] = cold_written_[static_cast<size_t>(victim)];
  KvOp op{KvOp::Kind::kMigrate, slot_of(from), slot_of(to), {}, {}, {}};
  op.content = info.content;
  ops_.push_back(std::move(op));
  move_registrations(from, to);
  cold_pool_.relocate(victim, file->id);  // count, hash flag and LRU place follow; the host slot is ours
  for (auto& [id, q] : seqs_) {
    if (!q.swapped) continue;
    for (Loc& l : q.table) {
      if (l.tier == Tier::kCold && l.slot == victim) l.slot = file->id;
    }
  }
  cold_info_[static_cast<size_t>(victim)] = ColdInfo{};
  return victim;
}

std::optional<int32_t> KvManager::take_slot(Tier t) {
  auto a = pool(t).allocate();
  if (!a) return std::nullopt;
  if (!a->evicted.empty()) {
    // A cached slot is reused: keep its content in the cold tier when there is one.
    ++counters_.evicted_blocks;
    const Loc from{t, a->id, 0};
    if (publish_ && cfg_.remote_write == KvConfig::RemoteWrite::kOnEvict) {
      const SlotHashes& sh = hashes_of(from);
      if (sh.hash.size() == 1 && !sh.hash[0].empty()) plan_publish(from, sh.hash[0]);
    }
    std::optional<int32_t> cold = take_cold_slot();
    if (cold) {
      cold_info_[static_cast<size_t>(*cold)] = ColdInfo{t, span_of(t)};
      ops_.push_back(KvOp{KvOp::Kind::kSpill, slot_of(from), KvSlot{Tier::kCold, *cold}, {}, {}, {}});
      move_slot_hashes(from, Loc{Tier::kCold, *cold, 0});
      cold_pool_.decref(*cold);  // held only by the cache: count 0, in the cold LRU
    } else {
      forget_slot_hashes(from);
    }
  }
  return a->id;
}

void KvManager::release_ref(const Loc& l) { pool(l.tier).decref(l.slot); }

int32_t KvManager::query_prefix(std::span<const TokenId> tokens) const {
  if (!cfg_.prefix_cache || tokens.empty()) return 0;
  const int32_t bs = geo_.block_size;
  const int32_t n_full = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  BlockHash parent;
  int32_t matched = 0;
  for (int32_t i = 0; i < n_full; ++i) {
    const BlockHash h = chain_block_hash(parent, tokens.subspan(static_cast<size_t>(i) * bs, bs), fingerprint_);
    if (!cache_.count(h)) break;
    ++matched;
    parent = h;
  }
  return matched * bs;
}

int32_t KvManager::query_prefix(SeqId s, std::span<const TokenId> tokens) const {
  const Seq& q = seqs_.at(s);
  if (!cfg_.prefix_cache || tokens.empty() || !q.table.empty() || q.n_tokens != 0 || q.n_evicted != 0) return 0;
  return cached_prefix_blocks(prompt_chain(q, tokens)) * geo_.block_size;
}

int32_t KvManager::prefix_hits(SeqId s, std::span<const TokenId> tokens) const {
  const Seq& q = seqs_.at(s);
  if (!cfg_.prefix_cache || tokens.empty() || !q.table.empty() || q.n_tokens != 0 || q.n_evicted != 0) return 0;
  int32_t taken = 0;
  return static_cast<int32_t>(find_hits(prompt_chain(q, tokens), &taken).size()) * geo_.block_size;
}

const std::vector<BlockHash>& KvManager::prompt_chain(const Seq& q, std::span<const TokenId> tokens) const {
  if (!q.chain_ready) {
    q.chain = prefix_chain(tokens);
    q.chain_ready = true;
  }
  return q.chain;
}

int32_t KvManager::cow_needed(const Seq& q, int32_t n_tokens) const {
  const int32_t bs = geo_.block_size;
  if (n_tokens <= q.n_committed || q.n_committed % bs == 0) return 0;
  const size_t b = static_cast<size_t>(q.n_committed / bs);
  if (b >= q.table.size()) return 0;
  const Loc& l = q.table[b];
  return l.tier == Tier::kHot && hot_pool_.ref_count(l.slot) > 1 ? 1 : 0;
}

std::vector<KvManager::Hit> KvManager::find_hits(std::span<const BlockHash> chain, int32_t* hot_taken) const {
  std::vector<Hit> hits;
  *hot_taken = 0;
  if (!cfg_.prefix_cache || chain.empty()) return hits;
  int32_t hot_avail = hot_pool_.num_available();
  int32_t warm_avail = warm_pool_.num_available();
  std::set<std::pair<Tier, int32_t>> seen;
  for (const BlockHash& h : chain) {
    auto it = cache_.find(h);
    if (it == cache_.end()) break;
    const Loc& l = it->second;
    if (seen.insert({l.tier, l.slot}).second) {
      // A hit that takes a hot block leaves at least one available: the tokens after the hits
      // start a new hot block, and without one the sequence could never be allocated, however
      // long it waited (an unreferenced cached block counts as available until it is revived).
      if (l.tier == Tier::kCold) {
        // Brought back into a RAM slot of the kind it holds.
        const Tier content = cold_info_[static_cast<size_t>(l.slot)].content;
        int32_t& avail = content == Tier::kHot ? hot_avail : warm_avail;
        if (avail <= (content == Tier::kHot ? 1 : 0)) break;
        --avail;
        if (content == Tier::kHot) ++*hot_taken;
      } else if (pool(l.tier).ref_count(l.slot) == 0) {
        // A cached slot is revived: it leaves the available set.
        if (l.tier == Tier::kHot && hot_avail <= 1) break;
        --(l.tier == Tier::kHot ? hot_avail : warm_avail);
        if (l.tier == Tier::kHot) ++*hot_taken;
      }
    }
    hits.push_back(Hit{l, h});
  }
  return hits;
}

int32_t KvManager::blocks_needed(SeqId s, std::span<const TokenId> tokens, int32_t n_tokens) const {
  const Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped);
  const int32_t bs = geo_.block_size;
  if (q.table.empty() && q.n_tokens == 0 && q.n_evicted == 0) {
    int32_t taken = 0;
    const auto hits = cfg_.prefix_cache ? find_hits(prompt_chain(q, tokens), &taken) : std::vector<Hit>{};
    return taken + std::max(0, ceil_div(n_tokens, bs) - static_cast<int32_t>(hits.size()));
  }
  n_tokens -= q.n_evicted;
  return std::max(0, ceil_div(n_tokens, bs) - static_cast<int32_t>(q.table.size())) + cow_needed(q, n_tokens);
}

// --- sequences --------------------------------------------------------------------------------

void KvManager::add_sequence(SeqId s) {
  STRATA_CHECK(!seqs_.count(s), "sequence {} is already tracked", s);
  seqs_.emplace(s, Seq{});
}

int32_t KvManager::num_tokens(SeqId s) const { return seqs_.at(s).n_tokens; }

// --- eviction within a sequence ---------------------------------------------------------------

int32_t KvManager::num_evicted(SeqId s) const { return seqs_.at(s).n_evicted; }

std::vector<int32_t> KvManager::slot_positions(SeqId s) const {
  const Seq& q = seqs_.at(s);
  std::vector<int32_t> p(q.positions.begin(), q.positions.end());
  p.reserve(static_cast<size_t>(q.n_tokens));
  for (auto i = static_cast<int32_t>(p.size()); i < q.n_tokens; ++i) p.push_back(i + q.n_evicted);
  return p;
}

std::vector<uint8_t> KvManager::pinned_slots(SeqId s) const {
  const Seq& q = seqs_.at(s);
  std::vector<uint8_t> pinned(static_cast<size_t>(q.n_tokens), 0);
  for (int32_t i = 0; i < q.n_tokens; ++i) pinned[static_cast<size_t>(i)] = q.table[static_cast<size_t>(i / geo_.block_size)].tier != Tier::kHot;
  return pinned;
}

std::optional<std::vector<std::pair<int32_t, int32_t>>> KvManager::evict(SeqId s, std::span<const int32_t> slots) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped && q.n_committed == q.n_tokens, "evict from sequence {}: swapped or not committed", s);
  std::vector<int32_t> drop(slots.begin(), slots.end());
  std::sort(drop.begin(), drop.end());
  STRATA_CHECK(std::adjacent_find(drop.begin(), drop.end()) == drop.end(), "evict: repeated slot");
  std::vector<std::pair<int32_t, int32_t>> moves;
  if (drop.empty()) return moves;
  const int32_t bs = geo_.block_size;
  const int32_t n = q.n_tokens;
  STRATA_CHECK(drop.front() >= 0 && drop.back() < n, "evict: slot out of range");
  auto hot_at = [&](int32_t slot) { return q.table[static_cast<size_t>(slot / bs)].tier == Tier::kHot; };
  for (int32_t d : drop) STRATA_CHECK(hot_at(d), "evict: slot {} of sequence {} is not in a hot block", d, s);
  const int32_t new_n = n - static_cast<int32_t>(drop.size());
  // Holes below the new count, filled in order by the kept tokens at or after it.
  std::vector<int32_t> holes, donors;
  for (int32_t d : drop) {
    if (d < new_n) holes.push_back(d);
  }
  for (int32_t i = new_n, k = 0; i < n; ++i) {
    while (k < static_cast<int32_t>(drop.size()) && drop[static_cast<size_t>(k)] < i) ++k;
    if (k < static_cast<int32_t>(drop.size()) && drop[static_cast<size_t>(k)] == i) continue;
    donors.push_back(i);
  }
  STRATA_CHECK(holes.size() == donors.size());
  for (int32_t d : donors) {
    if (!hot_at(d)) return std::nullopt;  // a warm block after a hot one (a mixed prefix hit): left alone
  }
  // Blocks written: those with holes. Shared ones get private copies first.
  std::vector<int32_t> written;
  for (int32_t h : holes) {
    if (written.empty() || written.back() != h / bs) written.push_back(h / bs);
  }
  int32_t copies = 0;
  for (int32_t b : written) copies += hot_pool_.ref_count(q.table[static_cast<size_t>(b)].slot) > 1;
  if (copies > hot_pool_.num_available()) return std::nullopt;

  const int32_t first_changed = drop.front() / bs;
  q.hash_limit = std::min(q.hash_limit, first_changed);
  if (static_cast<int32_t>(q.hashes.size()) > q.hash_limit) q.hashes.resize(static_cast<size_t>(q.hash_limit));
  if (static_cast<int32_t>(q.chain.size()) > q.hash_limit) q.chain.resize(static_cast<size_t>(q.hash_limit));
  for (int32_t b : written) {
    Loc& l = q.table[static_cast<size_t>(b)];
    if (hot_pool_.ref_count(l.slot) > 1) {
      const std::optional<int32_t> fresh = take_slot(Tier::kHot);
      STRATA_CHECK(fresh.has_value(), "a hot block was available");
      ops_.push_back(KvOp{KvOp::Kind::kCopy, slot_of(l), KvSlot{Tier::kHot, *fresh}, {}, {}, {}});
      release_ref(l);
      l = Loc{Tier::kHot, *fresh, 0};
      ++counters_.evict_copies;
    } else if (!hot_pool_.hash(l.slot).empty()) {
      forget_slot_hashes(l);  // its content changes: no longer a prefix-cache block
    }
  }
  if (!holes.empty()) {
    KvOp op{KvOp::Kind::kCompact, {}, {}, {}, {}, {}};
    for (size_t i = 0; i < holes.size(); ++i) {
      const int32_t from = donors[i], to = holes[i];
      op.moves.push_back(KvTokenMove{q.table[static_cast<size_t>(from / bs)].slot, from % bs,
                                     q.table[static_cast<size_t>(to / bs)].slot, to % bs});
      moves.emplace_back(from, to);
    }
    ops_.push_back(std::move(op));
  }
  // Positions follow the tokens.
  std::vector<int32_t> pos = slot_positions(s);
  for (const auto& [from, to] : moves) pos[static_cast<size_t>(to)] = pos[static_cast<size_t>(from)];
  pos.resize(static_cast<size_t>(new_n));
  q.positions = std::move(pos);
  // Tail blocks no longer used, tail first; the new last block, if partial, is written by the
  // next tokens: private, it leaves the prefix cache (shared, copy-on-write copies it).
  const auto n_blocks = static_cast<size_t>(ceil_div(new_n, bs));
  while (q.table.size() > n_blocks) {
    release_ref(q.table.back());
    q.table.pop_back();
  }
  if (new_n % bs != 0) {
    const Loc& last = q.table.back();
    if (last.tier == Tier::kHot && hot_pool_.ref_count(last.slot) == 1 && !hot_pool_.hash(last.slot).empty()) {
      forget_slot_hashes(last);
    }
  }
  q.n_tokens = q.n_committed = new_n;
  q.n_evicted += static_cast<int32_t>(drop.size());
  counters_.evicted_tokens += static_cast<int64_t>(drop.size());
  counters_.compacted_tokens += static_cast<int64_t>(moves.size());
  rebuild_ids(q);
  return moves;
}

int32_t KvManager::set_recall_blocks(SeqId s, int32_t n, int32_t reserve) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped && n >= 0, "recall blocks of sequence {}", s);
  while (static_cast<int32_t>(q.recall.size()) > n) {
    hot_pool_.decref(q.recall.back());
    q.recall.pop_back();
  }
  while (static_cast<int32_t>(q.recall.size()) < n && hot_pool_.num_available() > reserve) {
    const std::optional<int32_t> b = take_slot(Tier::kHot);
    if (!b) break;
    q.recall.push_back(*b);
  }
  return static_cast<int32_t>(q.recall.size());
}

std::span<const BlockId> KvManager::recall_blocks(SeqId s) const { return seqs_.at(s).recall; }

void KvManager::load_recall_block(SeqId s, int32_t i, std::shared_ptr<const std::vector<uint8_t>> image) {
  const Seq& q = seqs_.at(s);
  STRATA_CHECK(i >= 0 && static_cast<size_t>(i) < q.recall.size() && image != nullptr, "recall load {} of sequence {}", i, s);
  KvOp op{KvOp::Kind::kLoad, {}, KvSlot{Tier::kHot, q.recall[static_cast<size_t>(i)]}, {}, {}, std::move(image)};
  ops_.push_back(std::move(op));
  counters_.recalled_tokens += geo_.block_size;
}

std::span<const BlockId> KvManager::block_table(SeqId s) const {
  const Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped, "block table of swapped sequence {}", s);
  return q.ids;
}

bool KvManager::allocate(SeqId s, std::span<const TokenId> tokens, int32_t n_tokens, int32_t* cached_tokens) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped, "allocate on swapped sequence {}", s);
  if (cached_tokens) *cached_tokens = 0;
  if (blocks_needed(s, tokens, n_tokens) > hot_pool_.num_available()) return false;
  const int32_t bs = geo_.block_size;
  const bool fresh = q.table.empty() && q.n_tokens == 0 && q.n_evicted == 0;
  n_tokens -= q.n_evicted;  // slots from here on

  if (fresh && cfg_.prefix_cache) {
    counters_.prefix_queried_tokens += static_cast<int64_t>(tokens.size());
    int32_t taken = 0;
    const std::vector<Hit> hits = find_hits(prompt_chain(q, tokens), &taken);
    // Touch every hit first (RAM and cold), so that the slots taken below for cold hits and new
    // blocks can never evict one of them.
    for (const Hit& h : hits) pool(h.loc.tier).incref(h.loc.slot);
    std::map<int32_t, int32_t> fetched;  // cold slot -> RAM slot
    for (const Hit& h : hits) {
      Loc l = h.loc;
      if (l.tier == Tier::kCold) {
        const Tier content = cold_info_[static_cast<size_t>(l.slot)].content;
        auto f = fetched.find(l.slot);
        if (f == fetched.end()) {
          std::optional<int32_t> ram = take_slot(content);
          STRATA_CHECK(ram.has_value(), "find_hits promised a slot");
          const Loc cold{Tier::kCold, l.slot, 0};
          const Loc to{content, *ram, 0};
          ops_.push_back(KvOp{KvOp::Kind::kFetch, slot_of(cold), slot_of(to), {}, {}, {}});
          move_slot_hashes(cold, to);
          f = fetched.emplace(l.slot, *ram).first;
        } else {
          pool(content).incref(f->second);
        }
        cold_pool_.decref(l.slot);  // the touch above
        l = Loc{content, f->second, l.sub};
      }
      q.table.push_back(l);
      q.hashes.push_back(h.hash);
    }
    const int32_t hit = static_cast<int32_t>(q.table.size()) * bs;
    counters_.prefix_hit_tokens += hit;
    q.n_tokens = q.n_committed = hit;
    if (cached_tokens) *cached_tokens = hit;
  }

  // Copy-on-write of a shared partial block that is about to be written.
  if (cow_needed(q, n_tokens)) {
    const size_t b = static_cast<size_t>(q.n_committed / bs);
    std::optional<int32_t> fresh_block = take_slot(Tier::kHot);
    STRATA_CHECK(fresh_block.has_value(), "blocks_needed promised a block");
    ops_.push_back(KvOp{KvOp::Kind::kCopy, slot_of(q.table[b]), KvSlot{Tier::kHot, *fresh_block}, {}, {}, {}});
    release_ref(q.table[b]);
    q.table[b] = Loc{Tier::kHot, *fresh_block, 0};
  }
  // A partial last block that an eviction cut out of a registered full block, and that this
  // sequence now holds alone, is about to be written: it leaves the prefix cache.
  if (n_tokens > q.n_committed && q.n_committed % bs != 0 && q.n_evicted > 0) {
    const Loc& l = q.table[static_cast<size_t>(q.n_committed / bs)];
    if (l.tier == Tier::kHot && hot_pool_.ref_count(l.slot) == 1 && !hot_pool_.hash(l.slot).empty()) forget_slot_hashes(l);
  }
  while (static_cast<int32_t>(q.table.size()) < ceil_div(n_tokens, bs)) {
    std::optional<int32_t> b = take_slot(Tier::kHot);
    STRATA_CHECK(b.has_value(), "blocks_needed promised a block");
    q.table.push_back(Loc{Tier::kHot, *b, 0});
  }
  q.n_tokens = std::max(q.n_tokens, n_tokens);
  // The prompt's hashes stay for commit, as far as they cover allocated tokens (later ones may
  // not be the tokens that will be computed).
  if (q.chain_ready) q.chain.resize(std::min(q.chain.size(), static_cast<size_t>(n_tokens / bs)));
  rebuild_ids(q);
  return true;
}

void KvManager::commit(SeqId s, std::span<const TokenId> tokens, int32_t n_computed) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped && n_computed - q.n_evicted <= q.n_tokens && n_computed <= static_cast<int32_t>(tokens.size()),
               "commit of {} tokens, sequence has {}", n_computed, q.n_tokens + q.n_evicted);
  q.n_committed = std::max(q.n_committed, n_computed - q.n_evicted);
  const int32_t bs = geo_.block_size;
  const int32_t n_full = std::min(q.n_committed / bs, q.hash_limit);
  while (static_cast<int32_t>(q.hashes.size()) < n_full) {
    const size_t i = q.hashes.size();
    const BlockHash parent = i == 0 ? BlockHash{} : q.hashes[i - 1];
    const auto block_tokens = tokens.subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const BlockHash h = i < q.chain.size() ? q.chain[i] : chain_block_hash(parent, block_tokens, fingerprint_);
    q.hashes.push_back(h);
    if (!cfg_.prefix_cache || cache_.count(h)) continue;  // the same content is cached elsewhere
    const Loc& l = q.table[i];
    SlotHashes& sh = hashes_of(l);
    if (!sh.hash[static_cast<size_t>(l.sub)].empty()) continue;
    cache_[h] = l;
    sh.hash[static_cast<size_t>(l.sub)] = h;
    sh.parent[static_cast<size_t>(l.sub)] = parent;
    sh.tokens[static_cast<size_t>(l.sub)].assign(block_tokens.begin(), block_tokens.end());
    if (pool(l.tier).hash(l.slot).empty()) pool(l.tier).set_hash(l.slot, h);
    if (publish_ && cfg_.remote_write == KvConfig::RemoteWrite::kAlways) plan_publish(l, h);
  }
  // Sequences thinned by an eviction policy stay hot: compaction moves hot token rows.
  if (cfg_.warm_format != WarmFormat::kNone && !cfg_.evict.enabled()) plan_reencode(s, q);
}

bool KvManager::warm_tier_usable() const {
  return has_warm_tier() && cap_.warm_slots > 0 && hot_pool_.num_blocks() >= warm_span_ + 1;
}

int32_t KvManager::hot_tokens() const {
  if (!has_warm_tier()) return cfg_.hot_tokens;
  return std::min(cfg_.hot_tokens, std::max(0, (hot_pool_.num_blocks() - warm_span_ - 1) * geo_.block_size));
}

int64_t KvManager::max_sequence_tokens() const {
  const int64_t host = offload_ ? int64_t{cap_.cold_host_slots} * geo_.block_size : 0;
  return host + (warm_tier_usable() ? cap_.ram_tokens(geo_.block_size) : int64_t{hot_pool_.num_blocks()} * geo_.block_size);
}

void KvManager::set_hot_tokens(int32_t n) {
  STRATA_CHECK(n >= 0, "hot window {}", n);
  cfg_.hot_tokens = n;
}

void KvManager::plan_reencode(SeqId, Seq& q) {
  const int32_t bs = geo_.block_size;
  const int32_t old_tokens = q.n_committed - hot_tokens();
  if (old_tokens <= 0) return;
  const int32_t n_groups = old_tokens / bs / warm_span_;
  bool changed = false;
  for (int32_t g = 0; g < n_groups; ++g) {
    const size_t first = static_cast<size_t>(g * warm_span_);
    bool all_hot = true;
    for (int32_t j = 0; j < warm_span_; ++j) all_hot = all_hot && q.table[first + static_cast<size_t>(j)].tier == Tier::kHot;
    if (!all_hot) continue;
    // Reuse a warm slot that already holds exactly this group (a shared prefix encoded earlier).
    std::optional<int32_t> reuse;
    if (cfg_.prefix_cache && first + static_cast<size_t>(warm_span_) <= q.hashes.size()) {
      auto it = cache_.find(q.hashes[first]);
      if (it != cache_.end() && it->second.tier == Tier::kWarm && it->second.sub == 0) {
        bool same = true;
        for (int32_t j = 1; j < warm_span_ && same; ++j) {
          auto jt = cache_.find(q.hashes[first + static_cast<size_t>(j)]);
          same = jt != cache_.end() && jt->second == Loc{Tier::kWarm, it->second.slot, j};
        }
        if (same) reuse = it->second.slot;
      }
    }
    int32_t slot;
    if (reuse) {
      slot = *reuse;
      for (int32_t j = 0; j < warm_span_; ++j) warm_pool_.incref(slot);
    } else {
      std::optional<int32_t> w = take_slot(Tier::kWarm);
      if (!w) break;  // the warm pool is full: these blocks and later ones stay hot (the table is rebuilt below)
      slot = *w;
      for (int32_t j = 1; j < warm_span_; ++j) warm_pool_.incref(slot);
      KvOp op{KvOp::Kind::kReencode, {}, KvSlot{Tier::kWarm, slot}, {}, {}, {}};
      for (int32_t j = 0; j < warm_span_; ++j) op.hot.push_back(q.table[first + static_cast<size_t>(j)].slot);
      ops_.push_back(std::move(op));
    }
    for (int32_t j = 0; j < warm_span_; ++j) {
      Loc& entry = q.table[first + static_cast<size_t>(j)];
      const Loc warm{Tier::kWarm, slot, j};
      if (!reuse) {
        // The prefix-cache identity of the block moves with it to the warm tier.
        SlotHashes& hot_sh = hashes_of(entry);
        if (!hot_sh.hash[0].empty()) {
          SlotHashes& wsh = hashes_of(warm);
          const BlockHash h = hot_sh.hash[0];
          cache_[h] = warm;
          wsh.hash[static_cast<size_t>(j)] = h;
          wsh.parent[static_cast<size_t>(j)] = hot_sh.parent[0];
          wsh.tokens[static_cast<size_t>(j)] = std::move(hot_sh.tokens[0]);
          hot_sh.hash[0] = {};
          hot_sh.parent[0] = {};
          hot_sh.tokens[0].clear();
          hot_pool_.clear_hash(entry.slot);
          if (warm_pool_.hash(slot).empty()) warm_pool_.set_hash(slot, h);
        }
      }
      release_ref(entry);
      entry = warm;
    }
    changed = true;
  }
  if (changed) rebuild_ids(q);
}

std::vector<std::pair<int32_t, KvTier>> KvManager::cold_reads_ahead(SeqId s, std::span<const TokenId> tokens) const {
  std::vector<std::pair<int32_t, KvTier>> out;
  if (!has_cold_tier()) return out;
  auto it = seqs_.find(s);
  if (it == seqs_.end()) return out;
  const Seq& q = it->second;
  auto add = [&](const Loc& l) {
    if (l.tier != Tier::kCold) return;
    const std::pair<int32_t, KvTier> r{l.slot, cold_info_[static_cast<size_t>(l.slot)].content};
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  };
  if (q.swapped) {
    for (size_t i = 0; i < q.table.size(); ++i) {
      if (!in_place(q, i)) add(q.table[i]);
    }
  } else if (cfg_.prefix_cache && q.table.empty() && q.n_tokens == 0 && q.n_evicted == 0 && !tokens.empty()) {
    for (const BlockHash& h : prompt_chain(q, tokens)) {
      auto c = cache_.find(h);
      if (c == cache_.end()) break;
      add(c->second);
    }
  }
  return out;
}

// --- the remote tier ----------------------------------------------------------------------------

void KvManager::plan_publish(const Loc& l, const BlockHash& h) {
  // A block travels in the format it has here: a hot block, or a warm slot holding exactly it
  // (int4 slots of several blocks are not published).
  if (l.tier == Tier::kCold || span_of(l.tier) != 1) return;
  KvOp op{KvOp::Kind::kPublish, slot_of(l), {}, {}, h, {}};
  ops_.push_back(std::move(op));
}

std::vector<BlockHash> KvManager::prefix_chain(std::span<const TokenId> tokens) const {
  std::vector<BlockHash> chain;
  if (tokens.empty()) return chain;
  const int32_t bs = geo_.block_size;
  const int32_t n_full = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  chain.reserve(static_cast<size_t>(n_full));
  BlockHash parent;
  for (int32_t i = 0; i < n_full; ++i) {
    parent = chain_block_hash(parent, tokens.subspan(static_cast<size_t>(i) * bs, bs), fingerprint_);
    chain.push_back(parent);
  }
  return chain;
}

int32_t KvManager::cached_prefix_blocks(std::span<const BlockHash> chain) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(chain.size()) && is_cached(chain[static_cast<size_t>(n)])) ++n;
  return n;
}

bool KvManager::import_block(const BlockHash& parent, std::span<const TokenId> tokens, KvTier content,
                             std::shared_ptr<const std::vector<uint8_t>> bytes) {
  STRATA_CHECK(static_cast<int32_t>(tokens.size()) == geo_.block_size && bytes != nullptr);
  if (!cfg_.prefix_cache || content == Tier::kCold || span_of(content) != 1) return false;
  const BlockHash h = chain_block_hash(parent, tokens, fingerprint_);
  if (cache_.count(h) || (!parent.empty() && !cache_.count(parent))) return false;
  if (content == Tier::kHot ? hot_pool_.num_available() <= 1 : warm_pool_.num_available() == 0) return false;
  // The parent is touched while a slot is taken, so that taking it can never evict the parent.
  const std::optional<Loc> held = parent.empty() ? std::nullopt : std::optional<Loc>(cache_.at(parent));
  if (held) pool(held->tier).incref(held->slot);
  std::optional<int32_t> slot = take_slot(content);
  if (held) pool(held->tier).decref(held->slot);
  if (!slot) return false;
  const Loc l{content, *slot, 0};
  KvOp op{KvOp::Kind::kLoad, {}, slot_of(l), {}, {}, std::move(bytes)};
  ops_.push_back(std::move(op));
  SlotHashes& sh = hashes_of(l);
  cache_[h] = l;
  sh.hash[0] = h;
  sh.parent[0] = parent;
  sh.tokens[0].assign(tokens.begin(), tokens.end());
  pool(content).set_hash(*slot, h);
  pool(content).decref(*slot);  // held by the cache only: count 0, most recently used
  ++counters_.remote_imported_blocks;
  return true;
}

void KvManager::fork(SeqId parent, SeqId child) {
  const Seq& p = seqs_.at(parent);
  STRATA_CHECK(!p.swapped, "fork of swapped sequence {}", parent);
  STRATA_CHECK(!seqs_.count(child), "sequence {} is already tracked", child);
  Seq c = p;
  c.recall.clear();  // staging blocks are per sequence
  for (const Loc& l : c.table) pool(l.tier).incref(l.slot);
  seqs_.emplace(child, std::move(c));
}

void KvManager::free_sequence(SeqId s) {
  auto it = seqs_.find(s);
  STRATA_CHECK(it != seqs_.end(), "free of unknown sequence {}", s);
  Seq& q = it->second;
  for (BlockId b : q.recall) hot_pool_.decref(b);
  for (auto l = q.table.rbegin(); l != q.table.rend(); ++l) release_ref(*l);
  // A re-encode its last commit planned into a warm slot that is now free (nobody holds it, the
  // prefix cache does not keep it) would write bytes nobody reads: it is dropped.
  std::erase_if(ops_, [&](const KvOp& op) {
    return op.kind == KvOp::Kind::kReencode && warm_pool_.ref_count(op.dst.slot) == 0 && !warm_pool_.is_cached(op.dst.slot);
  });
  seqs_.erase(it);
}

// --- swapping ---------------------------------------------------------------------------------

bool KvManager::swap_out(SeqId s) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped, "sequence {} is already swapped", s);
  if (!has_cold_tier()) return false;
  // Slots only this sequence holds move; shared ones stay (moving them would free nothing).
  std::map<std::pair<Tier, int32_t>, int32_t> refs;
  for (const Loc& l : q.table) {
    if (l.tier != Tier::kCold) ++refs[{l.tier, l.slot}];  // offloaded blocks stay in their host slots
  }
  int32_t exclusive = 0;
  for (const auto& [key, n] : refs) exclusive += pool(key.first).ref_count(key.second) == n;
  // Nothing held alone: swapping would free no RAM (and a preemption that frees nothing cannot
  // make room); the caller recomputes instead, which at least drops the sharing.
  if (exclusive == 0 || exclusive > cold_pool_.num_available()) return false;
  for (BlockId b : q.recall) hot_pool_.decref(b);  // reloaded after the swap-in when recalled again
  q.recall.clear();
  std::map<std::pair<Tier, int32_t>, int32_t> moved;  // RAM slot -> cold slot
  for (const auto& [key, n] : refs) {
    if (pool(key.first).ref_count(key.second) != n) continue;
    const int32_t cold = *take_cold_slot();
    cold_info_[static_cast<size_t>(cold)] = ColdInfo{key.first, span_of(key.first)};
    const Loc from{key.first, key.second, 0};
    const Loc to{Tier::kCold, cold, 0};
    ops_.push_back(KvOp{KvOp::Kind::kSpill, slot_of(from), slot_of(to), {}, {}, {}});
    move_slot_hashes(from, to);
    for (int32_t i = 1; i < n; ++i) cold_pool_.incref(cold);
    for (int32_t i = 0; i < n; ++i) release_ref(from);
    moved[key] = cold;
  }
  for (Loc& l : q.table) {
    auto m = moved.find({l.tier, l.slot});
    if (m != moved.end()) l = Loc{Tier::kCold, m->second, l.sub};
  }
  q.swapped = true;
  rebuild_ids(q);
  ++counters_.swap_outs;
  return true;
}

uint64_t KvManager::swap_out_bytes(SeqId s) const {
  const Seq& q = seqs_.at(s);
  if (q.swapped) return 0;
  std::map<std::pair<Tier, int32_t>, int32_t> refs;
  for (const Loc& l : q.table) {
    if (l.tier != Tier::kCold) ++refs[{l.tier, l.slot}];
  }
  uint64_t bytes = 0;
  for (const auto& [key, n] : refs) {
    if (pool(key.first).ref_count(key.second) == n) bytes += slot_bytes(key.first);
  }
  return bytes;
}

int32_t KvManager::blocks_to_swap_in(SeqId s, int32_t n_tokens) const {
  const Seq& q = seqs_.at(s);
  std::map<int32_t, bool> seen;
  int32_t n = 0;
  for (size_t i = 0; i < q.table.size(); ++i) {
    const Loc& l = q.table[i];
    if (l.tier != Tier::kCold || seen.count(l.slot) || in_place(q, i)) continue;
    seen[l.slot] = true;
    n += cold_info_[static_cast<size_t>(l.slot)].content == Tier::kHot;
  }
  n_tokens = std::max(0, n_tokens - q.n_evicted);
  // Blocks that come back from the cold tier are this sequence's alone (no copy-on-write); one
  // that stayed in RAM because it is shared may need its copy (cow_needed looks at hot ones only).
  return n + std::max(0, ceil_div(n_tokens, geo_.block_size) - static_cast<int32_t>(q.table.size())) + cow_needed(q, n_tokens);
}

bool KvManager::swap_in(SeqId s) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(q.swapped, "sequence {} is not swapped", s);
  std::map<int32_t, int32_t> refs;  // cold slot -> references from this sequence
  int32_t hot_need = 0, warm_need = 0;
  for (size_t i = 0; i < q.table.size(); ++i) {
    const Loc& l = q.table[i];
    if (l.tier != Tier::kCold || in_place(q, i)) continue;
    if (refs[l.slot]++ == 0) {
      (cold_info_[static_cast<size_t>(l.slot)].content == Tier::kHot ? hot_need : warm_need) += 1;
    }
  }
  if (hot_need > hot_pool_.num_available() || warm_need > warm_pool_.num_available()) return false;
  // Touched while RAM slots are taken, so that a spill they cause never moves one of them to the
  // file (migrate_host_block) before its fetch is planned.
  for (const auto& [cold, n] : refs) cold_pool_.incref(cold);
  std::map<int32_t, Loc> placed;
  for (const auto& [cold, n] : refs) {
    const Tier content = cold_info_[static_cast<size_t>(cold)].content;
    const int32_t ram = *take_slot(content);
    const Loc from{Tier::kCold, cold, 0};
    const Loc to{content, ram, 0};
    ops_.push_back(KvOp{KvOp::Kind::kFetch, slot_of(from), slot_of(to), {}, {}, {}});
    move_slot_hashes(from, to);
    for (int32_t i = 1; i < n; ++i) pool(content).incref(ram);
    for (int32_t i = 0; i < n; ++i) cold_pool_.decref(cold);
    cold_pool_.decref(cold);  // the touch
    placed[cold] = to;
  }
  for (Loc& l : q.table) {
    if (l.tier == Tier::kCold && placed.count(l.slot)) {
      const Loc& to = placed.at(l.slot);
      l = Loc{to.tier, to.slot, l.sub};
    }
  }
  q.swapped = false;
  rebuild_ids(q);
  ++counters_.swap_ins;
  return true;
}

// --- offload ----------------------------------------------------------------------------------

bool KvManager::in_place(const Seq& q, size_t i) const {
  const Loc& l = q.table[i];
  return offload_ && is_host(l) && cold_info_[static_cast<size_t>(l.slot)].content == Tier::kHot &&
         static_cast<int64_t>(i + 1) * geo_.block_size <= q.n_committed;
}

int32_t KvManager::offload(SeqId s, int32_t n) {
  Seq& q = seqs_.at(s);
  STRATA_CHECK(!q.swapped, "offload from swapped sequence {}", s);
  if (!offload_ || n <= 0) return 0;
  const int32_t bs = geo_.block_size;
  const auto full = static_cast<size_t>(q.n_committed / bs);
  // Under an eviction policy the sinks stay hot (their blocks are never offloaded).
  const size_t first = cfg_.evict.enabled() ? static_cast<size_t>(ceil_div(cfg_.evict.sinks, bs)) : 0;
  int32_t moved = 0;
  for (size_t i = first; i < full && moved < n; ++i) {
    Loc& l = q.table[i];
    if (l.tier != Tier::kHot || hot_pool_.ref_count(l.slot) != 1) continue;
    // A free host slot, else one a host block moving down to the file frees, else the least
    // recently used cached host slot (its content dropped).
    std::optional<BlockPool::Allocation> a;
    if (std::optional<int32_t> h = migrate_host_block()) a = BlockPool::Allocation{*h, {}};
    else a = cold_pool_.allocate_preferred();
    if (!a) break;
    note_cold_write(a->id);
    if (!a->evicted.empty()) {  // a cached host slot is reused: its prefix-cache content is dropped
      forget_slot_hashes(Loc{Tier::kCold, a->id, 0});
      ++counters_.evicted_blocks;
    }
    cold_info_[static_cast<size_t>(a->id)] = ColdInfo{Tier::kHot, 1};
    const Loc to{Tier::kCold, a->id, 0};
    ops_.push_back(KvOp{KvOp::Kind::kDemote, slot_of(l), slot_of(to), {}, {}, {}});
    move_slot_hashes(l, to);  // the same bytes: still the same prefix-cache block
    release_ref(l);
    l = to;
    ++moved;
  }
  if (moved > 0) {
    counters_.offloaded_blocks += moved;
    rebuild_ids(q);
  }
  return moved;
}

int32_t KvManager::host_blocks(SeqId s) const {
  const Seq& q = seqs_.at(s);
  int32_t n = 0;
  for (const Loc& l : q.table) n += l.tier == Tier::kCold;
  return n;
}

void KvManager::note_attended(SeqId s) {
  const int32_t n = host_blocks(s);
  counters_.host_attended_blocks += n;
  counters_.host_attended_bytes += static_cast<uint64_t>(n) * cap_.hot_block_bytes;
}

// --- the plan -----------------------------------------------------------------------------------

std::vector<KvOp> KvManager::take_ops() {
  std::vector<KvOp> out;
  out.swap(ops_);
  return out;
}

void KvManager::complete(std::span<const KvOp> ops, std::span<const KvOpStatus> statuses) {
  STRATA_CHECK(ops.size() == statuses.size(), "{} ops, {} statuses", ops.size(), statuses.size());
  // Slots whose content is lost: failed ops' destinations (the storage already propagated a loss
  // along the list: a copy, re-encode or spill of lost content fails too).
  std::set<std::pair<Tier, int32_t>> lost;
  for (size_t i = 0; i < ops.size(); ++i) {
    const KvOp& op = ops[i];
    const bool ok = statuses[i] == KvOpStatus::kOk;
    switch (op.kind) {
      case KvOp::Kind::kCopy: ++counters_.cow_copies; break;
      case KvOp::Kind::kReencode: counters_.reencoded_blocks += static_cast<int64_t>(op.hot.size()); break;
      case KvOp::Kind::kDemote:
      case KvOp::Kind::kSpill:
        if (ok) {
          counters_.spill_bytes_out += slot_bytes(op.src.tier);
          ++(op.dst.slot < cap_.cold_host_slots ? counters_.host_spills : counters_.file_spills);
        }
        break;
      case KvOp::Kind::kMigrate:
        if (ok) {
          ++counters_.file_migrations;
          counters_.migrated_bytes += slot_bytes(op.content);
        }
        break;
      case KvOp::Kind::kFetch:
        if (ok) {
          counters_.spill_bytes_in += slot_bytes(op.dst.tier);
          ++(op.src.slot < cap_.cold_host_slots ? counters_.host_fetches : counters_.file_fetches);
        } else {
          ++counters_.cold_read_failures;
        }
        break;
      case KvOp::Kind::kLoad:
        if (!ok) ++counters_.remote_load_failures;
        break;
      case KvOp::Kind::kPublish:
        continue;  // nothing was written here (the remote pool counts what it stores)
      case KvOp::Kind::kCompact:
        if (!ok) {
          for (const KvTokenMove& m : op.moves) {
            lost.insert({Tier::kHot, m.dst_block});
            forget_slot_hashes(Loc{Tier::kHot, m.dst_block, 0});
          }
        }
        continue;
    }
    if (ok) continue;
    lost.insert({op.dst.tier, op.dst.slot});
    forget_slot_hashes(Loc{op.dst.tier, op.dst.slot, 0});  // never a prefix hit again
  }
  if (lost.empty()) return;
  for (const auto& [id, q] : seqs_) {
    bool hit = false;
    for (const Loc& l : q.table) hit = hit || lost.count({l.tier, l.slot}) > 0;
    if (hit && std::find(lost_.begin(), lost_.end(), id) == lost_.end()) lost_.push_back(id);
  }
}

std::vector<SeqId> KvManager::take_lost_sequences() {
  std::vector<SeqId> out;
  out.swap(lost_);
  return out;
}

// --- accounting -------------------------------------------------------------------------------

KvStats KvManager::stats() const {
  KvStats st = counters_;
  auto tier = [](const BlockPool& p, uint64_t slot_bytes) {
    KvTierStats t;
    t.slots = p.num_blocks();
    t.used = p.num_used();
    t.cached = p.num_cached();
    t.free = p.num_free();
    t.bytes_total = static_cast<uint64_t>(t.slots) * slot_bytes;
    t.bytes_used = static_cast<uint64_t>(t.used + t.cached) * slot_bytes;
    return t;
  };
  st.hot = tier(hot_pool_, slot_bytes(Tier::kHot));
  if (cfg_.warm_format != WarmFormat::kNone) st.warm = tier(warm_pool_, slot_bytes(Tier::kWarm));
  if (has_cold_tier()) {
    st.cold = tier(cold_pool_, cap_.cold_slot_bytes);
    // Host slots are the cold pool's preferred range, file slots the rest.
    const BlockPool::RangeCounts h = cold_pool_.preferred_counts();
    const int32_t n_host = std::min(cap_.cold_host_slots, cap_.cold_slots);
    st.host.slots = n_host;
    st.host.used = h.used;
    st.host.cached = h.cached;
    st.host.free = h.free;
    st.host.bytes_total = static_cast<uint64_t>(n_host) * cap_.cold_slot_bytes;
    st.host.bytes_used = static_cast<uint64_t>(h.used + h.cached) * cap_.cold_slot_bytes;
    st.file.slots = st.cold.slots - st.host.slots;
    st.file.used = st.cold.used - st.host.used;
    st.file.cached = st.cold.cached - st.host.cached;
    st.file.free = st.cold.free - st.host.free;
    st.file.bytes_total = st.cold.bytes_total - st.host.bytes_total;
    st.file.bytes_used = st.cold.bytes_used - st.host.bytes_used;
  }
  for (const auto& [id, q] : seqs_) {
    ++st.sequences;
    if (q.swapped) {
      ++st.swapped_sequences;
      continue;
    }
    st.tokens_stored += q.n_tokens;
    for (const Loc& l : q.table) st.host_resident_blocks += l.tier == Tier::kCold;
    st.fragmented_slots += static_cast<int64_t>(q.table.size()) * geo_.block_size - q.n_tokens;
  }
  return st;
}

void KvManager::check_invariants() const {
  hot_pool_.check_invariants();
  warm_pool_.check_invariants();
  cold_pool_.check_invariants();
  // Reference counts equal the references from sequence tables.
  std::map<std::pair<Tier, int32_t>, int32_t> refs;
  for (const auto& [id, q] : seqs_) {
    STRATA_CHECK(static_cast<int64_t>(q.table.size()) * geo_.block_size >= q.n_tokens, "sequence {} table too short", id);
    STRATA_CHECK(q.n_committed <= q.n_tokens, "sequence {} committed past its tokens", id);
    STRATA_CHECK(static_cast<int32_t>(q.hashes.size()) <= q.n_committed / geo_.block_size, "sequence {} hashes", id);
    STRATA_CHECK(static_cast<int32_t>(q.hashes.size()) <= q.hash_limit, "sequence {} hashed past its first compacted block", id);
    STRATA_CHECK(static_cast<int32_t>(q.positions.size()) <= q.n_tokens && q.n_evicted >= 0, "sequence {} positions", id);
    if (q.n_evicted > 0) {
      std::vector<int32_t> pos = slot_positions(id);
      std::sort(pos.begin(), pos.end());
      STRATA_CHECK(std::adjacent_find(pos.begin(), pos.end()) == pos.end(), "sequence {} holds a position twice", id);
      STRATA_CHECK(pos.empty() || (pos.front() >= 0 && pos.back() < q.n_tokens + q.n_evicted), "sequence {} position range", id);
    }
    STRATA_CHECK(!q.swapped || q.recall.empty(), "swapped sequence {} holds recall blocks", id);
    for (BlockId b : q.recall) {
      STRATA_CHECK(b >= 0 && b < hot_pool_.num_blocks(), "sequence {} has a bad recall block", id);
      ++refs[{Tier::kHot, b}];
    }
    for (const Loc& l : q.table) {
      const size_t i = static_cast<size_t>(&l - q.table.data());
      STRATA_CHECK(q.swapped || l.tier != Tier::kCold || in_place(q, i),
                   "running sequence {} has a cold block {} that attention cannot read in place", id, i);
      STRATA_CHECK(l.slot >= 0 && l.slot < pool(l.tier).num_blocks(), "sequence {} has a bad slot", id);
      STRATA_CHECK(l.sub >= 0 && l.sub < (l.tier == Tier::kCold ? cold_info_[static_cast<size_t>(l.slot)].n_subs : span_of(l.tier)));
      ++refs[{l.tier, l.slot}];
    }
    if (!q.swapped) {
      STRATA_CHECK(q.ids.size() == q.table.size(), "sequence {} ids out of date", id);
      for (size_t i = 0; i < q.table.size(); ++i) STRATA_CHECK(q.ids[i] == encode(q.table[i]), "sequence {} id {}", id, i);
    }
  }
  for (Tier t : {Tier::kHot, Tier::kWarm, Tier::kCold}) {
    const BlockPool& p = pool(t);
    for (int32_t slot = 0; slot < p.num_blocks(); ++slot) {
      auto it = refs.find({t, slot});
      const int32_t n = it == refs.end() ? 0 : it->second;
      STRATA_CHECK(p.ref_count(slot) == n, "slot {} of tier {} has count {} but {} references", slot,
                   static_cast<int>(t), p.ref_count(slot), n);
      // The pool's hash flag is set exactly when some sub-block is registered in the cache.
      const SlotHashes& sh = hashes_of(Loc{t, slot, 0});
      bool any = false;
      for (size_t i = 0; i < sh.hash.size(); ++i) {
        if (sh.hash[i].empty()) continue;
        any = true;
        auto c = cache_.find(sh.hash[i]);
        STRATA_CHECK(c != cache_.end() && c->second == (Loc{t, slot, static_cast<int32_t>(i)}),
                     "slot {} of tier {} holds a hash the map does not point back from", slot, static_cast<int>(t));
      }
      STRATA_CHECK(any == !p.hash(slot).empty(), "slot {} of tier {}: cache flag disagrees", slot, static_cast<int>(t));
      STRATA_CHECK(n > 0 || !any || p.is_cached(slot), "unreferenced hashed slot {} is not in the LRU", slot);
    }
  }
  // Every hash in the map points to a slot that still holds that content.
  for (const auto& [h, l] : cache_) {
    const SlotHashes& sh = hashes_of(l);
    STRATA_CHECK(static_cast<size_t>(l.sub) < sh.hash.size() && sh.hash[static_cast<size_t>(l.sub)] == h,
                 "map entry points to a slot without that hash");
    const auto& toks = sh.tokens[static_cast<size_t>(l.sub)];
    STRATA_CHECK(static_cast<int32_t>(toks.size()) == geo_.block_size, "registered block without its tokens");
    STRATA_CHECK(chain_block_hash(sh.parent[static_cast<size_t>(l.sub)], toks, fingerprint_) == h,
                 "registered block no longer matches its hash");
  }
  for (const KvOp& op : ops_) {
    if (op.kind == KvOp::Kind::kMigrate) {
      STRATA_CHECK(op.src.tier == Tier::kCold && op.dst.tier == Tier::kCold && op.src.slot < cap_.cold_host_slots &&
                       op.dst.slot >= cap_.cold_host_slots,
                   "a migration goes from a host slot to a file slot");
    }
    if (op.kind == KvOp::Kind::kCopy) STRATA_CHECK(hot_pool_.ref_count(op.dst.slot) > 0, "copy into a free block");
    if (op.kind == KvOp::Kind::kReencode) STRATA_CHECK(warm_pool_.ref_count(op.dst.slot) > 0 || warm_pool_.is_cached(op.dst.slot));
  }
}

}  // namespace strata
