// POST /v1/completions: OpenAI's legacy completions API. `prompt` is a string (tokenized with the
// vocabulary's BOS rule, special-token text parsed) or an array of token ids (used as given);
// `logprobs` is the legacy integer 0..5 (the tokens, token_logprobs, top_logprobs and
// text_offset lists); `echo` puts the prompt text before the completion. Responses are
// "text_completion" objects, streamed or not.
// Thread-safety: the functions are pure; see ResponseFormatter for the formatter.
#pragma once

#include <memory>

#include "server/request_fields.h"
#include "server/response_formatter.h"

namespace strata::server {

// Reads and validates the request; throws ApiError 400 naming the field.
GenerationRequest parse_completion_request(const Json& body, const Tokenizer& tokenizer);

// The formatter for the responses of `req`; ctx.tokenizer must be set.
std::unique_ptr<ResponseFormatter> make_completion_formatter(const ResponseContext& ctx, const GenerationRequest& req);

}  // namespace strata::server
