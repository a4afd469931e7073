// Why a sequence stopped generating. kStop and kLength are OpenAI's `finish_reason` values; kAbort
// is not one: the HTTP API reports it as "finish_reason": null with "stop_reason": "abort"
// (server/response_formatter.h); `strata generate` prints its name.
// Thread-safety: constants only.
#pragma once

#include <string_view>

namespace strata {

enum class FinishReason {
  kStop,    // EOS, a stop token id or a stop string
  kLength,  // max_tokens reached or the context is full
  kAbort,   // cancelled by the client, drained or failed by the server (vLLM's name)
};

constexpr std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";  // only for values cast from out-of-range integers
}

}  // namespace strata
