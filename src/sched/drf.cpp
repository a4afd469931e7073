#include "sched/drf.h"

#include <algorithm>

#include "core/check.h"

namespace strata {

DrfAccount::DrfAccount(std::map<std::string, double> weights, double window_steps)
    : weights_(std::move(weights)), alpha_(1.0 / window_steps) {
  STRATA_CHECK(window_steps >= 1);
}

double DrfAccount::weight(const std::string& tenant) const {
  auto it = weights_.find(tenant);
  return it == weights_.end() || !(it->second > 0) ? 1.0 : it->second;
}

void DrfAccount::end_step(const std::map<std::string, int64_t>& tokens, int32_t token_budget,
                          const std::map<std::string, int64_t>& blocks, int32_t total_blocks) {
  for (auto& [t, c] : compute_) c *= 1 - alpha_;
  for (const auto& [t, n] : tokens) {
    compute_[t] += alpha_ * static_cast<double>(n) / std::max(1, token_budget);
  }
  // Forget tenants whose share has decayed to nothing, so the maps stay as small as the tenants
  // with recent work.
  std::erase_if(compute_, [](const auto& kv) { return kv.second < 1e-9; });
  kv_.clear();
  for (const auto& [t, n] : blocks) {
    if (n > 0) kv_[t] = static_cast<double>(n) / std::max(1, total_blocks);
  }
}

void DrfAccount::add_blocks(const std::string& tenant, int64_t delta_blocks, int32_t total_blocks) {
  kv_[tenant] = std::max(0.0, kv_[tenant] + static_cast<double>(delta_blocks) / std::max(1, total_blocks));
}

DrfShares DrfAccount::shares(const std::string& tenant) const {
  DrfShares s;
  if (auto it = kv_.find(tenant); it != kv_.end()) s.kv = it->second;
  if (auto it = compute_.find(tenant); it != compute_.end()) s.compute = it->second;
  s.dominant = std::max(s.kv, s.compute) / weight(tenant);
  return s;
}

double DrfAccount::jain_index(const std::vector<std::string>& tenants) const {
  if (tenants.size() < 2) return 1.0;
  double sum = 0, sum_sq = 0;
  for (const auto& t : tenants) {
    const double x = dominant_share(t);
    sum += x;
    sum_sq += x * x;
  }
  return sum_sq > 0 ? sum * sum / (static_cast<double>(tenants.size()) * sum_sq) : 1.0;
}

}  // namespace strata
