// The fields /v1/completions and /v1/chat/completions share: sampling (temperature, top_p, top_k,
// min_p, penalties, logit_bias, seed, n, stop, stop_token_ids, ignore_eos), streaming (stream,
// stream_options.include_usage), scheduling (user as the fairness tenant, priority, qos), and the
// parsed form of a generation request that the HTTP layer submits to the engine.
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <string>

#include "engine/request.h"
#include "server/api_error.h"

namespace strata::server {

enum class Api { kCompletions, kChat };

// OpenAI's default for the legacy completions API when max_tokens is absent.
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;
// OpenAI's limit on the legacy `logprobs` (the chat API allows kMaxTopLogprobs = 20).
inline constexpr int32_t kMaxCompletionLogprobs = 5;

struct GenerationRequest {
  Api api = Api::kCompletions;
  Request request;             // prompt ids, validated params, tenant (`user`), priority, qos
  bool qos_given = false;      // the body had `qos` (else the server's --qos-default applies)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions only: `echo` returns the prompt text before the completion; `logprobs` is the
  // legacy integer (-1 = absent). The chat API's logprobs live in request.params.
  bool echo = false;
  std::string prompt_text;
  int32_t completion_logprobs = -1;
};

// Reads the shared fields of `body` into `out` (api already set). max_tokens: the completions API
// reads `max_tokens`; the chat API `max_completion_tokens`, falling back to the legacy
// `max_tokens`. Throws ApiError 400 naming the field. Does not validate ranges (validate_params).
void parse_common_fields(const Json& body, GenerationRequest& out);

// SamplingParams::validate as a 400 whose param is the field the message names.
void validate_params(const SamplingParams& params, int32_t n_vocab);

// Fields some clients send that this server does not implement; rejecting them beats silently
// ignoring a request for JSON mode or tool calls. Throws 400 naming the field.
void reject_unsupported_fields(const Json& body, Api api);

}  // namespace strata::server
