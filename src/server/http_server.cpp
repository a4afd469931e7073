#include "server/http_server.h"

#include <malloc.h>
#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <stdexcept>

#include "server/auth.h"
#include "server/generation_handler.h"
#include "server/utility_routes.h"

namespace strata::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

using Handler = std::function<void(ServerContext&, const HttpRequest&, HttpResponse&)>;

RequestOutcome outcome_of_status(int status) {
  return status == 429 || status == 503 ? RequestOutcome::kRejected : RequestOutcome::kError;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  respond_error(r, e);
  return r;
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

struct HttpServer::Io {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::steady_timer retry{ioc};  // accept errors (out of descriptors): try again shortly
  net::steady_timer trim{ioc};   // gives memory back to the system after a wave of connections
  int64_t peak_since_trim = 0;
  std::mutex mutex;              // guards connections
  std::vector<std::weak_ptr<HttpConnection>> connections;
  std::atomic<bool> stopping{false};
};

namespace {

const std::vector<HttpServer::Route>& routes();

}  // namespace

HttpServer::HttpServer(ServerContext& ctx) : ctx_(ctx), io_(std::make_unique<Io>()) {
  limits_.max_body_bytes = ctx_.config().max_body_bytes;
}

HttpServer::~HttpServer() {
  stop();
  // Handlers still queued hold connections, which refer to live_, limits_ and this handler: free
  // them while those exist.
  io_.reset();
}

bool HttpServer::authorize(const HttpRequest& req, const ApiKey** key) const {
  const std::vector<ApiKey>& keys = ctx_.config().api_keys;
  *key = nullptr;
  if (keys.empty()) return true;
  *key = match_bearer(req.header_or("Authorization"), keys);
  return *key != nullptr;
}

const HttpServer::Route* HttpServer::find_route(const HttpRequest& head, std::optional<HttpResponse>* refusal) const {
  const Route* found = nullptr;
  bool path_known = false;
  std::string allow;
  const std::string method = head.method == "HEAD" ? "GET" : head.method;
  for (const Route& r : routes()) {
    const std::string_view path(r.path);
    const bool match = r.prefix ? std::string_view(head.path).starts_with(path) && head.path.size() > path.size() : head.path == path;
    if (!match) continue;
    path_known = true;
    if (!allow.empty()) allow += ", ";
    allow += r.method;
    if (method == r.method) found = &r;
  }
  if (found != nullptr) return found;
  if (!path_known) {
    *refusal = error_response(ApiError(404, fmt::format("unknown route: {} {}", head.method, head.path), "", "not_found"));
  } else {
    HttpResponse r = error_response(ApiError(405, fmt::format("method {} is not allowed on {} (allowed: {})", head.method, head.path, allow),
                                             "", "method_not_allowed"));
    r.set_header("Allow", allow);
    *refusal = std::move(r);
  }
  return nullptr;
}

std::optional<HttpResponse> HttpServer::precheck(const HttpRequest& head) {
  std::optional<HttpResponse> refusal;
  find_route(head, &refusal);
  return refusal;
}

HttpResponse HttpServer::handle(HttpRequest& req) {
  std::optional<HttpResponse> refusal;
  const Route* route = find_route(req, &refusal);
  if (route == nullptr) return std::move(*refusal);
  HttpResponse res;
  if (ctx_.draining()) res.close = true;
  try {
    if (route->needs_key && !authorize(req, &req.api_key)) {
      res.set_header("WWW-Authenticate", "Bearer");
      throw ApiError(401,
                     req.has_header("Authorization") ? "incorrect API key provided"
                                                     : "missing API key: send it as 'Authorization: Bearer <key>'",
                     "", "invalid_api_key");
    }
    if (route->needs_model) {
      if (ctx_.draining() && route->generation) throw ApiError(503, "the server is shutting down", "", "shutting_down");
      if (!ctx_.host().ready()) throw ApiError(503, "the model is loading; retry when /health answers 200", "", "model_loading");
    }
    route->handler(ctx_, req, res);
  } catch (const ApiError& e) {
    res.deferred.reset();
    respond_error(res, e);
    if (route->generation) ctx_.metrics().count_request(outcome_of_status(e.status()));
  } catch (const std::exception& e) {
    res.deferred.reset();
    respond_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
    if (route->generation) ctx_.metrics().count_request(RequestOutcome::kError);
  }
  return res;
}

HttpResponse HttpServer::framing_error(int status, const std::string& what) {
  switch (status) {
    case 413:
      return error_response(ApiError(413, fmt::format("the request body is larger than {} bytes (--max-body-bytes)", ctx_.config().max_body_bytes),
                                     "", "request_too_large"));
    case 431:
      return error_response(ApiError(431, what, "", "header_too_large"));
    case 503:
      return error_response(ApiError(503, what, "", "too_many_connections"));
    default:
      return error_response(ApiError(status, what));
  }
}

void HttpServer::bind() {
  const ServerConfig& cfg = ctx_.config();
  // Every connection is a descriptor: take the hard limit (the soft one is often 1024).
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(cfg.max_connections) + 64 > lim.rlim_cur) {
    fmt::print(stderr, "strata serve: warning: --max-connections {} is close to the open-file limit ({}); raise `ulimit -n`\n",
               cfg.max_connections, static_cast<uint64_t>(lim.rlim_cur));
  }
  error_code ec;
  const net::ip::address addr = net::ip::make_address(cfg.host, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot listen on {}:{}: '{}' is not an IP address", cfg.host, cfg.port, cfg.host));
  const tcp::endpoint ep(addr, static_cast<uint16_t>(cfg.port));
  tcp::acceptor& a = io_->acceptor;
  a.open(ep.protocol(), ec);
  // SO_REUSEADDR (not SO_REUSEPORT, which would let a second server share a busy port): a quick
  // restart can bind while old connections linger in TIME_WAIT.
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: {} (is the port free?)", cfg.host, cfg.port, ec.message()));
  }
  port_ = a.local_endpoint().port();
}

// After a wave of connections has closed, glibc keeps their freed buffers in its arenas; hand the
// free pages back so that the server's memory returns to its idle level.
void HttpServer::schedule_trim() {
  io_->trim.expires_after(std::chrono::seconds(1));
  io_->trim.async_wait([this](error_code ec) {
    if (ec || io_->stopping.load()) return;
    const int64_t now = live_.load(std::memory_order_acquire);
    io_->peak_since_trim = std::max(io_->peak_since_trim, now);
    if (io_->peak_since_trim - now >= 64 && now <= io_->peak_since_trim / 2) {
      ::malloc_trim(0);
      io_->peak_since_trim = now;
    }
    schedule_trim();
  });
}

void HttpServer::start() {
  accept();
  schedule_trim();
  const int n = std::max(1, ctx_.config().http_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { io_->ioc.run(); });
}

void HttpServer::accept() {
  io_->acceptor.async_accept(net::make_strand(io_->ioc), [this](error_code ec, tcp::socket socket) {
    if (io_->stopping.load() || !io_->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: back off instead of spinning.
      io_->retry.expires_after(std::chrono::milliseconds(50));
      io_->retry.async_wait([this](error_code) {
        if (!io_->stopping.load()) accept();
      });
      return;
    }
    const bool overloaded = live_.load(std::memory_order_acquire) >= ctx_.config().max_connections;
    std::shared_ptr<HttpConnection> c = start_connection(std::move(socket), *this, limits_, live_, overloaded);
    {
      std::lock_guard<std::mutex> lock(io_->mutex);
      auto& v = io_->connections;
      if (v.size() >= 64 && v.size() == v.capacity()) std::erase_if(v, [](const auto& w) { return w.expired(); });
      v.push_back(c);
    }
    accept();
  });
}

bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  while (ctx_.exchanges() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  if (threads_.empty()) return;
  io_->stopping.store(true);
  net::post(io_->ioc, [this] {
    error_code ignored;
    io_->acceptor.close(ignored);
    io_->retry.cancel();
    io_->trim.cancel();
  });
  std::vector<std::weak_ptr<HttpConnection>> conns;
  {
    std::lock_guard<std::mutex> lock(io_->mutex);
    conns.swap(io_->connections);
  }
  for (auto& w : conns) {
    if (auto c = w.lock()) close_connection_async(c);
  }
  // Closed connections finish their handlers, after which run() returns; bound the wait.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (live_.load() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  io_->ioc.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

namespace {

const std::vector<HttpServer::Route>& routes() {
  auto generation = [](Api api) {
    return [api](ServerContext& ctx, const HttpRequest& req, HttpResponse& res) { handle_generation(ctx, api, req, res); };
  };
  static const std::vector<HttpServer::Route> kRoutes = {
      {.method = "GET", .path = "/", .needs_key = false, .needs_model = false, .handler = handle_status_page},
      {.method = "GET", .path = "/health", .needs_key = false, .needs_model = false, .handler = handle_health},
      {.method = "GET", .path = "/metrics", .needs_key = false, .needs_model = false, .handler = handle_metrics},
      {.method = "GET", .path = "/v1/models", .handler = handle_models},
      {.method = "GET",
       .path = "/v1/models/",
       .prefix = true,
       .handler = [](ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
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
