// Knobs of the continuous-batching scheduler (the --max-batched-tokens, --max-seqs, --preempt,
// --scheduling, --batch-wait-ms, --qos-* ... flags). Thread-safety: a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "sched/sequence.h"

namespace strata {

enum class SchedulingPolicy : uint8_t { kFcfs, kPriority, kFair, kDrf };
enum class PreemptMode : uint8_t { kAuto, kSwap, kRecompute };  // auto: by measured costs (sched/preempt_cost.h)

std::optional<SchedulingPolicy> scheduling_policy_from_name(std::string_view s);
std::optional<PreemptMode> preempt_mode_from_name(std::string_view s);
std::string_view scheduling_policy_name(SchedulingPolicy p);
std::string_view preempt_mode_name(PreemptMode p);
std::optional<QosClass> qos_class_from_name(std::string_view s);  // "interactive", "batch"
std::string_view qos_class_name(QosClass c);

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
  std::map<std::string, double> tenant_weights;  // service share per tenant (default 1), fair and drf
  // drf: the compute share of a tenant is its tokens per step as a share of max_batched_tokens,
  // averaged exponentially over this many steps.
  double drf_window_steps = 32;
  double batch_wait_ms = 0;          // wait for more arrivals when idle (engine)
  // QoS: the TTFT deadline of each class (indexed by QosClass), which orders a class's queue, and
  // how long the engine may wait to fill a batch when only batch-class work waits.
  std::array<double, kNumQosClasses> qos_ttft_ms{1000, 60000};
  double qos_window_ms = 50;
};

}  // namespace strata
