#include "server/completion_api.h"

#include <fmt/format.h>

#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {
namespace {

std::vector<TokenId> prompt_ids(const Json& prompt, const Tokenizer& tok) {
  if (prompt.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  std::vector<TokenId> ids;
  ids.reserve(prompt.size());
  for (const Json& v : prompt) {
    if (v.is_string() || v.is_array())
      throw bad_request("'prompt' as a list of prompts is not supported: send one request per prompt", "prompt");
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)))
      throw bad_request(fmt::format("'prompt' must be a string or an array of token ids, found {}", v.dump()), "prompt");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= tok.n_vocab())
      throw bad_request(fmt::format("prompt: token {} is outside the vocabulary (0..{})", id, tok.n_vocab() - 1), "prompt");
    ids.push_back(static_cast<TokenId>(id));
  }
  return ids;
}

class CompletionFormatter final : public ResponseFormatter {
 public:
  CompletionFormatter(const ResponseContext& ctx, const GenerationRequest& req)
      : ctx_(ctx),
        logprobs_(req.completion_logprobs),
        echo_(req.echo),
        prompt_text_(req.prompt_text),
        offsets_(static_cast<size_t>(req.request.params.n), echo_ ? prompt_text_.size() : 0) {}

  std::optional<Json> stream_open(int32_t index) override {
    if (!echo_) return std::nullopt;
    return chunk(choice(index, prompt_text_, nullptr, std::nullopt));
  }

  Json stream_chunk(int32_t index, std::string_view text, std::span<const TokenStep> steps,
                    std::optional<FinishReason> finish) override {
    return chunk(choice(index, std::string(text), logprobs_json(index, steps), finish));
  }

  Json stream_usage(const Usage& usage) override {
    Json c = envelope();
    c["choices"] = Json::array();
    c["usage"] = usage_json(usage);
    return c;
  }

  Json response(std::span<const ChoiceResult> choices, const Usage& usage) override {
    Json r = envelope();
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const int32_t index = static_cast<int32_t>(i);
      std::string text = echo_ ? prompt_text_ + choices[i].text : choices[i].text;
      list.push_back(choice(index, std::move(text), logprobs_json(index, choices[i].steps), choices[i].finish_reason));
    }
    r["choices"] = std::move(list);
    r["usage"] = usage_json(usage);
    return r;
  }

 private:
  Json envelope() const {
    Json j = Json::object();
    j["id"] = ctx_.id;
    j["object"] = "text_completion";
    j["created"] = ctx_.created;
    j["model"] = ctx_.model;
    return j;
  }

  Json chunk(Json choice_json) const {
    Json c = envelope();
    c["choices"] = Json::array({std::move(choice_json)});
    if (ctx_.include_usage) c["usage"] = nullptr;
    return c;
  }

  static Json choice(int32_t index, std::string text, Json logprobs, std::optional<FinishReason> finish) {
    Json c = Json::object();
    c["text"] = std::move(text);
    c["index"] = index;
    c["logprobs"] = std::move(logprobs);
    set_finish_reason(c, finish);
    return c;
  }

  // The legacy logprobs object for `steps`, continuing choice `index`'s text offsets.
  Json logprobs_json(int32_t index, std::span<const TokenStep> steps) {
    if (logprobs_ < 0) return nullptr;
    const Tokenizer& tok = *ctx_.tokenizer;
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    size_t& offset = offsets_[static_cast<size_t>(index)];
    for (const TokenStep& s : steps) {
      const std::string& piece = tok.token_to_piece(s.token, true);
      tokens.push_back(piece);
      token_logprobs.push_back(reported_logprob(s.logprob));
      // OpenAI: the `logprobs` most likely tokens plus the sampled one, so up to logprobs+1.
      Json alternatives = Json::object();
      for (const TokenLogprob& t : s.top) {
        const std::string& p = tok.token_to_piece(t.token, true);
        if (!alternatives.contains(p)) alternatives[p] = reported_logprob(t.logprob);
      }
      if (!alternatives.contains(piece)) alternatives[piece] = reported_logprob(s.logprob);
      top.push_back(std::move(alternatives));
      offsets.push_back(offset);
      offset += tok.token_to_piece(s.token, false).size();
    }
    Json j = Json::object();
    j["tokens"] = std::move(tokens);
    j["token_logprobs"] = std::move(token_logprobs);
    j["top_logprobs"] = std::move(top);
    j["text_offset"] = std::move(offsets);
    return j;
  }

  ResponseContext ctx_;
  int32_t logprobs_;
  bool echo_;
  std::string prompt_text_;
  std::vector<size_t> offsets_;  // per choice: byte offset of the next token in the returned text
};

}  // namespace

GenerationRequest parse_completion_request(const Json& body, const Tokenizer& tokenizer) {
  GenerationRequest g;
  g.api = Api::kCompletions;
  reject_unsupported_fields(body, Api::kCompletions);
  const Json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) throw bad_request("'prompt' is required", "prompt");
  if (prompt->is_string()) {
    g.prompt_text = prompt->get<std::string>();
    g.request.prompt = tokenizer.encode(g.prompt_text, /*add_special=*/true, /*parse_special=*/true);
  } else if (prompt->is_array()) {
    g.request.prompt = prompt_ids(*prompt, tokenizer);
  } else {
    throw bad_request(fmt::format("'prompt' must be a string or an array of token ids, got {}", json_type_name(*prompt)), "prompt");
  }
  parse_common_fields(body, g);
  if (auto lp = get_int(body, "logprobs", 0, kMaxCompletionLogprobs)) {
    g.completion_logprobs = static_cast<int32_t>(*lp);
    g.request.params.logprobs = true;
    g.request.params.top_logprobs = g.completion_logprobs;
  }
  g.echo = get_bool(body, "echo").value_or(false);
  if (g.echo && g.completion_logprobs >= 0)
    throw bad_request("'echo' together with 'logprobs' is not supported: prompt log-probabilities are not computed", "echo");
  if (g.echo && prompt->is_array()) g.prompt_text = tokenizer.decode(g.request.prompt, /*render_special=*/false);
  validate_params(g.request.params, tokenizer.n_vocab());
  return g;
}

std::unique_ptr<ResponseFormatter> make_completion_formatter(const ResponseContext& ctx, const GenerationRequest& req) {
  return std::make_unique<CompletionFormatter>(ctx, req);
}

}  // namespace strata::server
