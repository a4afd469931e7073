// A generation request as the engine takes it, and the events it streams back.
// Thread-safety: plain values; RequestHandle (engine.h) is the thread-safe channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/types.h"
#include "sample/finish_reason.h"
#include "sample/sampler.h"
#include "sample/sampling_params.h"
#include "sched/sequence.h"

namespace strata {

struct EngineEvent;

struct Request {
  std::vector<TokenId> prompt;  // token ids, BOS included when wanted
  SamplingParams params;        // max_tokens, stop, n, seed, logprobs, ... (validated by submit)
  int32_t priority = 0;         // higher first with --scheduling priority
  std::string tenant;           // fairness group with --scheduling fair|drf ("" is a tenant too)
  // Its class orders and protects it (sched/scheduler.h); its TTFT deadline is the class's
  // (SchedulerConfig::qos_ttft_ms) from its arrival at the engine.
  QosClass qos = QosClass::kInteractive;
  // With --kv-evict: a budget of cached tokens lower than --kv-budget for this request (0: none).
  int32_t kv_budget = 0;
  // Called on the engine thread for every event instead of queueing it on the handle; must be
  // quick and must not call back into the engine except cancel().
  std::function<void(const EngineEvent&)> on_event;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // over all n samples
  // Prompt tokens served from the prefix cache (any tier) for this request: what its admission
  // found cached before it computed anything (Sequence::cached_tokens); never its own earlier
  // chunks, nor what a recompute after preemption finds of its own blocks. A multiple of the block
  // size; 0 with the prefix cache off.
  int32_t cached_tokens = 0;
  int32_t preemptions = 0;
};

struct EngineEvent {
  enum class Kind : uint8_t {
    kToken,   // a generated token of sample `index` (with the text it completes, maybe empty)
    kFinish,  // sample `index` ended (finish_reason); `text` holds its last held-back text
    kDone,    // every sample ended; `usage` is final. Always the last event of a request.
    kError,   // the request failed (message in `error`); kDone follows
  };
  Kind kind = Kind::kToken;
  int32_t index = 0;
  TokenId token = kNoToken;
  std::string text;
  std::optional<float> logprob;
  std::vector<TokenLogprob> top_logprobs;
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;
  Usage usage;
  Clock::time_point time;  // when the engine emitted it
};

}  // namespace strata
