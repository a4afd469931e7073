#include "kv/kv_evictor.h"

#include <algorithm>

#include "core/check.h"
#include "kv/kv_manager.h"

namespace strata {

KvEvictor::KvEvictor(KvManager& kv, const EvictConfig& cfg, int32_t n_layer, int32_t n_head)
    : kv_(kv), policy_(make_evict_policy(cfg)) {
  STRATA_CHECK(policy_ != nullptr && n_layer > 0 && n_head > 0, "KvEvictor without a policy");
  norm_ = 1.0f / static_cast<float>(int64_t{n_layer} * n_head);
}

KvEvictor::~KvEvictor() = default;

int32_t KvEvictor::budget_for(int32_t requested) const {
  const int32_t b = policy_->config().budget;
  return requested > 0 ? std::min(b, requested) : b;
}

KvEvictor::StepImportance KvEvictor::prepare(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt) {
  if (start == 0) store_.reset(s);  // a fresh start (or a recompute): no scores yet
  StepImportance r;
  const std::optional<int32_t> from = policy_->importance_rows(start, n_new, n_prompt);
  if (!from || *from >= n_new) {
    store_.clear_step(s);
    return r;
  }
  r.buffer = store_.step_buffer(s, kv_.num_tokens(s));
  r.from_row = *from;
  return r;
}

int32_t KvEvictor::after_step(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt, int32_t budget) {
  const int32_t n = kv_.num_tokens(s);
  const std::span<float> scores = store_.scores(s, n);
  const std::span<const float> raw = store_.step_mass(s);
  std::vector<int32_t> positions;
  if (!raw.empty()) {
    STRATA_CHECK(static_cast<int32_t>(raw.size()) == n, "importance of {} slots, sequence holds {}", raw.size(), n);
    std::vector<float> mass(raw.begin(), raw.end());
    for (float& m : mass) m *= norm_;
    // Only snapkv's pooling at the prompt's end reads positions.
    if (policy_->kind() == EvictKind::kSnapKv && start < n_prompt) positions = kv_.slot_positions(s);
    policy_->update_scores(scores, mass, positions, start, n_new, n_prompt);
    store_.clear_step(s);
  }
  if (n <= budget || !policy_->may_evict(start, n_new, n_prompt)) return 0;
  if (positions.empty()) positions = kv_.slot_positions(s);
  const std::vector<uint8_t> pinned = kv_.pinned_slots(s);
  const EvictCandidates c{positions, policy_->kind() == EvictKind::kWindow ? std::span<const float>{} : scores, pinned};
  const std::vector<int32_t> drop = policy_->choose(c, budget);
  if (drop.empty()) return 0;
  const auto moves = kv_.evict(s, drop);
  if (!moves) {
    ++stats_.deferred;
    return 0;
  }
  store_.apply_moves(s, *moves, kv_.num_tokens(s));
  stats_.evicted_tokens += static_cast<int64_t>(drop.size());
  stats_.moved_tokens += static_cast<int64_t>(moves->size());
  ++stats_.compactions;
  return static_cast<int32_t>(drop.size());
}

}  // namespace strata
