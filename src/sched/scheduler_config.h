// Knobs of the continuous-batching scheduler (the --max-batched-tokens, --max-seqs, --preempt,
// --scheduling, --batch-wait-ms ... flags). Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

enum class SchedulingPolicy : uint8_t { kFcfs, kPriority, kFair };
enum class PreemptMode : uint8_t { kAuto, kSwap, kRecompute };  // auto: swap when a cold tier exists

std::optional<SchedulingPolicy> scheduling_policy_from_name(std::string_view s);
std::optional<PreemptMode> preempt_mode_from_name(std::string_view s);
std::string_view scheduling_policy_name(SchedulingPolicy p);
std::string_view preempt_mode_name(PreemptMode p);

struct SchedulerConfig {
  int32_t max_batched_tokens = 512;  // tokens per step (prompt chunks + decodes)
  int32_t max_seqs = 64;             // sequences per step
  double watermark = 0.01;           // share of KV blocks kept free when admitting new sequences
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptMode preempt = PreemptMode::kAuto;
  // Virtual token counter weights (fair): a tenant is charged w_in per prompt token computed and
  // w_out per generated token.
  double fair_w_in = 1.0;
  double fair_w_out = 2.0;
  std::map<std::string, double> tenant_weights;  // service share per tenant (default 1)
  double batch_wait_ms = 0;          // wait for more arrivals when idle (engine)
};

}  // namespace strata
