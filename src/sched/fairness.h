// Fair sharing between tenants with the Virtual Token Counter (Sheng et al., OSDI'24, "Fairness in
// Serving Large Language Models"): each tenant's counter grows by the service it receives,
// w_in per prompt token and w_out per generated token (divided by the tenant's weight); the
// scheduler admits the backlogged tenant with the smallest counter first, and a tenant that
// becomes backlogged again is lifted to the smallest counter among the backlogged ones, so idle
// time cannot be banked. Thread-safety: engine thread only.
#pragma once

#include <map>
#include <set>
#include <string>

namespace strata {

class VirtualTokenCounter {
 public:
  VirtualTokenCounter(double w_in, double w_out, std::map<std::string, double> weights = {});

  // A tenant that had no backlog has some now: lift it (VTC's counter lift).
  void on_backlogged(const std::string& tenant, const std::set<std::string>& backlogged);
  // Service received: prompt tokens computed and tokens generated.
  void charge(const std::string& tenant, int64_t prompt_tokens, int64_t generated_tokens);
  double counter(const std::string& tenant) const;

 private:
  double weight(const std::string& tenant) const;
  double w_in_, w_out_;
  std::map<std::string, double> weights_;
  std::map<std::string, double> counters_;
};

}  // namespace strata
