// Eviction within sequences, driven once per step (--kv-evict): asks the policy
// (kv/evict_policy.h) which of a sequence's rows need attention importance, hands the attention
// kernels a buffer for it (kv/importance.h), folds the mass into the scores after the forward pass
// and, when the sequence holds more than its budget, has the KV manager drop the chosen tokens
// and compact its blocks (KvManager::evict plans the KV ops for the next step).
//
// Used by the scheduler (sched/scheduler.h) and by `strata eval ppl`, which drives a KvManager
// directly. Thread-safety: engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/ids.h"
#include "kv/evict_policy.h"
#include "kv/importance.h"

namespace strata {

class KvManager;

// Cumulative counters (for /metrics, generate --json, eval).
struct KvEvictStats {
  int64_t evicted_tokens = 0;   // tokens dropped from sequences
  int64_t compactions = 0;      // KvManager::evict calls that dropped something
  int64_t moved_tokens = 0;     // tokens moved into holes by compaction
  int64_t deferred = 0;         // evictions put off (no hot block for a private copy)
  int64_t recalled_tokens = 0;  // tokens brought back from the cold tier (--kv-recall; not built yet: 0)
};

class KvEvictor {
 public:
  // `kv` outlives this. n_layer, n_head: the model's, to normalise the mass to one unit per
  // query row. Precondition: cfg.validate() passed and cfg.enabled().
  KvEvictor(KvManager& kv, const EvictConfig& cfg, int32_t n_layer, int32_t n_head);
  ~KvEvictor();

  const EvictConfig& config() const { return policy_->config(); }
  const EvictPolicy& policy() const { return *policy_; }
  // The budget of a sequence whose request asked for `requested` tokens (0: none asked): the
  // smaller of the two.
  int32_t budget_for(int32_t requested) const;

  struct StepImportance {
    float* buffer = nullptr;  // [the sequence's slots after allocation] or null: no importance
    int32_t from_row = 0;     // first row of the step whose attention counts
  };
  // Before a forward pass that computes positions [start, start + n_new) of s (its KV slots for
  // them allocated). The buffer is valid until after_step(s, ...).
  StepImportance prepare(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt);
  // After that pass committed: folds the step's mass into the scores and, when the sequence holds
  // more than `budget` tokens and the policy allows it now, evicts down to the budget. Returns the
  // tokens evicted.
  int32_t after_step(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt, int32_t budget);

  void fork(SeqId parent, SeqId child) { store_.fork(parent, child); }
  void forget(SeqId s) { store_.erase(s); }
  std::span<const float> scores(SeqId s) const { return store_.scores(s); }
  const KvEvictStats& stats() const { return stats_; }

 private:
  KvManager& kv_;
  std::unique_ptr<EvictPolicy> policy_;
  ImportanceStore store_;
  float norm_ = 1.0f;  // 1 / (n_layer * n_head)
  KvEvictStats stats_;
};

}  // namespace strata
