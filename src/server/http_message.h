// What the route handlers see of HTTP, independent of the library that speaks it (http_connection.h):
// a parsed request, a whole response, and for answers that come later (generation) a deferred
// response driven over a ResponseChannel.
//
// Thread-safety: HttpRequest/HttpResponse are plain values. A ResponseChannel's post() may be called
// from any thread; everything else of it, and every DeferredResponse call, runs on the connection's
// strand (one thread at a time, in order).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;
struct ApiKey;  // server/auth.h

// Case-insensitive ASCII comparison of header names.
bool header_name_equal(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string query;   // after '?', "" when none
  int version = 11;    // 10 for HTTP/1.0, 11 for HTTP/1.1
  HttpHeaders headers;
  std::string body;
  // The API key the request presented (set by the server once it is authorized; null when the
  // server has no keys or the route needs none).
  const ApiKey* api_key = nullptr;

  bool has_header(std::string_view name) const { return header(name).has_value(); }
  // The first value of the header, or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
  std::string header_or(std::string_view name, std::string_view fallback = "") const;
};

class DeferredResponse;

struct HttpResponse {
  int status = 200;
  std::string content_type;
  HttpHeaders headers;  // besides Content-Type, Content-Length, Connection, Date, Server
  std::string body;
  bool close = false;  // close the connection after this response
  // When set, the answer comes later through this object (status/body above are unused).
  std::shared_ptr<DeferredResponse> deferred;

  void set_header(std::string name, std::string value);  // replaces a header of that name (not Connection: use close)
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

// The connection's side of a deferred response.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  // Runs fn on the connection's strand; from any thread. Dropped once the connection has closed.
  virtual void post(std::function<void()> fn) = 0;
  // On the strand. Either respond() once, or begin_stream() then write()s then end_stream().
  virtual void respond(HttpResponse r) = 0;
  // 200 with `content_type`: chunked for HTTP/1.1, close-delimited for HTTP/1.0.
  virtual void begin_stream(const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual void write(std::string bytes) = 0;  // never empty
  virtual void end_stream() = 0;
};

// An answer produced after the handler returned (the handler put it in HttpResponse::deferred).
class DeferredResponse {
 public:
  virtual ~DeferredResponse() = default;
  // On the strand, once, right after the handler returned. Keep the channel as a weak_ptr.
  virtual void start(std::weak_ptr<ResponseChannel> channel) = 0;
  // On the strand: the client went away (or the server is stopping) before the answer ended;
  // nothing more can be written. Called at most once, never after the answer ended.
  virtual void client_gone() = 0;
};

}  // namespace strata::server
