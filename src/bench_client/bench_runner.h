// Drives a serving benchmark: sends a Dataset's requests to one or more OpenAI-compatible servers
// with Poisson arrivals (or all at once, or at a rate ramping linearly from one value to another)
// under a concurrency cap, streams every response, scrapes each server's /metrics before and
// after, and optionally samples its gauges during the run (metrics_trace.h).
//
// Several servers: every request is assigned a server before the run (route_requests): request i
// (in dataset order) to server i mod N (round-robin), or every request of a conversation to one
// server picked by a stable hash of its routing key (conversation), so that a replica sees a
// conversation's growing prefix. The concurrency cap is over all servers together.
//
// Arrivals are per conversation: a multi-turn conversation starts at its arrival time, then sends
// its turns one after another, each with the earlier turns and the server's actual replies as
// chat history. Conversations run concurrently. Latencies start when a request is sent, so time
// spent waiting for a concurrency slot on the client is not counted (as in `vllm bench serve`).
//
// Threads: run_benchmark uses min(conversations, max_concurrency) worker threads, each with its own
// HTTP client, and returns after all have joined. Thread-safety: call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_client/bench_dataset.h"
#include "bench_client/metrics_trace.h"
#include "bench_client/openai_stream_client.h"
#include "bench_client/prometheus_text.h"

namespace strata::bench {

enum class Route { kRoundRobin, kConversation };

// Parses a --route value: round-robin | conversation; throws strata::Error otherwise.
Route parse_route(std::string_view s);
std::string_view route_name(Route r);

// The servers of --base-url values, each either one URL or a comma-separated list (spaces around
// entries are dropped), in order. Throws strata::Error for an empty entry, a URL ServerUrl::parse
// refuses (bad scheme, no host), the same server twice, or no server at all.
std::vector<std::string> parse_base_urls(const std::vector<std::string>& values);

// What --route conversation hashes for a conversation: "id:" + its id when it has one, else
// "text:" + the first `prefix_chars` bytes of its first turn's prompt, or for a "messages" turn of
// its first message that is not a system message (a shared system prompt would send everything
// to one server; a conversation's growing message list keeps its first user message).
std::string routing_key(const Conversation& c, size_t prefix_chars);

// 64-bit FNV-1a with a final avalanche (splitmix64): the same on every platform and run, unlike
// std::hash.
uint64_t stable_hash(std::string_view s);

// The server (index into the base URLs) of each request, in dataset order (conversation by
// conversation, turn by turn). `n_servers` >= 1.
std::vector<size_t> route_requests(const Dataset& d, Route route, size_t n_servers, size_t prefix_chars);

struct BenchConfig {
  std::vector<std::string> base_urls;  // e.g. http://127.0.0.1:8000 (a trailing /v1 is fine); >= 1
  Route route = Route::kRoundRobin;
  size_t route_prefix_chars = 256;  // kConversation without conversation ids: chars of text hashed
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  std::string api_key;              // "" sends no Authorization header
  double request_rate = 0;          // conversations started per second (Poisson); 0 = all at once
  // Both > 0: instead of request_rate, a Poisson process whose rate goes linearly from ramp_from
  // to ramp_to over the run (ramp_arrival_times).
  double ramp_from = 0, ramp_to = 0;
  double trace_ms = 0;              // > 0: read each server's /metrics this often (ServerRun::trace)
  int32_t max_concurrency = 0;      // requests in flight at most; 0 = no cap
  uint64_t seed = 0;                // of the arrival times
  double timeout_s = 600;           // per request
  double probe_health_ms = 0;       // > 0: GET /health this often during the run, timing each answer
  std::optional<double> temperature;
  bool ignore_eos = false;
  // Counts generated tokens from the text when a response has no usage; null: one per text chunk.
  TokenCounter output_counter;
  // Counts prompt tokens (all messages of a chat request) when a response has no usage.
  TokenCounter prompt_counter;      // null: count_words
  // Called from worker threads after each request (done so far, total); must be thread-safe.
  std::function<void(size_t, size_t)> progress;
};

struct RequestRecord {
  size_t conversation = 0;
  size_t turn = 0;
  size_t server = 0;          // index into BenchConfig::base_urls / BenchRun::servers
  std::string qos;            // its conversation's class ("" when no --qos-mix)
  StreamResult result;
  int32_t prompt_tokens = 0;  // from usage when given, else counted
  int32_t output_tokens = 0;  // from usage when given, else counted
  bool usage_reported = false;
};

// What was measured of one server apart from its requests.
struct ServerRun {
  std::string base_url;
  std::optional<MetricSamples> metrics_before, metrics_after;  // nullopt when /metrics failed
  std::vector<double> health_ms;  // --probe-health-ms: each probe's answer time (200 or not)
  size_t health_failures = 0;     // probes without a 200 answer in time
  std::vector<TracePoint> trace;  // trace_ms: the gauges sampled during the run, in time order
};

struct BenchRun {
  std::vector<RequestRecord> records;  // one per request, in dataset order
  double duration_s = 0;               // from the first arrival to the last response
  std::vector<ServerRun> servers;      // one per base URL, in order
};

// Throws strata::Error for an unusable configuration (no or bad URL, multi-turn or "messages"
// requests on the completions endpoint). Server and network failures are recorded per request.
BenchRun run_benchmark(const BenchConfig& cfg, const Dataset& dataset);

// Arrival offsets in seconds of `n` conversations: 0 for all when rate is 0 (infinite), else a
// Poisson process starting at 0 with exponential gaps of mean 1/rate drawn from `seed`.
std::vector<double> arrival_times(size_t n, double rate, uint64_t seed);

// Arrival offsets in seconds of `n` conversations whose rate ramps linearly from `from` to `to`
// (both > 0) over T = 2n / (from + to) seconds, the time in which such a ramp expects n arrivals:
// the unit-rate Poisson times of arrival_times(n, 1, seed) mapped through the inverse of the
// ramp's cumulative rate (arrivals past T, which chance may give, continue at `to`). from == to
// is arrival_times(n, from, seed) up to rounding.
std::vector<double> ramp_arrival_times(size_t n, double from, double to, uint64_t seed);

}  // namespace strata::bench
