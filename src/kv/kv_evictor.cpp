#include "kv/kv_evictor.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "core/check.h"
#include "kv/kv_manager.h"

namespace strata {

KvEvictor::KvEvictor(KvManager& kv, const EvictConfig& cfg, int32_t n_layer, int32_t n_head,
                     std::span<const KvLayerView> views, Backend* backend, std::unique_ptr<ColdStore> recall_spill)
    : kv_(kv), policy_(make_evict_policy(cfg)), n_layer_(n_layer), n_head_(n_head), views_(views), backend_(backend) {
  STRATA_CHECK(policy_ != nullptr && n_layer > 0 && n_head > 0, "KvEvictor without a policy");
  norm_ = 1.0f / static_cast<float>(int64_t{n_layer} * n_head);
  if (cfg.recall) {
    const KvGeometry& g = kv.geometry();
    STRATA_CHECK(static_cast<int32_t>(views.size()) == n_layer && g.n_layer == n_layer, "--kv-recall needs the layer views");
    head_dim_ = g.head_dim;
    recall_ = std::make_unique<RecallStore>(n_layer, g.block_size, g.n_kv_heads, g.head_dim, g.dtype,
                                            cfg.recall_memory_bytes, std::move(recall_spill));
  }
}

KvEvictor::~KvEvictor() = default;

int32_t KvEvictor::budget_for(int32_t requested) const {
  const int32_t b = elastic() ? elastic_ : policy_->config().budget;
  return requested > 0 ? std::min(b, requested) : b;
}

int32_t KvEvictor::update_elastic(int32_t longest) {
  const EvictConfig& c = policy_->config();
  const int32_t total = kv_.num_hot_blocks();
  if (total <= 0) return elastic_;
  const double usage = static_cast<double>(total - kv_.num_available_blocks()) / total;
  const int32_t bs = kv_.block_size();
  if (usage > c.auto_high) {
    // The longest sequences give up a quarter of what they hold (whole blocks), down to the floor.
    const int64_t from = std::min<int64_t>(elastic_, longest);
    const int64_t shrunk = from * 3 / 4 / bs * bs;
    elastic_ = static_cast<int32_t>(std::max<int64_t>(c.min_auto_budget(), shrunk));
  } else if (usage < c.auto_low && elastic_ != INT32_MAX) {
    const int64_t grown = int64_t{elastic_} + std::max<int64_t>(bs, elastic_ / 4);
    // Past what the whole pool holds a budget bounds nothing.
    elastic_ = grown >= int64_t{total} * bs ? INT32_MAX : static_cast<int32_t>(grown);
  }
  elastic_min_ = std::min(elastic_min_, elastic_);
  return elastic_;
}

int32_t KvEvictor::evict_to(SeqId s, int32_t n_computed, int32_t n_prompt, int32_t budget) {
  if (kv_.num_tokens(s) <= budget || !policy_->may_evict(n_computed, 0, n_prompt)) return 0;
  store_.scores(s, kv_.num_tokens(s));  // slots never scored yet score 0
  return evict_down(s, {}, budget);
}

KvEvictor::RecallSeq* KvEvictor::recall_seq(SeqId s) {
  if (!recall_) return nullptr;
  RecallSeq& r = recall_seqs_[s];
  const std::span<const BlockId> ids = kv_.recall_blocks(s);
  if (!std::equal(ids.begin(), ids.end(), r.ids.begin(), r.ids.end())) {
    // Released (a swap-out) or changed behind our back: nothing staged is known any more.
    r.ids.assign(ids.begin(), ids.end());
    r.held.assign(ids.size(), -1);
    r.active.assign(ids.size(), 0);
  }
  return &r;
}

KvEvictor::StepImportance KvEvictor::prepare(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt) {
  if (start == 0) store_.reset(s);  // a fresh start (or a recompute): no scores yet
  StepImportance r;
  int32_t off = 0;
  if (RecallSeq* rs = recall_seq(s)) {
    off = static_cast<int32_t>(std::count(rs->active.begin(), rs->active.end(), uint8_t{1})) * kv_.block_size();
    rs->offset = off;
    rs->query.assign(static_cast<size_t>(n_layer_) * n_head_ * head_dim_, 0.0f);
    rs->query_set = true;
    r.query = rs->query.data();
    r.kv_offset = off;
  }
  const std::optional<int32_t> from = policy_->importance_rows(start, n_new, n_prompt);
  if (!from || *from >= n_new) {
    store_.clear_step(s);
    return r;
  }
  r.buffer = store_.step_buffer(s, off + kv_.num_tokens(s));
  r.from_row = *from;
  return r;
}

void KvEvictor::attention_table(SeqId s, std::vector<BlockId>& out) const {
  out.clear();
  if (recall_) {
    auto it = recall_seqs_.find(s);
    if (it != recall_seqs_.end()) {
      for (size_t i = 0; i < it->second.ids.size(); ++i) {
        if (it->second.active[i]) out.push_back(it->second.ids[i]);
      }
    }
  }
  const std::span<const BlockId> t = kv_.block_table(s);
  out.insert(out.end(), t.begin(), t.end());
}

int32_t KvEvictor::kv_slot(SeqId s, int32_t pos) const {
  int32_t off = 0;
  if (recall_) {
    auto it = recall_seqs_.find(s);
    if (it != recall_seqs_.end()) off = it->second.offset;
  }
  return off + pos - kv_.num_evicted(s);
}

std::vector<int32_t> KvEvictor::staged(SeqId s) const {
  std::vector<int32_t> out;
  if (!recall_) return out;
  auto it = recall_seqs_.find(s);
  if (it == recall_seqs_.end()) return out;
  for (size_t i = 0; i < it->second.held.size(); ++i) {
    if (it->second.active[i]) out.push_back(it->second.held[i]);
  }
  return out;
}

int32_t KvEvictor::after_step(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt, int32_t budget) {
  const int32_t n = kv_.num_tokens(s);
  const std::span<float> scores = store_.scores(s, n);
  const std::span<const float> raw = store_.step_mass(s);
  std::vector<int32_t> positions;
  if (!raw.empty()) {
    const size_t off = recall_ ? static_cast<size_t>(recall_seqs_[s].offset) : 0;
    STRATA_CHECK(raw.size() == off + static_cast<size_t>(n), "importance of {} slots, sequence holds {} (+{} recalled)",
                 raw.size(), n, off);
    // The recalled slots' mass is not kept: those tokens are scored by their summaries.
    std::vector<float> mass(raw.begin() + static_cast<long>(off), raw.end());
    for (float& m : mass) m *= norm_;
    // Only snapkv's pooling at the prompt's end reads positions.
    if (policy_->kind() == EvictKind::kSnapKv && start < n_prompt) positions = kv_.slot_positions(s);
    policy_->update_scores(scores, mass, positions, start, n_new, n_prompt);
    store_.clear_step(s);
  }
  int32_t evicted = 0;
  if (n > budget && policy_->may_evict(start, n_new, n_prompt)) evicted = evict_down(s, std::move(positions), budget);
  if (recall_) recall_after_step(s);
  return evicted;
}

int32_t KvEvictor::evict_down(SeqId s, std::vector<int32_t> positions, int32_t budget) {
  if (positions.empty()) positions = kv_.slot_positions(s);
  const std::span<const float> scores = store_.scores(s);
  const std::vector<uint8_t> pinned = kv_.pinned_slots(s);
  const EvictCandidates c{positions, policy_->kind() == EvictKind::kWindow ? std::span<const float>{} : scores, pinned};
  const std::vector<int32_t> drop = policy_->choose(c, budget);
  if (drop.empty()) return 0;
  // The dropped rows are still in place (the compaction is only planned): demote them from the
  // table as it was.
  std::vector<BlockId> table;
  if (recall_) table.assign(kv_.block_table(s).begin(), kv_.block_table(s).end());
  const auto moves = kv_.evict(s, drop);
  if (!moves) {
    ++stats_.deferred;
    return 0;
  }
  if (recall_) {
    std::vector<int32_t> drop_pos;
    drop_pos.reserve(drop.size());
    for (int32_t d : drop) drop_pos.push_back(positions[static_cast<size_t>(d)]);
    if (backend_ != nullptr) {
      const int32_t bs = kv_.block_size();
      std::vector<int32_t> slots;
      slots.reserve(drop.size());
      for (int32_t d : drop) slots.push_back(table[static_cast<size_t>(d / bs)] * bs + d % bs);
      std::vector<uint8_t> rows(static_cast<size_t>(2 * static_cast<int64_t>(drop.size()) * n_layer_ *
                                                    views_.front().token_stride_bytes()));
      backend_->kv_read_rows(views_, slots, rows.data());
      recall_->demote_rows(s, rows.data(), drop_pos);
    } else {
      recall_->demote(s, views_, table, drop, drop_pos);
    }
    stats_.demoted_tokens += static_cast<int64_t>(drop.size());
  }
  store_.apply_moves(s, *moves, kv_.num_tokens(s));
  stats_.evicted_tokens += static_cast<int64_t>(drop.size());
  stats_.moved_tokens += static_cast<int64_t>(moves->size());
  ++stats_.compactions;
  return static_cast<int32_t>(drop.size());
}

void KvEvictor::recall_after_step(SeqId s) {
  RecallSeq* rs = recall_seq(s);
  if (!rs->query_set) return;  // no forward pass filled a query since the last choice
  rs->query_set = false;
  rs->offset = 0;
  const int32_t nb = recall_->num_blocks(s);
  const int32_t want = std::min(policy_->config().recall_blocks, nb);
  std::vector<int32_t> chosen;
  recall_->forget_dropped(s);
  if (want > 0 && policy_->config().recall_recent) {
    for (int32_t b = nb - 1; b >= 0 && static_cast<int32_t>(chosen.size()) < want; --b) {
      if (recall_->available(s, b)) chosen.push_back(b);
    }
  } else if (want > 0) {
    chosen = RecallStore::top_k(recall_->estimate(s, rs->query, n_head_, want), want);
    std::erase_if(chosen, [&](int32_t b) { return !recall_->available(s, b); });
  }
  // Staging blocks: as many as chosen, while the pool has blocks to spare (they never take the
  // last 1/16 of it, which the sequences' own tokens need first); shrinking keeps the first ones
  // (and what they hold).
  const int32_t held = kv_.set_recall_blocks(s, static_cast<int32_t>(chosen.size()), std::max(1, kv_.num_hot_blocks() / 16));
  const std::span<const BlockId> ids = kv_.recall_blocks(s);
  rs->ids.assign(ids.begin(), ids.end());
  rs->held.resize(static_cast<size_t>(held), -1);
  rs->active.assign(static_cast<size_t>(held), 0);
  if (static_cast<int32_t>(chosen.size()) > held) chosen.resize(static_cast<size_t>(held));
  std::vector<uint8_t> placed(chosen.size(), 0);
  for (size_t i = 0; i < rs->held.size(); ++i) {
    auto it = std::find(chosen.begin(), chosen.end(), rs->held[i]);
    if (it == chosen.end() || placed[static_cast<size_t>(it - chosen.begin())]) continue;
    placed[static_cast<size_t>(it - chosen.begin())] = 1;
    rs->active[i] = 1;
  }
  size_t free_i = 0;
  for (size_t c = 0; c < chosen.size(); ++c) {
    if (placed[c]) continue;
    while (rs->active[free_i]) ++free_i;  // there are as many staging blocks as chosen ones
    auto image = recall_->image(s, chosen[c]);
    if (image == nullptr) continue;  // its spilled copy could not be read: dropped, not attended
    kv_.load_recall_block(s, static_cast<int32_t>(free_i), std::move(image));
    rs->held[free_i] = chosen[c];
    rs->active[free_i] = 1;
    stats_.recalled_tokens += kv_.block_size();
  }
}

void KvEvictor::fork(SeqId parent, SeqId child) {
  store_.fork(parent, child);
  if (recall_) recall_->fork(parent, child);
}

void KvEvictor::forget(SeqId s) {
  store_.erase(s);
  if (recall_) {
    recall_->erase(s);
    recall_seqs_.erase(s);
  }
}

}  // namespace strata
