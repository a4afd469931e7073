#include "sched/preempt_cost.h"

#include <limits>

#include "core/check.h"

namespace strata {

namespace {
double ema(double old, double sample) {
  return old > 0 ? (1 - PreemptCostModel::kEmaWeight) * old + PreemptCostModel::kEmaWeight * sample : sample;
}
}  // namespace

void PreemptCostModel::set_default_bandwidth(double bytes_per_s) {
  STRATA_CHECK(bytes_per_s > 0, "bandwidth must be positive, got {}", bytes_per_s);
  default_bw_ = bytes_per_s;
}

void PreemptCostModel::observe_transfer(uint64_t bytes, double seconds) {
  if (bytes == 0 || !(seconds > 0)) return;
  bw_ = ema(bw_, static_cast<double>(bytes) / seconds);
}

void PreemptCostModel::observe_forward(int64_t tokens, double seconds) {
  if (tokens < kMinRateTokens || !(seconds > 0)) return;
  rate_ = ema(rate_, static_cast<double>(tokens) / seconds);
}

double PreemptCostModel::recompute_seconds(int64_t tokens) const {
  if (rate_ <= 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(tokens) / rate_;
}

PreemptMode PreemptCostModel::choose(uint64_t bytes, int64_t tokens) const {
  if (tokens <= 0) return bytes == 0 ? PreemptMode::kSwap : PreemptMode::kRecompute;
  return swap_seconds(bytes) <= recompute_seconds(tokens) ? PreemptMode::kSwap : PreemptMode::kRecompute;
}

}  // namespace strata
