// The HTTP front: cpp-httplib's server (plain HTTP, a fixed pool of --http-threads threads), the
// route table, API-key checks and the answers no handler gives (404 unknown route, 405 wrong
// method, 413 body too large, 400 malformed HTTP), all with OpenAI's error body.
//
// Routing happens before httplib reads a body, so unknown routes and wrong methods are answered
// without reading one; generation and utility POSTs read theirs (up to --max-body-bytes) first.
// Access: /health, /metrics and / are public; every other route needs the API key when one is set
// (401 otherwise). Routes that need the model answer 503 while it loads.
// Thread-safety: bind/start/stop from one owning thread; handlers run on the HTTP threads.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "server/server_context.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace strata::server {

class HttpServer {
 public:
  explicit HttpServer(ServerContext& ctx);  // ctx must outlive the server
  ~HttpServer();                            // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds config().host:config().port (port 0: any free one). Throws strata::Error when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves on a background thread. Precondition: bind() succeeded.
  void start();
  // Waits until no streamed response is in flight, or until `deadline`; true when none is.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
  // Closes the listening socket, ends keep-alive connections and joins the HTTP threads.
  void stop();

  struct Route;  // an entry of the route table (http_server.cpp)

 private:
  void dispatch(const Route& route, const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req) const;

  ServerContext& ctx_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = -1;
};

}  // namespace strata::server
