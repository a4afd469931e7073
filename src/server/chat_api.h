// POST /v1/chat/completions and POST /apply-template: OpenAI chat messages rendered into a prompt
// with the model's chat template, and "chat.completion" / "chat.completion.chunk" responses
// (choices[].message or choices[].delta, logprobs.content[{token, logprob, bytes, top_logprobs}]).
//
// Messages: roles system, developer (rendered as system), user, assistant and tool; content is a
// string or a list of {"type": "text", "text": ...} parts (joined with "\n"); an assistant message
// may have null content. A template's raise_exception becomes a 400 with its message.
// Prompt tokens: the rendered text is tokenized with special-token text parsed, and BOS is added
// per the vocabulary only when the rendered text does not already start with the BOS text
// (llama.cpp's rule; templates such as Llama 3's write it themselves).
// Thread-safety: pure functions; see ResponseFormatter for the formatter.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/request_fields.h"
#include "server/response_formatter.h"

namespace strata {
class ChatTemplate;
}

namespace strata::server {

// Checks `messages` (the request field; nullptr when absent) and returns what the template sees:
// each message with role, content as a string, and name / tool_call_id when given.
Json normalize_messages(const Json* messages);

// Renders normalized messages; throws ApiError 400 for raise_exception and template errors.
std::string render_chat_prompt(const ChatTemplate& tmpl, const Json& messages, bool add_generation_prompt);

// Token ids of a rendered prompt (see the BOS rule above).
std::vector<TokenId> tokenize_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const std::string& prompt);

// Reads and validates the request; throws ApiError 400 naming the field.
GenerationRequest parse_chat_request(const Json& body, const Tokenizer& tokenizer, const ChatTemplate& tmpl);

std::unique_ptr<ResponseFormatter> make_chat_formatter(const ResponseContext& ctx, const GenerationRequest& req);

}  // namespace strata::server
