// Eviction within sequences, driven once per step (--kv-evict): asks the policy
// (kv/evict_policy.h) which of a sequence's rows need attention importance, hands the attention
// kernels a buffer for it (kv/importance.h), folds the mass into the scores after the forward pass
// and, when the sequence holds more than its budget, has the KV manager drop the chosen tokens
// and compact its blocks (KvManager::evict plans the KV ops for the next step).
//
// With --kv-recall the dropped tokens are demoted into a RecallStore (kv/recall_store.h) before
// the compaction moves them, and after each step the forward pass's query of the sequence's last
// row (ForwardSeq::query) ranks the demoted blocks by their key summaries; the best
// `recall_blocks` are loaded (kLoad) into the sequence's staging hot blocks
// (KvManager::set_recall_blocks) and attended in the next step, before the table's slots: the
// query of one decode step predicts the next one's (the loads run a step ahead). A block already
// staged is not loaded again.
//
// Used by the scheduler (sched/scheduler.h) and by `strata eval ppl`, which drives a KvManager
// directly. Thread-safety: engine thread only.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/evict_policy.h"
#include "kv/importance.h"
#include "kv/kv_types.h"
#include "kv/recall_store.h"

namespace strata {

class Backend;

class KvManager;

// Cumulative counters (for /metrics, generate --json, eval).
struct KvEvictStats {
  int64_t evicted_tokens = 0;   // tokens dropped from sequences
  int64_t compactions = 0;      // KvManager::evict calls that dropped something
  int64_t moved_tokens = 0;     // tokens moved into holes by compaction
  int64_t deferred = 0;         // evictions put off (no hot block for a private copy)
  int64_t recalled_tokens = 0;  // tokens loaded back into attention from demoted blocks (--kv-recall)
  int64_t demoted_tokens = 0;   // evicted tokens kept for recall (--kv-recall)
};

class KvEvictor {
 public:
  // `kv` outlives this. n_layer, n_head: the model's, to normalise the mass to one unit per
  // query row. With cfg.recall: `views` are the storage's layer views (KvStorage::views()), valid as
  // long as this; demoted rows are read from them through `backend` (Backend::kv_read_rows) when
  // given, else directly (host memory).
  // Precondition: cfg.validate() passed and cfg.enabled().
  // recall_spill: where demoted blocks past cfg.recall_memory_bytes go (make_recall_spill), or null.
  KvEvictor(KvManager& kv, const EvictConfig& cfg, int32_t n_layer, int32_t n_head, std::span<const KvLayerView> views = {},
            Backend* backend = nullptr, std::unique_ptr<ColdStore> recall_spill = nullptr);
  ~KvEvictor();

  const EvictConfig& config() const { return policy_->config(); }
  const EvictPolicy& policy() const { return *policy_; }
  // The budget of a sequence whose request asked for `requested` tokens (0: none asked): the
  // smaller of the two (with --kv-budget auto, of the elastic budget and the request's).
  int32_t budget_for(int32_t requested) const;

  // --kv-budget auto. The elastic budget now (INT32_MAX: unbounded, no pressure seen) and the
  // lowest it reached.
  bool elastic() const { return policy_->config().auto_budget; }
  int32_t elastic_budget() const { return elastic_; }
  int32_t elastic_min() const { return elastic_min_; }
  // Moves the elastic budget by the hot pool's usage now (see EvictConfig::auto_budget); `longest`
  // = the most tokens a running sequence holds. Returns the budget.
  int32_t update_elastic(int32_t longest);
  // Evicts s down to `budget` now, between steps (its n_computed positions all committed), as
  // after_step would; nothing while the policy may not evict yet (snapkv's prompt). Returns the
  // tokens evicted.
  int32_t evict_to(SeqId s, int32_t n_computed, int32_t n_prompt, int32_t budget);

  struct StepImportance {
    float* buffer = nullptr;  // [kv_offset + the sequence's slots after allocation] or null: no importance
    int32_t from_row = 0;     // first row of the step whose attention counts
    float* query = nullptr;   // --kv-recall: [n_layer][n_head][head_dim] for the last row's query (ForwardSeq::query)
    int32_t kv_offset = 0;    // --kv-recall: slots of recalled blocks attended before the sequence's own
  };
  // Before a forward pass that computes positions [start, start + n_new) of s (its KV slots for
  // them allocated). The buffers are valid until after_step(s, ...). The step's attention table
  // is attention_table(s) and the KV slot of its first new token kv_slot(s, start).
  StepImportance prepare(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt);
  // The block table attention reads this step: the staged recalled blocks, then
  // KvManager::block_table(s). Call after prepare().
  void attention_table(SeqId s, std::vector<BlockId>& out) const;
  // The KV slot of the token at position `pos` in that table.
  int32_t kv_slot(SeqId s, int32_t pos) const;
  // After that pass committed: folds the step's mass into the scores and, when the sequence holds
  // more than `budget` tokens and the policy allows it now, evicts down to the budget. Returns the
  // tokens evicted.
  int32_t after_step(SeqId s, int32_t start, int32_t n_new, int32_t n_prompt, int32_t budget);

  void fork(SeqId parent, SeqId child);
  void forget(SeqId s);
  std::span<const float> scores(SeqId s) const { return store_.scores(s); }
  const KvEvictStats& stats() const { return stats_; }
  const RecallStore* recall_store() const { return recall_.get(); }
  // The demoted blocks staged for s's next step (indices into the recall store), in table order.
  std::vector<int32_t> staged(SeqId s) const;

 private:
  struct RecallSeq {
    std::vector<BlockId> ids;    // KvManager::recall_blocks(s) when `held` was last updated
    std::vector<int32_t> held;   // per staging block: the demoted block loaded there (-1: none)
    std::vector<uint8_t> active; // per staging block: attended in the next step
    int32_t offset = 0;          // kv_offset of the step prepared
    std::vector<float> query;    // the step's query (ForwardSeq::query)
    bool query_set = false;
  };
  RecallSeq* recall_seq(SeqId s);  // null without recall; resets a stale staging record
  // Drops s's tokens down to `budget` by the policy (demoting them with recall); `positions`:
  // the slots' positions, or empty (then read here).
  int32_t evict_down(SeqId s, std::vector<int32_t> positions, int32_t budget);
  void recall_after_step(SeqId s);

  KvManager& kv_;
  std::unique_ptr<EvictPolicy> policy_;
  ImportanceStore store_;
  float norm_ = 1.0f;  // 1 / (n_layer * n_head)
  KvEvictStats stats_;
  int32_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0;
  std::span<const KvLayerView> views_;
  std::unique_ptr<RecallStore> recall_;
  Backend* backend_ = nullptr;  // reads demoted rows when set
  std::unordered_map<SeqId, RecallSeq> recall_seqs_;
  int32_t elastic_ = INT32_MAX, elastic_min_ = INT32_MAX;  // --kv-budget auto
};

}  // namespace strata
