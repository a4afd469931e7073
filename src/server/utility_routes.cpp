#include "server/utility_routes.h"

#include <fmt/format.h>

#include <limits>

#include "server/chat_api.h"
#include "server/json_fields.h"
#include "server/status_page.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::server {
namespace {

void respond_json(HttpResponse& res, const Json& j) {
  res.status = 200;
  res.set_content(dump_json(j), "application/json");
}

Json model_object(const ServerContext& ctx) {
  Json m = Json::object();
  m["id"] = ctx.model_name();
  m["object"] = "model";
  m["created"] = ctx.started_unix();
  m["owned_by"] = "strata";
  return m;
}

}  // namespace

void respond_error(HttpResponse& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(dump_json(error.body()), "application/json");
}

void handle_health(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
  if (ctx.draining()) return respond_error(res, ApiError(503, "the server is shutting down", "", "shutting_down"));
  if (!ctx.host().ready()) return respond_error(res, ApiError(503, "the model is loading", "", "model_loading"));
  respond_json(res, Json{{"status", "ok"}});
}

void handle_metrics(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
  std::optional<EngineStats> stats;
  if (ctx.host().ready()) stats = ctx.host().engine().stats();
  res.status = 200;
  res.set_content(ctx.metrics().render(stats ? &*stats : nullptr, stats.has_value(), ctx.in_flight()),
                  "text/plain; version=0.0.4; charset=utf-8");
}

void handle_status_page(ServerContext&, const HttpRequest&, HttpResponse& res) {
  const std::string_view html = status_page_html();
  res.status = 200;
  res.set_content(std::string(html), "text/html; charset=utf-8");
}

void handle_models(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
  respond_json(res, Json{{"object", "list"}, {"data", Json::array({model_object(ctx)})}});
}

void handle_model(ServerContext& ctx, std::string_view id, HttpResponse& res) {
  if (!ctx.accepts_model(id))
    throw ApiError(404, fmt::format("The model `{}` does not exist (this server serves `{}`)", id, ctx.model_name()), "model",
                   "model_not_found");
  respond_json(res, model_object(ctx));
}

void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const Json body = parse_json_object(req.body);
  const std::optional<std::string> content = get_string(body, "content");
  if (!content) throw bad_request("'content' is required", "content");
  const bool add_special = get_bool(body, "add_special").value_or(false);
  const bool parse_special = get_bool(body, "parse_special").value_or(true);
  const bool with_pieces = get_bool(body, "with_pieces").value_or(false);
  const Tokenizer& tok = ctx.host().tokenizer();
  const std::vector<TokenId> ids = tok.encode(*content, add_special, parse_special);
  Json tokens = Json::array();
  for (TokenId id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string& piece = tok.token_to_piece(id, true);
    Json p;
    if (utf8::is_valid(piece)) {
      p = piece;
    } else {
      p = Json::array();
      for (unsigned char c : piece) p.push_back(static_cast<int>(c));
    }
    tokens.push_back(Json{{"id", id}, {"piece", std::move(p)}});
  }
  respond_json(res, Json{{"tokens", std::move(tokens)}});
}

void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const Json body = parse_json_object(req.body);
  const Json* tokens = find_field(body, "tokens");
  if (tokens == nullptr) throw bad_request("'tokens' is required", "tokens");
  if (!tokens->is_array()) throw bad_request(fmt::format("'tokens' must be an array of token ids, got {}", json_type_name(*tokens)), "tokens");
  const Tokenizer& tok = ctx.host().tokenizer();
  std::vector<TokenId> ids;
  ids.reserve(tokens->size());
  for (const Json& v : *tokens) {
    const int64_t id = as_int(v, "tokens", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    if (!tok.is_valid(static_cast<TokenId>(id)))
      throw bad_request(fmt::format("tokens: token {} is outside the vocabulary (0..{})", id, tok.n_vocab() - 1), "tokens");
    ids.push_back(static_cast<TokenId>(id));
  }
  respond_json(res, Json{{"content", tok.decode(ids, /*render_special=*/false)}});
}

void handle_apply_template(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const Json body = parse_json_object(req.body);
  const Json messages = normalize_messages(find_field(body, "messages"));
  const bool add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  respond_json(res, Json{{"prompt", render_chat_prompt(ctx.host().chat_template(), messages, add_generation_prompt)}});
}

}  // namespace strata::server
