// What the scheduler knows of one sequence: its tokens (prompt, then generated), how many have KV
// computed, and its place in the request's life cycle. A request with n samples has n sequences
// that share the prompt's blocks. Thread-safety: engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/types.h"

namespace strata {

// Service class of a request (--qos): interactive work is scheduled, admitted and protected before
// batch work; each class has a TTFT deadline that orders its queue (earliest deadline first).
enum class QosClass : uint8_t { kInteractive, kBatch };
inline constexpr size_t kNumQosClasses = 2;

enum class SeqStatus : uint8_t {
  kWaiting,   // not admitted yet, or preempted by recompute (KV freed)
  kRunning,   // admitted: has KV in RAM and is scheduled every step it can be
  kSwapped,   // preempted by swap: KV in the cold tier
};

struct Sequence {
  SeqId id = 0;
  RequestId request = 0;
  int32_t sample_index = 0;       // 0..n-1 within the request
  int32_t priority = 0;           // higher runs first (--scheduling priority)
  std::string tenant;             // fairness group (--scheduling fair|drf)
  QosClass qos = QosClass::kInteractive;
  // The first token is due by then (arrival + the class's TTFT deadline); orders a class's queue.
  // max(): no deadline (queue order by arrival).
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point arrival;      // of the request; orders FCFS queues
  uint64_t arrival_seq = 0;       // tie-break for equal arrival times

  std::vector<TokenId> tokens;    // prompt + generated
  int32_t n_prompt = 0;
  int32_t max_tokens = 0;         // generated tokens at most (already clipped)
  int32_t num_computed = 0;       // tokens whose KV is in the cache
  SeqStatus status = SeqStatus::kWaiting;
  int32_t n_fork_children = 0;    // n - 1 for the first sequence of a request until the prompt is done

  int32_t preemptions = 0;
  int32_t kv_losses = 0;          // times its KV could not be read back from the cold tier
  bool protected_from_preemption = false;  // resumed and has not made progress since
  int32_t progress_mark = 0;      // num_computed when it was resumed
  bool computed_any = false;      // a forward pass has computed some of its tokens
  // Prompt tokens the prefix cache served this sequence: what its admission attached from the
  // cache, as long as it had computed nothing itself (usage.prompt_tokens_details.cached_tokens).
  int32_t cached_tokens = 0;
  // Eviction (--kv-evict): the request's own budget of cached tokens, if it asked for a lower one
  // than --kv-budget (0: none asked).
  int32_t kv_budget = 0;

  int32_t n_generated() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
  int32_t n_uncomputed() const { return static_cast<int32_t>(tokens.size()) - num_computed; }
  bool prompt_done() const { return num_computed >= n_prompt; }
};

}  // namespace strata
