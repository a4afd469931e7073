// The routes besides generation:
//   GET  /health          200 {"status": "ok"} when ready; 503 (OpenAI error body) while loading or
//                         shutting down
//   GET  /metrics         Prometheus text (metrics.h)
//   GET  /                the status page (status_page.h)
//   GET  /v1/models       {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}
//   GET  /v1/models/{id}  that model object, 404 for another id
//   POST /tokenize        {"content", "add_special"? = false, "parse_special"? = true, "with_pieces"? = false}
//                         -> {"tokens": [ids]} or {"tokens": [{"id", "piece"}]} (llama.cpp's shape;
//                         a piece that is not valid UTF-8 is given as its byte values)
//   POST /detokenize      {"tokens": [ids]} -> {"content": text}
//   POST /apply-template  {"messages", "add_generation_prompt"? = true} -> {"prompt": text}
// Thread-safety: called concurrently from HTTP threads. Handlers that need the model require
// ctx.host().ready() (the router checks); they throw ApiError for bad requests.
#pragma once

#include "server/http_message.h"

#include "server/api_error.h"
#include "server/server_context.h"

namespace strata::server {

void handle_health(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_metrics(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_status_page(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_models(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
// `id` is the path after /v1/models/.
void handle_model(ServerContext& ctx, std::string_view id, HttpResponse& res);
void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_apply_template(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);

// Writes `error` as the response: its status and OpenAI error body.
void respond_error(HttpResponse& res, const ApiError& error);

}  // namespace strata::server
