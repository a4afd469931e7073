// Eviction within a sequence (--kv-evict): which of a sequence's cached tokens to drop when it
// holds more than its budget. One small class per policy behind one interface, chosen once at
// start-up (make_evict_policy):
//
//   window  StreamingLLM: the first `sinks` tokens and the most recent ones.
//   h2o     Heavy-Hitter Oracle: the sinks, the `recent` most recent tokens, and the rest of the
//           budget filled with the tokens of the highest accumulated attention (an exponential
//           moving average of the mass each token received per step, kv/importance.h).
//   snapkv  SnapKV: the prompt is kept whole while it is computed; its last `snap_window` queries
//           vote (their attention mass, summed), the votes are max-pooled over neighbouring
//           positions (± snap_pool / 2), and at the end of the prompt the sinks, the observation
//           window and the best-voted tokens are kept; from then on it behaves like h2o.
//
// The policies are pure functions of the tokens' positions and scores: they choose, the KV
// manager (KvManager::evict) drops and compacts. Thread-safety: plain values; const methods only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace strata {

enum class EvictKind : uint8_t { kNone, kWindow, kH2o, kSnapKv };
std::optional<EvictKind> evict_kind_from_name(std::string_view s);  // "none", "window", "h2o", "snapkv"
std::string_view evict_kind_name(EvictKind k);

// The --kv-evict/--kv-budget/--kv-sinks/--kv-recent flags as a value.
struct EvictConfig {
  EvictKind kind = EvictKind::kNone;
  int32_t budget = 0;        // tokens kept per sequence between steps (> 0 with a policy)
  int32_t sinks = 4;         // first tokens always kept (attention sinks)
  int32_t recent = -1;       // most recent tokens always kept (h2o, snapkv); -1: half of budget - sinks
  float ema_decay = 0.9f;    // score = decay * score + (1 - decay) * this step's mass
  int32_t snap_window = 32;  // snapkv: the prompt's last queries that vote
  int32_t snap_pool = 7;     // snapkv: max-pool width over neighbouring positions (odd)
  // --kv-recall: evicted tokens are demoted (kept outside the pool with a key summary per block of
  // block_size tokens) instead of deleted, and before each step the recall_blocks demoted blocks
  // whose summary bounds the previous step's query best are attended again (kv/recall_store.h).
  bool recall = false;
  int32_t recall_blocks = 4;  // --kv-recall-blocks: demoted blocks attended per step (top-k)
  // --kv-recall-memory: host memory the demoted blocks may take; past it the oldest go to a file
  // in --kv-spill-dir when one is given (read back when recalled), else are dropped for good.
  uint64_t recall_memory_bytes = uint64_t{1} << 30;
  // --kv-recall-choice: by the query's votes on the key summaries (quest), or the most recently
  // demoted blocks (recent: a baseline that attends as many tokens without looking at the query).
  bool recall_recent = false;
  // --kv-budget auto (budget stays 0): one elastic budget for every sequence follows the hot
  // pool's usage (KvEvictor::update_elastic): above auto_high it shrinks to 3/4 of the longest
  // sequence's tokens, never below sinks + max(recent, 0) + budget_floor; below auto_low it grows
  // by a quarter, up to unbounded.
  bool auto_budget = false;
  int32_t budget_floor = 64;  // --kv-budget-floor
  double auto_high = 0.90;
  double auto_low = 0.75;

  bool enabled() const { return kind != EvictKind::kNone; }
  // The smallest budget --kv-budget auto may reach.
  int32_t min_auto_budget() const { return sinks + std::max(recent, 0) + budget_floor; }
  // The recent window in effect for a budget.
  int32_t recent_for(int32_t budget_tokens) const;
  // Throws strata::Error naming the flag for an inconsistent configuration (a budget without a
  // policy, a policy without a budget, a budget not above what is always kept, ...).
  void validate() const;
};

// What a policy chooses from: a sequence's cached tokens in slot order.
struct EvictCandidates {
  std::span<const int32_t> positions;  // [n] position of the token in each slot (distinct)
  std::span<const float> scores;       // [n] accumulated importance (empty for window)
  std::span<const uint8_t> pinned;     // [n] 1: may not be dropped (tokens in warm blocks); may be empty
};

class EvictPolicy {
 public:
  explicit EvictPolicy(const EvictConfig& cfg) : cfg_(cfg) {}
  virtual ~EvictPolicy() = default;
  const EvictConfig& config() const { return cfg_; }
  EvictKind kind() const { return cfg_.kind; }

  // Whether a step computing rows [start, start + n_new) of a sequence whose prompt has n_prompt
  // tokens needs the attention mass of its queries, and from which row of the step (0-based):
  // nullopt = none (no cost in the kernel).
  virtual std::optional<int32_t> importance_rows(int32_t start, int32_t n_new, int32_t n_prompt) const = 0;
  // Folds a step's attention mass (per slot, already normalised to one unit per query row) into
  // the scores. `scores` holds the previous scores of the slots that existed before the step and
  // zeros for the new ones; `positions` the slots' positions. Default: the exponential moving
  // average score = decay * score + (1 - decay) * mass.
  virtual void update_scores(std::span<float> scores, std::span<const float> mass, std::span<const int32_t> positions,
                             int32_t start, int32_t n_new, int32_t n_prompt) const;
  // Whether eviction may run after such a step (snapkv keeps the prompt whole until its end).
  virtual bool may_evict(int32_t start, int32_t n_new, int32_t n_prompt) const;
  // The slots to drop so that `keep` tokens remain (ascending, distinct); fewer when pinned
  // tokens leave no other choice. Precondition: keep >= 0.
  virtual std::vector<int32_t> choose(const EvictCandidates& c, int32_t keep) const = 0;

 protected:
  // Keeps the sinks (lowest positions), the `recent` highest positions, and fills the rest of
  // `keep` with the highest scores (ties: the more recent token); pinned tokens are always kept.
  std::vector<int32_t> keep_sinks_recent_heavy(const EvictCandidates& c, int32_t keep, int32_t recent) const;

  EvictConfig cfg_;
};

class WindowPolicy final : public EvictPolicy {
 public:
  using EvictPolicy::EvictPolicy;
  std::optional<int32_t> importance_rows(int32_t, int32_t, int32_t) const override { return std::nullopt; }
  void update_scores(std::span<float>, std::span<const float>, std::span<const int32_t>, int32_t, int32_t,
                     int32_t) const override {}
  std::vector<int32_t> choose(const EvictCandidates& c, int32_t keep) const override;
};

class H2oPolicy final : public EvictPolicy {
 public:
  using EvictPolicy::EvictPolicy;
  std::optional<int32_t> importance_rows(int32_t, int32_t, int32_t) const override { return 0; }
  std::vector<int32_t> choose(const EvictCandidates& c, int32_t keep) const override;
};

class SnapKvPolicy final : public EvictPolicy {
 public:
  using EvictPolicy::EvictPolicy;
  std::optional<int32_t> importance_rows(int32_t start, int32_t n_new, int32_t n_prompt) const override;
  // While the prompt is computed: the votes add up; at its end they are replaced by their pooled
  // form; after it: the moving average.
  void update_scores(std::span<float> scores, std::span<const float> mass, std::span<const int32_t> positions,
                     int32_t start, int32_t n_new, int32_t n_prompt) const override;
  bool may_evict(int32_t start, int32_t n_new, int32_t n_prompt) const override;
  std::vector<int32_t> choose(const EvictCandidates& c, int32_t keep) const override;
  // The votes max-pooled over neighbouring positions: out[i] = max of scores[j] over the slots j
  // whose position is within snap_pool / 2 of slot i's.
  std::vector<float> pooled(std::span<const int32_t> positions, std::span<const float> scores) const;
};

// The policy of cfg.kind; nullptr for kNone. Precondition: cfg.validate() passed.
std::unique_ptr<EvictPolicy> make_evict_policy(const EvictConfig& cfg);

}  // namespace strata
