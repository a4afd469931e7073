// Weighted dominant resource fairness (Ghodsi et al., NSDI'11, "Dominant Resource Fairness") over
// tenants for --scheduling drf. A tenant's use is a vector of two resources:
//   KV       blocks its sequences hold now, as a share of the hot pool;
//   compute  tokens computed for it per step, as a share of the step's token budget, averaged
//            exponentially over a window of steps (steps are the scheduler's unit of time, so the
//            accounting is deterministic and independent of how fast a step runs).
// Its dominant share is the larger of the two divided by its weight; the scheduler fills
// progressively: the tenant with the smallest dominant share is admitted and scheduled first, and
// the one with the largest loses a sequence first when blocks run out. Jain's index over the
// dominant shares of the tenants with work says how equal they are (1 = equal).
// Thread-safety: engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct DrfShares {
  double kv = 0;       // blocks held / hot blocks
  double compute = 0;  // tokens per step (averaged) / token budget
  double dominant = 0; // max(kv, compute) / weight
};

class DrfAccount {
 public:
  // Precondition: window_steps >= 1.
  DrfAccount(std::map<std::string, double> weights, double window_steps);

  double weight(const std::string& tenant) const;

  // The end of a step: `tokens` computed per tenant in it (out of `token_budget`), and the KV
  // blocks each tenant holds after it (out of `total_blocks`). Tenants absent from both decay.
  void end_step(const std::map<std::string, int64_t>& tokens, int32_t token_budget,
                const std::map<std::string, int64_t>& blocks, int32_t total_blocks);

  // Blocks held changed within a step (an admission): the KV share of `tenant` moves by
  // `delta_blocks` until the next end_step.
  void add_blocks(const std::string& tenant, int64_t delta_blocks, int32_t total_blocks);

  DrfShares shares(const std::string& tenant) const;
  double dominant_share(const std::string& tenant) const { return shares(tenant).dominant; }

  // Jain's fairness index (sum x)^2 / (n sum x^2) over the dominant shares of `tenants`; 1 when
  // fewer than two or all zero.
  double jain_index(const std::vector<std::string>& tenants) const;

 private:
  std::map<std::string, double> weights_;
  double alpha_;  // EWMA weight of the newest step
  std::map<std::string, double> compute_;  // averaged share of the token budget
  std::map<std::string, double> kv_;       // share of the hot blocks
};

}  // namespace strata
