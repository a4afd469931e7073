// One streamed request to an OpenAI-compatible server (/v1/completions or /v1/chat/completions),
// timed chunk by chunk: the building block of `strata bench serve`.
//
// Only the public API is assumed, so the client works against strata, vLLM, llama.cpp's
// llama-server, ...: `stream: true` with `stream_options.include_usage` (usage may still be
// missing), SSE parsed tolerantly (see sse_parser.h), chat streams whose first chunk carries only
// the role, empty deltas, usage-only final chunks, and `{"error": ...}` objects inside the stream.
// A server that ignores `stream` and answers with one JSON body is handled as a single chunk.
//
// Thread-safety: an OpenAiStreamClient sends one request at a time; use one per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/bench_dataset.h"

namespace httplib {
class Client;
}

namespace strata::bench {

enum class Endpoint { kCompletions, kChat };

// A server address split for httplib: "http://host:8000/v1" -> origin "http://host:8000",
// api_prefix "/v1". A base URL without "/v1" at its end gets it added to the API paths.
struct ServerUrl {
  std::string origin;      // scheme://host[:port]
  std::string api_prefix;  // path before "/completions" etc., e.g. "/v1" or "/proxy/v1"
  // Throws strata::Error for anything but http(s)://host[:port][/path].
  static ServerUrl parse(const std::string& base_url);
  std::string path(Endpoint e) const;
  std::string metrics_path() const { return "/metrics"; }  // at the server root, as Prometheus expects
};

struct StreamRequest {
  std::string model;
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat
  int32_t max_tokens = 16;
  std::optional<double> temperature;  // omitted when unset: the server's default
  bool ignore_eos = false;            // sends "ignore_eos": true (a vLLM/llama.cpp/strata extension)
  std::string qos;                    // sends "qos" (strata's QoS class) when not empty
};

struct StreamResult {
  bool ok = false;
  std::string error;           // why it failed: transport error, HTTP status and body, stream error
  int http_status = 0;         // 0 when no response came
  std::string generated_text;  // the concatenated text/content deltas
  double ttft_s = 0;           // to the first chunk with text (0 when none came)
  std::vector<double> itl_s;   // between consecutive chunks with text
  double e2e_s = 0;            // to the end of the response
  int32_t text_chunks = 0;     // chunks that carried text
  std::optional<int32_t> usage_prompt_tokens;
  std::optional<int32_t> usage_completion_tokens;
};

class OpenAiStreamClient {
 public:
  // `timeout_s` bounds connecting, each read and the whole request. `api_key` may be empty.
  OpenAiStreamClient(const ServerUrl& url, std::string api_key, double timeout_s);
  ~OpenAiStreamClient();
  OpenAiStreamClient(const OpenAiStreamClient&) = delete;
  OpenAiStreamClient& operator=(const OpenAiStreamClient&) = delete;

  // Sends `r` to endpoint `e` and reads the stream to its end. Never throws for server or network
  // problems: they come back as ok = false with `error` set.
  StreamResult send(Endpoint e, const StreamRequest& r);

  // GET of a path at the origin (for /metrics); nullopt unless the status is 200.
  std::optional<std::string> get(const std::string& path);

  // The JSON body sent for `r` (exposed for tests).
  static std::string request_body(Endpoint e, const StreamRequest& r);

 private:
  ServerUrl url_;
  std::string api_key_;
  double timeout_s_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace strata::bench
