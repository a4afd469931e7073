// The HTTP front: an asynchronous HTTP/1.1 server on Boost.Beast/Asio (http_connection.h holds the
// per-connection protocol), the route table, API-key checks and the answers no handler gives
// (404 unknown route, 405 wrong method, 413 body too large, 400 malformed HTTP, 503 beyond
// --max-connections), all with OpenAI's error body.
//
// --http-threads I/O threads serve every connection; no thread is held by a connection or a
// stream (a generation answer is a DeferredResponse fed by engine events), so /health and /metrics
// answer at once whatever the number of streams. Routing happens on the header, so unknown routes
// and wrong methods are answered without reading a body.
// Access: /health, /metrics and / are public; every other route needs the API key when one is set
// (401 otherwise). Routes that need the model answer 503 while it loads.
// Thread-safety: bind/start/stop from one owning thread; handlers run on the I/O threads.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http_connection.h"
#include "server/server_context.h"

namespace strata::server {

class HttpServer : public HttpHandler {
 public:
  explicit HttpServer(ServerContext& ctx);  // ctx must outlive the server
  ~HttpServer() override;                   // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds config().host:config().port (port 0: any free one). Throws std::runtime_error when it
  // cannot (a busy port is a runtime failure, not bad usage).
  void bind();
  int port() const { return port_; }
  // Serves on the I/O threads. Precondition: bind() succeeded.
  void start();
  // Waits until no generation answer is in flight, or until `deadline`; true when none is.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
  // Stops accepting, closes every connection (cancelling what they wait for), joins the threads.
  void stop();

  struct Route;  // an entry of the route table (http_server.cpp)

  // HttpHandler (called on connection strands).
  std::optional<HttpResponse> precheck(const HttpRequest& head) override;
  HttpResponse handle(HttpRequest& req) override;
  HttpResponse framing_error(int status, const std::string& what) override;

 private:
  struct Io;  // the io_context, acceptor and connection registry (http_server.cpp)
  void accept();
  void schedule_trim();
  const Route* find_route(const HttpRequest& head, std::optional<HttpResponse>* refusal) const;
  // Whether req may use a route that needs a key; *key is the key it presented (null when the
  // server has none).
  bool authorize(const HttpRequest& req, const ApiKey** key) const;

  ServerContext& ctx_;
  ConnectionLimits limits_;
  std::unique_ptr<Io> io_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> live_{0};
  int port_ = -1;
};

}  // namespace strata::server
