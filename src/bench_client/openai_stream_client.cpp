#include "bench_client/openai_stream_client.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "bench_client/sse_parser.h"
#include "core/error.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxErrorBody = 4096;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shorten(std::string_view s, size_t n = 300) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

// The message of an OpenAI-style error body ({"error": {"message": ...}}, {"error": "..."},
// {"message": ...}), else the text itself.
std::string error_message(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("error")) {
      const json& e = j["error"];
      if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
      if (e.is_string()) return e.get<std::string>();
      return shorten(e.dump());
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  }
  return shorten(body);
}

std::optional<int32_t> int_field(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
  return j[key].get<int32_t>();
}

// The generated text a chunk (or a whole non-streamed response) carries for choice 0.
std::string chunk_text(const json& j, Endpoint e) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return {};
  const json& c = j["choices"][0];
  if (!c.is_object()) return {};
  auto str = [](const json& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  if (e == Endpoint::kCompletions) return str(c, "text");
  // Chat: streamed chunks have "delta", whole responses "message". Reasoning models stream their
  // thoughts in a separate field first; those are generated tokens too.
  const json& d = c.contains("delta") ? c["delta"] : c.contains("message") ? c["message"] : json();
  std::string s = str(d, "reasoning_content");
  if (s.empty()) s = str(d, "reasoning");
  s += str(d, "content");
  return s;
}

// Collects one response: status and body routing, SSE events, timings.
class ResponseReader {
 public:
  ResponseReader(Endpoint e, Clock::time_point t0, Clock::time_point deadline)
      : endpoint_(e), t0_(t0), deadline_(deadline) {}

  bool on_response(const httplib::Response& res) {
    result_.http_status = res.status;
    return true;
  }

  bool on_bytes(const char* data, size_t n) {
    if (Clock::now() > deadline_) {
      timed_out_ = true;
      return false;
    }
    if (result_.http_status != 200) {
      body_.append(data, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, body_.size())));
      return true;
    }
    std::string_view bytes(data, n);
    if (mode_ == Mode::kUnknown) {
      const size_t first = bytes.find_first_not_of(" \t\r\n");
      if (first != std::string_view::npos) mode_ = bytes[first] == '{' ? Mode::kJson : Mode::kSse;
    }
    if (mode_ == Mode::kJson) {
      body_.append(bytes);
      return true;
    }
    for (auto& ev : sse_.feed(bytes)) handle_event(ev);
    return !failed_;
  }

  StreamResult finish(bool transport_ok, httplib::Error err, double timeout_s) {
    if (result_.http_status == 200 && mode_ == Mode::kSse && !failed_) {
      for (auto& ev : sse_.finish()) handle_event(ev);
    }
    if (result_.http_status == 200 && mode_ == Mode::kJson && !failed_) handle_whole_json();
    result_.e2e_s = seconds_since(t0_);
    if (timed_out_) {
      fail_with(fmt::format("timed out after {} s", timeout_s));
    } else if (failed_) {
      // already has its message (the transport error is a consequence of cancelling)
    } else if (!transport_ok) {
      fail_with(fmt::format("{}{}", httplib::to_string(err),
                            result_.http_status ? fmt::format(" (after HTTP {})", result_.http_status) : ""));
    } else if (result_.http_status != 200) {
      fail_with(fmt::format("HTTP {}: {}", result_.http_status, error_message(body_)));
    } else if (mode_ == Mode::kUnknown) {
      fail_with("HTTP 200 with an empty body");
    }
    result_.ok = !failed_;
    return std::move(result_);
  }

 private:
  enum class Mode { kUnknown, kSse, kJson };

  void fail_with(std::string msg) {
    if (!failed_) result_.error = std::move(msg);
    failed_ = true;
  }

  void handle_event(const SseEvent& ev) {
    if (failed_ || done_) return;
    if (!ev.error.empty()) return fail_with("stream error: " + error_message(ev.error));
    if (ev.data == "[DONE]") {
      done_ = true;
      return;
    }
    if (ev.data.empty()) return;
    const json j = json::parse(ev.data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail_with("invalid JSON in stream: " + shorten(ev.data));
    if (j.contains("error") && !j["error"].is_null()) return fail_with("stream error: " + error_message(ev.data));
    take_text(chunk_text(j, endpoint_));
    take_usage(j);
  }

  void handle_whole_json() {
    const json j = json::parse(body_, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail_with("invalid JSON response: " + shorten(body_));
    if (j.contains("error") && !j["error"].is_null()) return fail_with("error: " + error_message(body_));
    take_text(chunk_text(j, endpoint_));
    take_usage(j);
  }

  void take_text(const std::string& text) {
    if (text.empty()) return;  // role-only first chunks, empty deltas, usage-only chunks
    const double t = seconds_since(t0_);
    if (result_.text_chunks == 0) {
      result_.ttft_s = t;
    } else {
      result_.itl_s.push_back(t - last_text_s_);
    }
    last_text_s_ = t;
    ++result_.text_chunks;
    result_.generated_text += text;
  }

  void take_usage(const json& j) {
    if (!j.contains("usage") || !j["usage"].is_object()) return;
    if (auto v = int_field(j["usage"], "prompt_tokens")) result_.usage_prompt_tokens = v;
    if (auto v = int_field(j["usage"], "completion_tokens")) result_.usage_completion_tokens = v;
  }

  Endpoint endpoint_;
  Clock::time_point t0_, deadline_;
  StreamResult result_;
  SseParser sse_;
  Mode mode_ = Mode::kUnknown;
  std::string body_;
  double last_text_s_ = 0;
  bool failed_ = false, done_ = false, timed_out_ = false;
};

}  // namespace

ServerUrl ServerUrl::parse(const std::string& base_url) {
  const size_t scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos) fail("--base-url '{}' must start with http:// or https://", base_url);
  const std::string scheme = base_url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") fail("--base-url '{}': unsupported scheme '{}'", base_url, scheme);
  const size_t host_start = scheme_end + 3;
  const size_t path_start = base_url.find('/', host_start);
  ServerUrl u;
  u.origin = base_url.substr(0, path_start);
  if (u.origin.size() == host_start) fail("--base-url '{}' has no host", base_url);
  std::string path = path_start == std::string::npos ? "" : base_url.substr(path_start);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() < 3 || path.compare(path.size() - 3, 3, "/v1") != 0) path += "/v1";
  u.api_prefix = path;
  return u;
}

std::string ServerUrl::path(Endpoint e) const {
  return api_prefix + (e == Endpoint::kChat ? "/chat/completions" : "/completions");
}

OpenAiStreamClient::OpenAiStreamClient(const ServerUrl& url, std::string api_key, double timeout_s)
    : url_(url), api_key_(std::move(api_key)), timeout_s_(timeout_s), http_(std::make_unique<httplib::Client>(url.origin)) {
  if (!http_->is_valid()) fail("cannot use --base-url '{}' (https needs a build with OpenSSL)", url.origin);
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
  const time_t sec = static_cast<time_t>(t.count() / 1000000), usec = static_cast<time_t>(t.count() % 1000000);
  http_->set_connection_timeout(sec, usec);
  http_->set_read_timeout(sec, usec);
  http_->set_write_timeout(sec, usec);
  // A fresh connection per request: a kept-alive socket the server closed meanwhile would turn
  // into a spurious failure, and connecting is cheap next to a generation.
  http_->set_keep_alive(false);
}

OpenAiStreamClient::~OpenAiStreamClient() = default;

std::string OpenAiStreamClient::request_body(Endpoint e, const StreamRequest& r) {
  json j;
  j["model"] = r.model;
  if (e == Endpoint::kChat) {
    j["messages"] = json::array();
    for (const auto& m : r.messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  } else {
    j["prompt"] = r.prompt;
  }
  j["max_tokens"] = r.max_tokens;
  if (r.temperature) j["temperature"] = *r.temperature;
  if (r.ignore_eos) j["ignore_eos"] = true;
  if (!r.qos.empty()) j["qos"] = r.qos;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

StreamResult OpenAiStreamClient::send(Endpoint e, const StreamRequest& r) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  ResponseReader reader(e, t0, deadline);
  httplib::Request req;
  req.method = "POST";
  req.path = url_.path(e);
  req.body = request_body(e, r);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream, application/json");
  req.set_header("Accept-Encoding", "identity");  // compression would batch chunks and skew timings
  if (!api_key_.empty()) req.set_header("Authorization", "Bearer " + api_key_);
  req.response_handler = [&](const httplib::Response& res) { return reader.on_response(res); };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return reader.on_bytes(data, n); };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = http_->send(req, res, err);
  if (res.status > 0) reader.on_response(res);  // also when no body came (no handler call then)
  return reader.finish(ok, err, timeout_s_);
}

std::optional<std::string> OpenAiStreamClient::get(const std::string& path) {
  httplib::Headers h;
  if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
  auto res = http_->Get(path, h);
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

}  // namespace strata::bench
