// One client connection of the HTTP/1.1 front end, on Boost.Beast over Boost.Asio: reads requests
// (keep-alive and pipelining: the next request is parsed only once the current answer is sent),
// enforces the header and body limits while reading (chunked or not), rejects malformed framing
// with 400 (duplicate or conflicting Content-Length, Content-Length with chunked, a negative or
// non-numeric length, an HTTP/1.1 request without Host or with several), accepts absolute-form
// targets (http://host/path is served as /path), and writes answers without a thread per
// connection: a deferred answer (http_message.h) streams its events as they come. While an answer
// is pending the connection keeps reading, so a client that closes its socket is seen at once and
// its request cancelled (DeferredResponse::client_gone).
//
// Thread-safety: every member runs on the connection's strand; make() and close_async() may be
// called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <boost/asio/ip/tcp.hpp>

#include "server/http_message.h"

namespace strata::server {

// The server's side, called by connections on their strands.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // With the request's header only (body empty): a response to send instead of reading the body
  // (unknown route, wrong method), or nullopt to read the body and call handle().
  virtual std::optional<HttpResponse> precheck(const HttpRequest& head) = 0;
  virtual HttpResponse handle(HttpRequest& req) = 0;
  // An answer for a request that could not be parsed (413 body too large, 431, 400 ...).
  virtual HttpResponse framing_error(int status, const std::string& what) = 0;
};

struct ConnectionLimits {
  uint64_t max_body_bytes = uint64_t{8} << 20;
  uint32_t max_header_bytes = 64 * 1024;
  std::chrono::seconds idle_timeout{60};   // waiting for the next request on a kept-alive connection
  std::chrono::seconds read_timeout{60};   // a request's header and body once it has begun
  std::chrono::seconds write_timeout{120}; // one write making no progress (a client that stopped reading)
};

class HttpConnection;

// Starts serving `socket` (whose executor must be a strand). `live` counts open connections (the
// connection holds one unit until it closes). `overloaded`: answer 503 at once and close.
std::shared_ptr<HttpConnection> start_connection(boost::asio::ip::tcp::socket socket, HttpHandler& handler,
                                                 const ConnectionLimits& limits, std::atomic<int64_t>& live, bool overloaded);

// Server stop, from any thread: closes the connection, cancelling an answer still being made;
// an answer already complete is written out first.
void close_connection_async(const std::shared_ptr<HttpConnection>& c);

}  // namespace strata::server
