#include "sched/scheduler_config.h"

namespace strata {

std::optional<SchedulingPolicy> scheduling_policy_from_name(std::string_view s) {
  if (s == "fcfs") return SchedulingPolicy::kFcfs;
  if (s == "priority") return SchedulingPolicy::kPriority;
  if (s == "fair") return SchedulingPolicy::kFair;
  if (s == "drf") return SchedulingPolicy::kDrf;
  return std::nullopt;
}

std::optional<PreemptMode> preempt_mode_from_name(std::string_view s) {
  if (s == "auto") return PreemptMode::kAuto;
  if (s == "swap") return PreemptMode::kSwap;
  if (s == "recompute") return PreemptMode::kRecompute;
  return std::nullopt;
}

std::string_view scheduling_policy_name(SchedulingPolicy p) {
  switch (p) {
    case SchedulingPolicy::kFcfs: return "fcfs";
    case SchedulingPolicy::kPriority: return "priority";
    case SchedulingPolicy::kFair: return "fair";
    case SchedulingPolicy::kDrf: return "drf";
  }
  return "?";
}

std::string_view preempt_mode_name(PreemptMode p) {
  switch (p) {
    case PreemptMode::kAuto: return "auto";
    case PreemptMode::kSwap: return "swap";
    case PreemptMode::kRecompute: return "recompute";
  }
  return "?";
}

std::optional<QosClass> qos_class_from_name(std::string_view s) {
  if (s == "interactive") return QosClass::kInteractive;
  if (s == "batch") return QosClass::kBatch;
  return std::nullopt;
}

std::string_view qos_class_name(QosClass c) {
  switch (c) {
    case QosClass::kInteractive: return "interactive";
    case QosClass::kBatch: return "batch";
  }
  return "?";
}

}  // namespace strata
