#include "kv/evict_policy.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/error.h"

namespace strata {

std::optional<EvictKind> evict_kind_from_name(std::string_view s) {
  if (s == "none") return EvictKind::kNone;
  if (s == "window") return EvictKind::kWindow;
  if (s == "h2o") return EvictKind::kH2o;
  if (s == "snapkv") return EvictKind::kSnapKv;
  return std::nullopt;
}

std::string_view evict_kind_name(EvictKind k) {
  switch (k) {
    case EvictKind::kNone: return "none";
    case EvictKind::kWindow: return "window";
    case EvictKind::kH2o: return "h2o";
    case EvictKind::kSnapKv: return "snapkv";
  }
  return "?";
}

int32_t EvictConfig::recent_for(int32_t budget_tokens) const {
  if (kind == EvictKind::kWindow) return std::max(0, budget_tokens - sinks);
  if (recent >= 0) return std::min(recent, std::max(0, budget_tokens - sinks));
  return std::max(0, budget_tokens - sinks) / 2;
}

void EvictConfig::validate() const {
  if (sinks < 0) fail("--kv-sinks must be >= 0, got {}", sinks);
  if (recent < -1) fail("--kv-recent must be >= 0, got {}", recent);
  if (!(ema_decay >= 0.0f && ema_decay < 1.0f)) fail("the importance decay must be in [0, 1), got {}", ema_decay);
  if (snap_window < 1) fail("the snapkv observation window must be >= 1, got {}", snap_window);
  if (snap_pool < 1 || snap_pool % 2 == 0) fail("the snapkv pooling width must be odd and >= 1, got {}", snap_pool);
  if (recall_blocks < 1) fail("--kv-recall-blocks must be >= 1, got {}", recall_blocks);
  if (recall_memory_bytes == 0) fail("--kv-recall-memory must be positive");
  if (budget_floor < 1) fail("--kv-budget-floor must be >= 1, got {}", budget_floor);
  if (auto_budget) {
    if (kind == EvictKind::kNone) fail("--kv-budget auto needs an eviction policy (--kv-evict window|h2o|snapkv)");
    if (budget != 0) fail("--kv-budget auto takes no number");
    if (!(auto_low > 0 && auto_low < auto_high && auto_high <= 1)) fail("the elastic budget's thresholds must be 0 < low < high <= 1");
    return;
  }
  if (kind == EvictKind::kNone) {
    if (recall) fail("--kv-recall needs an eviction policy (--kv-evict window|h2o|snapkv) and --kv-budget");
    if (budget != 0) fail("--kv-budget needs an eviction policy (--kv-evict window|h2o|snapkv)");
    return;
  }
  if (budget <= 0) fail("--kv-evict {} needs --kv-budget N (tokens kept per sequence, > 0)", evict_kind_name(kind));
  if (budget <= sinks) fail("--kv-budget ({}) must be larger than --kv-sinks ({})", budget, sinks);
  if (kind != EvictKind::kWindow && recent >= 0 && sinks + recent >= budget) {
    fail("--kv-budget ({}) must be larger than --kv-sinks + --kv-recent ({}): no room is left for heavy hitters", budget,
         sinks + recent);
  }
}

// --- shared -------------------------------------------------------------------------------------

void EvictPolicy::update_scores(std::span<float> scores, std::span<const float> mass, std::span<const int32_t>,
                                int32_t, int32_t, int32_t) const {
  STRATA_CHECK(scores.size() == mass.size());
  const float d = cfg_.ema_decay, w = 1.0f - cfg_.ema_decay;
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = d * scores[i] + w * mass[i];
}

bool EvictPolicy::may_evict(int32_t, int32_t, int32_t) const { return true; }

namespace {
// Slots sorted by position.
std::vector<int32_t> by_position(std::span<const int32_t> positions) {
  std::vector<int32_t> order(positions.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return positions[a] < positions[b]; });
  return order;
}

std::vector<int32_t> complement(const std::vector<uint8_t>& keep) {
  std::vector<int32_t> drop;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) drop.push_back(static_cast<int32_t>(i));
  }
  return drop;
}
}  // namespace

std::vector<int32_t> EvictPolicy::keep_sinks_recent_heavy(const EvictCandidates& c, int32_t keep, int32_t recent) const {
  const auto n = static_cast<int32_t>(c.positions.size());
  STRATA_CHECK(keep >= 0 && (c.scores.empty() || static_cast<int32_t>(c.scores.size()) == n));
  if (n <= keep) return {};
  std::vector<uint8_t> kept(static_cast<size_t>(n), 0);
  int32_t n_kept = 0;
  auto take = [&](int32_t slot) {
    if (!kept[static_cast<size_t>(slot)]) {
      kept[static_cast<size_t>(slot)] = 1;
      ++n_kept;
    }
  };
  if (!c.pinned.empty()) {
    for (int32_t i = 0; i < n; ++i) {
      if (c.pinned[static_cast<size_t>(i)]) take(i);
    }
  }
  // This runs after every decode step of a sequence over its budget, so it costs O(n) (selection)
  // rather than a sort of all n slots: only the sinks are put in position order.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const auto earlier = [&](int32_t a, int32_t b) { return c.positions[static_cast<size_t>(a)] < c.positions[static_cast<size_t>(b)]; };
  const auto it = [&](int32_t i) { return order.begin() + i; };
  const int32_t s = std::clamp(cfg_.sinks, 0, n);
  const int32_t r = std::clamp(recent, 0, n - s);  // beyond n - s the recent window holds every non-sink
  if (s > 0) {
    std::nth_element(it(0), it(s - 1), it(n), earlier);
    std::sort(it(0), it(s), earlier);
  }
  for (int32_t i = 0; i < s && n_kept < keep; ++i) take(order[static_cast<size_t>(i)]);
  if (r > 0) {
    // The r latest of the non-sinks are the r latest of all.
    std::nth_element(it(s), it(n - r), it(n), earlier);
    std::vector<int32_t> untaken;
    untaken.reserve(static_cast<size_t>(r));
    for (int32_t i = n - r; i < n; ++i) {
      if (!kept[static_cast<size_t>(order[static_cast<size_t>(i)])]) untaken.push_back(order[static_cast<size_t>(i)]);
    }
    // Cut short by the budget (window's recent window is the whole budget): the latest that fit.
    const auto fit = static_cast<size_t>(std::max(0, keep - n_kept));
    if (untaken.size() > fit) {
      std::nth_element(untaken.begin(), untaken.begin() + static_cast<long>(fit), untaken.end(),
                       [&](int32_t a, int32_t b) { return earlier(b, a); });
      untaken.resize(fit);
    }
    for (int32_t slot : untaken) take(slot);
  }
  if (n_kept < keep && !c.scores.empty()) {
    // Heavy hitters: highest score first, the later position on ties (a total order: positions
    // are distinct, so the chosen set does not depend on the selection algorithm).
    std::vector<int32_t> rest;
    rest.reserve(static_cast<size_t>(n - n_kept));
    for (int32_t i = 0; i < n; ++i) {
      if (!kept[static_cast<size_t>(i)]) rest.push_back(i);
    }
    const auto need = static_cast<size_t>(std::min<int32_t>(keep - n_kept, static_cast<int32_t>(rest.size())));
    if (need < rest.size()) {
      std::nth_element(rest.begin(), rest.begin() + static_cast<long>(need), rest.end(), [&](int32_t a, int32_t b) {
        const float sa = c.scores[static_cast<size_t>(a)], sb = c.scores[static_cast<size_t>(b)];
        return sa != sb ? sa > sb : c.positions[static_cast<size_t>(a)] > c.positions[static_cast<size_t>(b)];
      });
    }
    for (size_t i = 0; i < need; ++i) take(rest[i]);
  }
  if (n_kept < keep) {
    // Whatever is still free (no scores, or a recent window smaller than the rest): the most recent.
    std::sort(order.begin(), order.end(), earlier);
    for (int32_t i = n - 1; i >= 0 && n_kept < keep; --i) take(order[static_cast<size_t>(i)]);
  }
  return complement(kept);
}

// --- the policies ---------------------------------------------------------------------------------

std::vector<int32_t> WindowPolicy::choose(const EvictCandidates& c, int32_t keep) const {
  const EvictCandidates no_scores{c.positions, {}, c.pinned};
  return keep_sinks_recent_heavy(no_scores, keep, keep);
}

std::vector<int32_t> H2oPolicy::choose(const EvictCandidates& c, int32_t keep) const {
  return keep_sinks_recent_heavy(c, keep, cfg_.recent_for(keep));
}

std::optional<int32_t> SnapKvPolicy::importance_rows(int32_t start, int32_t n_new, int32_t n_prompt) const {
  if (start >= n_prompt) return 0;  // decoding: every row, as h2o
  const int32_t first_voter = std::max(0, n_prompt - cfg_.snap_window);
  if (start + n_new <= first_voter) return std::nullopt;  // no voter in this chunk: nothing to compute
  return std::max(0, first_voter - start);
}

void SnapKvPolicy::update_scores(std::span<float> scores, std::span<const float> mass, std::span<const int32_t> positions,
                                 int32_t start, int32_t n_new, int32_t n_prompt) const {
  if (start >= n_prompt) {
    EvictPolicy::update_scores(scores, mass, positions, start, n_new, n_prompt);
    return;
  }
  STRATA_CHECK(scores.size() == mass.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] += mass[i];
  if (start + n_new >= n_prompt) {
    const std::vector<float> p = pooled(positions, scores);
    std::copy(p.begin(), p.end(), scores.begin());
  }
}

bool SnapKvPolicy::may_evict(int32_t start, int32_t n_new, int32_t n_prompt) const { return start + n_new >= n_prompt; }

std::vector<int32_t> SnapKvPolicy::choose(const EvictCandidates& c, int32_t keep) const {
  return keep_sinks_recent_heavy(c, keep, cfg_.recent_for(keep));
}

std::vector<float> SnapKvPolicy::pooled(std::span<const int32_t> positions, std::span<const float> scores) const {
  STRATA_CHECK(positions.size() == scores.size());
  const std::vector<int32_t> order = by_position(positions);
  const auto n = static_cast<int32_t>(order.size());
  const int32_t half = cfg_.snap_pool / 2;
  std::vector<float> out(scores.size(), 0.0f);
  // A window over the slots sorted by position, bounded by position distance (holes shrink it).
  for (int32_t i = 0, lo = 0; i < n; ++i) {
    const int32_t p = positions[static_cast<size_t>(order[static_cast<size_t>(i)])];
    while (positions[static_cast<size_t>(order[static_cast<size_t>(lo)])] < p - half) ++lo;
    float m = 0.0f;
    for (int32_t j = lo; j < n && positions[static_cast<size_t>(order[static_cast<size_t>(j)])] <= p + half; ++j) {
      m = std::max(m, scores[static_cast<size_t>(order[static_cast<size_t>(j)])]);
    }
    out[static_cast<size_t>(order[static_cast<size_t>(i)])] = m;
  }
  return out;
}

std::unique_ptr<EvictPolicy> make_evict_policy(const EvictConfig& cfg) {
  switch (cfg.kind) {
    case EvictKind::kNone: return nullptr;
    case EvictKind::kWindow: return std::make_unique<WindowPolicy>(cfg);
    case EvictKind::kH2o: return std::make_unique<H2oPolicy>(cfg);
    case EvictKind::kSnapKv: return std::make_unique<SnapKvPolicy>(cfg);
  }
  return nullptr;
}

}  // namespace strata
