#include "server/chat_api.h"

#include <fmt/format.h>

#include <limits>

#include "chat/chat_template.h"
#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {
namespace {

std::string content_text(const Json& content, size_t i) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_request(fmt::format("'messages[{}].content' must be a string or an array of text parts, got {}", i, json_type_name(content)),
                      "messages");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    if (!part.is_object() || !part.contains("type") || part["type"] != "text")
      throw bad_request(fmt::format("'messages[{}].content[{}]': only parts of type \"text\" are supported", i, k), "messages");
    const Json* t = find_field(part, "text");
    if (t == nullptr || !t->is_string())
      throw bad_request(fmt::format("'messages[{}].content[{}].text' must be a string", i, k), "messages");
    if (k > 0) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}

Json bytes_json(const std::string& piece) {
  Json b = Json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

class ChatFormatter final : public ResponseFormatter {
 public:
  ChatFormatter(const ResponseContext& ctx, const GenerationRequest& req) : ctx_(ctx), logprobs_(req.request.params.logprobs) {}

  std::optional<Json> stream_open(int32_t index) override {
    Json delta = Json::object();
    delta["role"] = "assistant";
    delta["content"] = "";
    return chunk(choice(index, "delta", std::move(delta), nullptr, std::nullopt));
  }

  Json stream_chunk(int32_t index, std::string_view text, std::span<const TokenStep> steps,
                    std::optional<FinishReason> finish) override {
    Json delta = Json::object();
    if (!text.empty()) delta["content"] = std::string(text);
    return chunk(choice(index, "delta", std::move(delta), logprobs_json(steps), finish));
  }

  Json stream_usage(const Usage& usage) override {
    Json c = envelope("chat.completion.chunk");
    c["choices"] = Json::array();
    c["usage"] = usage_json(usage);
    return c;
  }

  Json response(std::span<const ChoiceResult> choices, const Usage& usage) override {
    Json r = envelope("chat.completion");
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      Json message = Json::object();
      message["role"] = "assistant";
      message["content"] = choices[i].text;
      list.push_back(choice(static_cast<int32_t>(i), "message", std::move(message), logprobs_json(choices[i].steps),
                            choices[i].finish_reason));
    }
    r["choices"] = std::move(list);
    r["usage"] = usage_json(usage);
    return r;
  }

 private:
  Json envelope(const char* object) const {
    Json j = Json::object();
    j["id"] = ctx_.id;
    j["object"] = object;
    j["created"] = ctx_.created;
    j["model"] = ctx_.model;
    return j;
  }

  Json chunk(Json choice_json) const {
    Json c = envelope("chat.completion.chunk");
    c["choices"] = Json::array({std::move(choice_json)});
    if (ctx_.include_usage) c["usage"] = nullptr;
    return c;
  }

  static Json choice(int32_t index, const char* key, Json body, Json logprobs, std::optional<FinishReason> finish) {
    Json c = Json::object();
    c["index"] = index;
    c[key] = std::move(body);
    c["logprobs"] = std::move(logprobs);
    set_finish_reason(c, finish);
    return c;
  }

  Json logprobs_json(std::span<const TokenStep> steps) const {
    if (!logprobs_) return nullptr;
    const Tokenizer& tok = *ctx_.tokenizer;
    Json content = Json::array();
    for (const TokenStep& s : steps) {
      const std::string& piece = tok.token_to_piece(s.token, true);
      Json entry = Json::object();
      entry["token"] = piece;
      entry["logprob"] = reported_logprob(s.logprob);
      entry["bytes"] = bytes_json(piece);
      Json top = Json::array();
      for (const TokenLogprob& t : s.top) {
        const std::string& p = tok.token_to_piece(t.token, true);
        top.push_back(Json{{"token", p}, {"logprob", reported_logprob(t.logprob)}, {"bytes", bytes_json(p)}});
      }
      entry["top_logprobs"] = std::move(top);
      content.push_back(std::move(entry));
    }
    return Json{{"content", std::move(content)}};
  }

  ResponseContext ctx_;
  bool logprobs_;
};

}  // namespace

Json normalize_messages(const Json* messages) {
  if (messages == nullptr) throw bad_request("'messages' is required", "messages");
  if (!messages->is_array()) throw bad_request(fmt::format("'messages' must be an array, got {}", json_type_name(*messages)), "messages");
  if (messages->empty()) throw bad_request("'messages' must not be empty", "messages");
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    if (!m.is_object()) throw bad_request(fmt::format("'messages[{}]' must be an object, got {}", i, json_type_name(m)), "messages");
    const Json* role = find_field(m, "role");
    if (role == nullptr) throw bad_request(fmt::format("'messages[{}].role' is required", i), "messages");
    if (!role->is_string()) throw bad_request(fmt::format("'messages[{}].role' must be a string, got {}", i, json_type_name(*role)), "messages");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw bad_request(fmt::format("'messages[{}].role': unknown role '{}' (expected system, developer, user, assistant or tool)", i,
                                    role->get<std::string>()),
                        "messages");
    if (find_field(m, "tool_calls")) throw bad_request(fmt::format("'messages[{}].tool_calls' is not supported by this server", i), "messages");
    Json n = Json::object();
    n["role"] = r;
    const Json* content = find_field(m, "content");
    if (content == nullptr && r != "assistant") throw bad_request(fmt::format("'messages[{}].content' is required", i), "messages");
    n["content"] = content == nullptr ? std::string() : content_text(*content, i);
    for (const char* key : {"name", "tool_call_id"}) {
      if (const Json* v = find_field(m, key)) {
        if (!v->is_string()) throw bad_request(fmt::format("'messages[{}].{}' must be a string, got {}", i, key, json_type_name(*v)), "messages");
        n[key] = *v;
      }
    }
    out.push_back(std::move(n));
  }
  return out;
}

std::string render_chat_prompt(const ChatTemplate& tmpl, const Json& messages, bool add_generation_prompt) {
  try {
    return tmpl.apply(messages, add_generation_prompt);
  } catch (const jinja::RaiseException& e) {
    throw bad_request(e.message(), "messages");
  } catch (const jinja::TemplateError& e) {
    throw bad_request(fmt::format("the chat template failed on these messages: {}", e.what()), "messages");
  }
}

std::vector<TokenId> tokenize_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const std::string& prompt) {
  const bool has_bos = !tmpl.bos_token().empty() && prompt.starts_with(tmpl.bos_token());
  return tokenizer.encode(prompt, /*add_special=*/!has_bos, /*parse_special=*/true);
}

GenerationRequest parse_chat_request(const Json& body, const Tokenizer& tokenizer, const ChatTemplate& tmpl) {
  GenerationRequest g;
  g.api = Api::kChat;
  reject_unsupported_fields(body, Api::kChat);
  const Json messages = normalize_messages(find_field(body, "messages"));
  parse_common_fields(body, g);
  g.request.params.logprobs = get_bool(body, "logprobs").value_or(false);
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  if (auto top = get_int(body, "top_logprobs", kMin, kMax)) g.request.params.top_logprobs = static_cast<int32_t>(*top);
  validate_params(g.request.params, tokenizer.n_vocab());
  g.prompt_text = render_chat_prompt(tmpl, messages, /*add_generation_prompt=*/true);
  g.request.prompt = tokenize_chat_prompt(tokenizer, tmpl, g.prompt_text);
  return g;
}

std::unique_ptr<ResponseFormatter> make_chat_formatter(const ResponseContext& ctx, const GenerationRequest& req) {
  return std::make_unique<ChatFormatter>(ctx, req);
}

}  // namespace strata::server
