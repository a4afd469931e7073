// Turning what the engine generated into the JSON of an OpenAI response: one implementation per
// API (completion_api.h: "text_completion"; chat_api.h: "chat.completion[.chunk]"), behind one
// interface so that the HTTP code that collects or streams events is shared.
// Thread-safety: a formatter belongs to one request and is used by one thread at a time; it keeps
// per-choice state (text offsets) across stream chunks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/api_error.h"

namespace strata {
class Tokenizer;
}

namespace strata::server {

// OpenAI reports at least this log-probability (vLLM does the same): JSON has no -infinity, and
// tokens banned by logit_bias have logprob -inf.
inline constexpr float kMinReportedLogprob = -9999.0f;

// A generated token with what logprobs reports about it.
struct TokenStep {
  TokenId token = kNoToken;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // most likely first
};

// One choice of a non-streamed response.
struct ChoiceResult {
  std::string text;
  std::vector<TokenStep> steps;  // filled when logprobs were asked for
  FinishReason finish_reason = FinishReason::kStop;
};

// What every response object of one request shares.
struct ResponseContext {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model name
  const Tokenizer* tokenizer = nullptr;
  bool include_usage = false;  // stream: every chunk carries "usage" (null until the last)
};

class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // The chunk that opens choice `index` of a stream before any token (chat: the assistant role;
  // completions with echo: the prompt), or nullopt.
  virtual std::optional<Json> stream_open(int32_t index) = 0;
  // A chunk of choice `index` carrying `text` and the tokens it completes; `finish` is set on the
  // choice's last chunk.
  virtual Json stream_chunk(int32_t index, std::string_view text, std::span<const TokenStep> steps,
                            std::optional<FinishReason> finish) = 0;
  // With include_usage: the chunk after the last choice chunk, with no choices and the usage.
  virtual Json stream_usage(const Usage& usage) = 0;
  // The whole non-streamed response.
  virtual Json response(std::span<const ChoiceResult> choices, const Usage& usage) = 0;
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
Json usage_json(const Usage& usage);

// Sets a choice's "finish_reason" (and, for an aborted choice, "stop_reason"). finish_reason holds
// only values OpenAI defines: null while the choice goes on, "stop" (EOS, a stop token or string),
// "length" (max_tokens or the context). A choice the server ended before either (the client
// cancelled, the server drained at shutdown, or the request failed) gets "finish_reason": null
// and the extension field "stop_reason": "abort" (vLLM's choices carry a stop_reason field too);
// the other choices have no stop_reason. Clients that only know OpenAI's values see a choice
// that never finished, which is what happened.
void set_finish_reason(Json& choice, std::optional<FinishReason> finish);

// A log-probability as reported (clamped at kMinReportedLogprob).
double reported_logprob(float logprob);

}  // namespace strata::server
