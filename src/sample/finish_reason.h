// Why a sequence stopped generating, named as the OpenAI API reports it in `finish_reason`.
// Thread-safety: constants only.
#pragma once

#include <string_view>

namespace strata {

enum class FinishReason {
  kStop,    // EOS, a stop token id or a stop string
  kLength,  // max_tokens reached or the context is full
  kAbort,   // cancelled by the client or the server (vLLM's name; not an OpenAI value)
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
