#include "server/http_server.h"

#include <httplib.h>

#include <fmt/format.h>

#include <functional>

#include "core/error.h"
#include "server/auth.h"
#include "server/generation_handler.h"
#include "server/utility_routes.h"

namespace strata::server {
namespace {

using Handler = std::function<void(ServerContext&, const httplib::Request&, httplib::Response&)>;

// Answers for the statuses httplib produces itself (no handler wrote a body).
ApiError default_error(int status, const ServerConfig& cfg) {
  switch (status) {
    case 400:
      return ApiError(400, "malformed HTTP request");
    case 404:
      return ApiError(404, "not found", "", "not_found");
    case 413:
      return ApiError(413, fmt::format("the request body is larger than {} bytes (--max-body-bytes)", cfg.max_body_bytes), "",
                      "request_too_large");
    case 414:
      return ApiError(414, "the request URI is too long", "", "uri_too_long");
    default:
      return ApiError(status, fmt::format("HTTP error {}", status));
  }
}

bool has_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") || (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

RequestOutcome outcome_of_status(int status) {
  return status == 429 || status == 503 ? RequestOutcome::kRejected : RequestOutcome::kError;
}

}  // namespace

struct HttpServer::Route {
  const char* method = "GET";  // "GET" also serves HEAD
  const char* path = "";
  bool prefix = false;       // matches any longer path that starts with `path`
  bool needs_key = true;     // 401 without the API key (when one is set)
  bool needs_model = true;   // 503 while the model loads
  bool generation = false;   // counted in strata_requests_total; 503 while draining
  Handler handler;
};

namespace {

const std::vector<HttpServer::Route>& routes();

}  // namespace

HttpServer::HttpServer(ServerContext& ctx) : ctx_(ctx), server_(std::make_unique<httplib::Server>()) {
  const ServerConfig& cfg = ctx_.config();
  const size_t threads = static_cast<size_t>(std::max(1, cfg.http_threads));
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(cfg.max_body_bytes);
  server_->set_tcp_nodelay(true);

  // Routing before the body is read: unknown paths and wrong methods never cost a body read.
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const Route* found = nullptr;
    bool path_known = false;
    std::string allow;
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    for (const Route& r : routes()) {
      const std::string_view path(r.path);
      const bool match = r.prefix ? std::string_view(req.path).starts_with(path) && req.path.size() > path.size() : req.path == path;
      if (!match) continue;
      path_known = true;
      if (!allow.empty()) allow += ", ";
      allow += r.method;
      if (method == r.method) found = &r;
    }
    if (found == nullptr) {
      // The unread body would be taken for the next request on this connection.
      if (has_body(req)) res.set_header("Connection", "close");
      if (!path_known) {
        respond_error(res, ApiError(404, fmt::format("unknown route: {} {}", req.method, req.path), "", "not_found"));
      } else {
        res.set_header("Allow", allow);
        respond_error(res, ApiError(405, fmt::format("method {} is not allowed on {} (allowed: {})", req.method, req.path, allow), "",
                                    "method_not_allowed"));
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    if (std::string_view(found->method) == "POST") return httplib::Server::HandlerResponse::Unhandled;  // read the body first
    dispatch(*found, req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  for (const Route& r : routes()) {
    if (std::string_view(r.method) != "POST") continue;
    server_->Post(r.path, [this, &r](const httplib::Request& req, httplib::Response& res) { dispatch(r, req, res); });
  }
  // Called for every response with status >= 400, including ours: fill in only empty bodies.
  server_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) respond_error(res, default_error(res.status, ctx_.config()));
    return httplib::Server::HandlerResponse::Handled;
  }));
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    respond_error(res, ApiError(500, fmt::format("internal error: {}", what)));
  });
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::authorized(const httplib::Request& req) const {
  const std::string& key = ctx_.config().api_key;
  return key.empty() || bearer_matches(req.get_header_value("Authorization"), key);
}

void HttpServer::dispatch(const Route& route, const httplib::Request& req, httplib::Response& res) {
  if (ctx_.draining()) res.set_header("Connection", "close");
  try {
    if (route.needs_key && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      throw ApiError(401,
                     req.has_header("Authorization") ? "incorrect API key provided"
                                                     : "missing API key: send it as 'Authorization: Bearer <key>'",
                     "", "invalid_api_key");
    }
    if (route.needs_model) {
      if (ctx_.draining() && route.generation) throw ApiError(503, "the server is shutting down", "", "shutting_down");
      if (!ctx_.host().ready()) throw ApiError(503, "the model is loading; retry when /health answers 200", "", "model_loading");
    }
    route.handler(ctx_, req, res);
  } catch (const ApiError& e) {
    respond_error(res, e);
    if (route.generation) ctx_.metrics().count_request(outcome_of_status(e.status()));
  } catch (const std::exception& e) {
    respond_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
    if (route.generation) ctx_.metrics().count_request(RequestOutcome::kError);
  }
}

void HttpServer::bind() {
  const ServerConfig& cfg = ctx_.config();
  // httplib's default also sets SO_REUSEPORT, which would let a second server share a busy port
  // (and steal half its connections); SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (cfg.port == 0) {
    port_ = server_->bind_to_any_port(cfg.host);
  } else if (server_->bind_to_port(cfg.host, cfg.port)) {
    port_ = cfg.port;
  }
  if (port_ <= 0) fail("cannot listen on {}:{} (is the address valid and the port free?)", cfg.host, cfg.port);
}

void HttpServer::start() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  while (ctx_.exchanges() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing until the listening loop has started.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
  thread_.join();
}

namespace {

const std::vector<HttpServer::Route>& routes() {
  auto generation = [](Api api) {
    return [api](ServerContext& ctx, const httplib::Request& req, httplib::Response& res) { handle_generation(ctx, api, req, res); };
  };
  static const std::vector<HttpServer::Route> kRoutes = {
      {.method = "GET", .path = "/", .needs_key = false, .needs_model = false, .handler = handle_status_page},
      {.method = "GET", .path = "/health", .needs_key = false, .needs_model = false, .handler = handle_health},
      {.method = "GET", .path = "/metrics", .needs_key = false, .needs_model = false, .handler = handle_metrics},
      {.method = "GET", .path = "/v1/models", .handler = handle_models},
      {.method = "GET",
       .path = "/v1/models/",
       .prefix = true,
       .handler = [](ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
         handle_model(ctx, std::string_view(req.path).substr(std::string_view("/v1/models/").size()), res);
       }},
      {.method = "POST", .path = "/v1/completions", .generation = true, .handler = generation(Api::kCompletions)},
      {.method = "POST", .path = "/v1/chat/completions", .generation = true, .handler = generation(Api::kChat)},
      {.method = "POST", .path = "/tokenize", .handler = handle_tokenize},
      {.method = "POST", .path = "/detokenize", .handler = handle_detokenize},
      {.method = "POST", .path = "/apply-template", .handler = handle_apply_template},
  };
  return kRoutes;
}

}  // namespace

}  // namespace strata::server
