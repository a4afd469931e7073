#include "server/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <vector>
#include <string>

namespace strata::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// Data a client sends while its request is answered (pipelined requests) is buffered up to this
// much; beyond it the connection stops reading until the answer is done.
constexpr size_t kMaxPipelinedBytes = size_t{1} << 20;
// After an answer that closes the connection, what the client still sends is read and dropped
// for this long, so the answer is not destroyed by a reset before the client has read it.
constexpr auto kLingerTime = std::chrono::seconds(2);
// Queued pieces (SSE chunks) written by one gathered write at most.
constexpr size_t kMaxGather = 64;

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }

std::string reason_phrase(int status) {
  const std::string s = str(http::obsolete_reason(static_cast<http::status>(status)));
  return s.empty() ? "Unknown" : s;
}

int status_of_parse_error(const error_code& ec) {
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::header_limit) return 431;
  return 400;
}

// The path and query of a request target: the absolute form (`http://host/path?q`, which RFC 9112
// 3.2.2 says a server must accept) loses its scheme and authority; other forms stay as they are.
std::string origin_form(std::string_view target) {
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() || !header_name_equal(target.substr(0, scheme.size()), scheme)) continue;
    const size_t end = target.find_first_of("/?", scheme.size());  // the end of the authority
    if (end == std::string_view::npos) return "/";
    return (target[end] == '?' ? "/" : "") + std::string(target.substr(end));
  }
  return std::string(target);
}

std::string describe_parse_error(const error_code& ec) {
  if (ec == http::error::bad_content_length) return "malformed HTTP request: invalid, negative or conflicting Content-Length";
  if (ec == http::error::bad_transfer_encoding)
    return "malformed HTTP request: invalid Transfer-Encoding (or both Content-Length and chunked)";
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) return "malformed HTTP request: bad chunk";
  if (ec == http::error::header_limit) return "the request header is too large";
  return fmt::format("malformed HTTP request: {}", ec.message());
}

}  // namespace

class HttpConnection : public ResponseChannel, public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket socket, HttpHandler& handler, const ConnectionLimits& limits, std::atomic<int64_t>& live)
      : socket_(std::move(socket)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        handler_(handler),
        limits_(limits),
        live_(live) {
    live_.fetch_add(1, std::memory_order_acq_rel);
  }
  ~HttpConnection() override { live_.fetch_sub(1, std::memory_order_acq_rel); }

  void start(bool overloaded) {
    net::post(socket_.get_executor(), [self = shared_from_this(), overloaded] {
      error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      if (overloaded) {
        self->keep_alive_ = false;
        self->send(self->handler_.framing_error(503, "too many open connections (--max-connections); retry later"));
        return;
      }
      self->read_header();
    });
  }

  // Server stop: an answer that is complete but not yet written goes out first (then the
  // connection closes instead of reading the next request); anything else closes now.
  void close_async() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->closed_) return;
      self->keep_alive_ = false;
      if (self->exchange_active() || (!self->writing_ && self->out_.empty())) return self->close();
      // maybe_next() closes once the queued bytes are out (bounded by write_timeout and stop()).
    });
  }

  // ResponseChannel.
  void post(std::function<void()> fn) override {
    net::post(socket_.get_executor(), [self = shared_from_this(), fn = std::move(fn)] {
      if (!self->closed_) fn();
    });
  }

  void respond(HttpResponse r) override {
    if (closed_ || response_done_) return;
    send(std::move(r));
  }

  void begin_stream(const std::string& content_type, const HttpHeaders& headers) override {
    if (closed_ || response_done_) return;
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the stream is the end of the connection
    std::string head = fmt::format("HTTP/1.{} 200 OK\r\nServer: strata\r\nContent-Type: {}\r\n", version_ >= 11 ? 1 : 0, content_type);
    for (const auto& [k, v] : headers) head += fmt::format("{}: {}\r\n", k, v);
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    enqueue(std::move(head));
  }

  void write(std::string bytes) override {
    if (closed_ || response_done_ || bytes.empty()) return;
    if (chunked_) {
      std::string framed = fmt::format("{:x}\r\n", bytes.size());
      framed += bytes;
      framed += "\r\n";
      enqueue(std::move(framed));
    } else {
      enqueue(std::move(bytes));
    }
  }

  void end_stream() override {
    if (closed_ || response_done_) return;
    if (chunked_) enqueue("0\r\n\r\n");
    response_done_ = true;
    maybe_next();
  }

 private:
  bool exchange_active() const { return deferred_ != nullptr && !response_done_; }

  // --- reading -----------------------------------------------------------------------------

  void read_header() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(limits_.max_header_bytes);
    parser_->body_limit(limits_.max_body_bytes);
    arm_read_timer(buffer_.size() > 0 ? limits_.read_timeout : limits_.idle_timeout);
    reading_ = true;
    http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    reading_ = false;
    read_timer_.cancel();
    if (closed_) return;
    if (ec) return on_read_error(ec);
    const auto& msg = parser_->get();
    head_.method = str(msg.method_string());
    const std::string target_str = origin_form(str(msg.target()));
    const std::string_view target = target_str;
    const size_t q = target.find('?');
    head_.path = std::string(target.substr(0, q));
    head_.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
    head_.version = static_cast<int>(msg.version());
    head_.headers.clear();
    for (const auto& f : msg) head_.headers.emplace_back(str(f.name_string()), str(f.value()));
    head_.body.clear();
    version_ = head_.version >= 11 ? 11 : 10;
    keep_alive_ = parser_->keep_alive();
    is_head_ = head_.method == "HEAD";
    chunked_ = false;
    // RFC 9112 3.2: an HTTP/1.1 request without a Host, or any request with several, is a 400 (a
    // proxy and this server could otherwise disagree on which one counts).
    const auto hosts = std::count_if(msg.begin(), msg.end(), [](const auto& f) { return f.name() == http::field::host; });
    if (hosts > 1 || (hosts == 0 && version_ >= 11)) {
      keep_alive_ = false;
      return send(handler_.framing_error(
          400, hosts > 1 ? "malformed HTTP request: more than one Host header" : "malformed HTTP request: an HTTP/1.1 request needs a Host header"));
    }
    // A Transfer-Encoding other than chunked leaves the body's length unknown (RFC 9112 6.3).
    if (head_.has_header("Transfer-Encoding") && !parser_->chunked()) {
      keep_alive_ = false;
      return send(handler_.framing_error(400, "malformed HTTP request: Transfer-Encoding must end in chunked"));
    }
    const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
    if (std::optional<HttpResponse> early = handler_.precheck(head_)) {
      if (has_body) keep_alive_ = false;  // the unread body would be taken for the next request
      return send(std::move(*early));
    }
    if (parser_->is_done()) return dispatch();
    if (const auto expect = head_.header("Expect"); expect && version_ >= 11) {
      if (header_name_equal(*expect, "100-continue")) enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    arm_read_timer(limits_.read_timeout);
    reading_ = true;
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    reading_ = false;
    read_timer_.cancel();
    if (closed_) return;
    if (ec) return on_read_error(ec);
    dispatch();
  }

  void on_read_error(const error_code& ec) {
    // The client closed (between requests or in the middle of one), or our timer closed it.
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == http::error::partial_message || !socket_.is_open()) {
      return close();
    }
    keep_alive_ = false;
    send(handler_.framing_error(status_of_parse_error(ec), describe_parse_error(ec)));
  }

  void dispatch() {
    HttpRequest req = std::move(head_);
    req.body = std::move(parser_->get().body());
    parser_.reset();
    HttpResponse r = handler_.handle(req);
    if (closed_) return;
    if (!r.deferred) return send(std::move(r));
    if (r.close) keep_alive_ = false;
    deferred_ = std::move(r.deferred);
    response_done_ = false;
    watch();
    deferred_->start(weak_from_this());
  }

  // While an answer is pending: read what the client sends (pipelined requests, kept in buffer_),
  // and learn at once when it closes.
  void watch() {
    if (reading_ || closed_ || buffer_.size() >= kMaxPipelinedBytes) return;
    reading_ = true;
    socket_.async_read_some(buffer_.prepare(16 * 1024), [self = shared_from_this()](error_code ec, size_t n) { self->on_watch(ec, n); });
  }

  void on_watch(error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec == net::error::operation_aborted && parse_after_cancel_) {
      parse_after_cancel_ = false;
      return read_header();
    }
    if (ec) return close();  // the client left (before its answer, or while idle)
    buffer_.commit(n);
    parse_after_cancel_ = false;
    if (lingering_) return drain();
    if (exchange_active() || writing_ || !out_.empty()) return watch();
    read_header();  // the answer is out: the data read is the next request
  }

  // --- writing -----------------------------------------------------------------------------

  void send(HttpResponse r) {
    if (r.close) keep_alive_ = false;
    std::string out = fmt::format("HTTP/1.{} {} {}\r\nServer: strata\r\n", version_ >= 11 ? 1 : 0, r.status, reason_phrase(r.status));
    if (!r.content_type.empty()) out += fmt::format("Content-Type: {}\r\n", r.content_type);
    for (const auto& [k, v] : r.headers) out += fmt::format("{}: {}\r\n", k, v);
    out += fmt::format("Content-Length: {}\r\n", r.body.size());
    out += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    if (!is_head_) out += r.body;
    enqueue(std::move(out));
    response_done_ = true;
    maybe_next();
  }

  void enqueue(std::string bytes) {
    out_.push_back(std::move(bytes));
    if (!writing_) do_write();
  }

  void do_write() {
    if (closed_ || out_.empty()) return;
    writing_ = true;
    write_timer_.expires_after(limits_.write_timeout);
    write_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->writing_) self->close();  // no progress for write_timeout
    });
    // Everything queued goes out in one gathered write.
    in_flight_ = std::min(out_.size(), kMaxGather);
    gather_.clear();
    for (size_t i = 0; i < in_flight_; ++i) gather_.push_back(net::buffer(out_[i]));
    net::async_write(socket_, gather_, [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(error_code ec) {
    writing_ = false;
    write_timer_.cancel();
    if (closed_) return;
    if (ec) return close();
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(in_flight_));
    in_flight_ = 0;
    if (!out_.empty()) return do_write();
    maybe_next();
  }

  // After an answer has been queued: once it is written, read the next request or close.
  void maybe_next() {
    if (closed_ || !response_done_ || writing_ || !out_.empty()) return;
    deferred_.reset();
    response_done_ = false;
    if (!keep_alive_) return linger_close();
    if (reading_) {
      if (buffer_.size() > 0) {
        // A pipelined request is already here: stop the watch read, then parse it (on_watch).
        parse_after_cancel_ = true;
        error_code ignored;
        socket_.cancel(ignored);
        return;
      }
      arm_read_timer(limits_.idle_timeout);  // the watch read becomes the wait for the next request
      return;
    }
    read_header();
  }

  void arm_read_timer(std::chrono::seconds t) {
    read_timer_.expires_after(t);
    read_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->reading_) self->close();
    });
  }

  // Half-close, drain what the client still sends for a moment, then close.
  void linger_close() {
    if (closed_) return;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    lingering_ = true;
    read_timer_.expires_after(kLingerTime);
    read_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->close();
    });
    drain();
  }

  void drain() {
    if (closed_ || reading_) return;
    reading_ = true;
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(16 * 1024), [self = shared_from_this()](error_code ec, size_t) {
      self->reading_ = false;
      if (ec || self->closed_) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    read_timer_.cancel();
    write_timer_.cancel();
    if (exchange_active()) {
      std::shared_ptr<DeferredResponse> d = std::move(deferred_);
      d->client_gone();
    }
    deferred_.reset();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  HttpHandler& handler_;
  const ConnectionLimits& limits_;
  std::atomic<int64_t>& live_;

  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest head_;
  std::deque<std::string> out_;                 // queued bytes; the first in_flight_ are being written
  std::vector<net::const_buffer> gather_;       // the buffers of the write in flight
  size_t in_flight_ = 0;
  std::shared_ptr<DeferredResponse> deferred_;
  int version_ = 11;
  bool keep_alive_ = true;
  bool is_head_ = false;
  bool chunked_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool response_done_ = false;
  bool lingering_ = false;
  bool parse_after_cancel_ = false;  // the watch read was cancelled to parse a buffered request
  bool closed_ = false;
};

std::shared_ptr<HttpConnection> start_connection(tcp::socket socket, HttpHandler& handler, const ConnectionLimits& limits,
                                                 std::atomic<int64_t>& live, bool overloaded) {
  auto c = std::make_shared<HttpConnection>(std::move(socket), handler, limits, live);
  c->start(overloaded);
  return c;
}

void close_connection_async(const std::shared_ptr<HttpConnection>& c) { c->close_async(); }

}  // namespace strata::server
