#include "sched/fairness.h"

#include <algorithm>
#include <limits>

namespace strata {

VirtualTokenCounter::VirtualTokenCounter(double w_in, double w_out, std::map<std::string, double> weights)
    : w_in_(w_in), w_out_(w_out), weights_(std::move(weights)) {}

double VirtualTokenCounter::weight(const std::string& tenant) const {
  auto it = weights_.find(tenant);
  return it == weights_.end() || !(it->second > 0) ? 1.0 : it->second;
}

void VirtualTokenCounter::on_backlogged(const std::string& tenant, const std::set<std::string>& backlogged) {
  double lowest = std::numeric_limits<double>::infinity();
  for (const auto& t : backlogged) {
    if (t != tenant) lowest = std::min(lowest, counter(t));
  }
  if (lowest != std::numeric_limits<double>::infinity()) counters_[tenant] = std::max(counter(tenant), lowest);
}

void VirtualTokenCounter::charge(const std::string& tenant, int64_t prompt_tokens, int64_t generated_tokens) {
  counters_[tenant] += (w_in_ * static_cast<double>(prompt_tokens) + w_out_ * static_cast<double>(generated_tokens)) /
                       weight(tenant);
}

double VirtualTokenCounter::counter(const std::string& tenant) const {
  auto it = counters_.find(tenant);
  return it == counters_.end() ? 0.0 : it->second;
}

}  // namespace strata
