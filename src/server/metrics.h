// What GET /metrics reports, in the Prometheus text exposition format (version 0.0.4), every name
// prefixed "strata_": the server's own counters and latency histograms (kept here), and the
// engine's scheduler and KV statistics (read from EngineStats when the page is rendered).
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace strata::server {

// A Prometheus histogram: counts per upper bound (cumulative when rendered), sum and count.
class Histogram {
 public:
  // Precondition: bounds ascending and finite (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// How a generation request (completions or chat) ended, as the requests counter labels it.
enum class RequestOutcome {
  kSuccess,   // answered (finish reason stop or length)
  kError,     // refused as invalid (4xx other than 429) or failed in the server (5xx)
  kAborted,   // cancelled: the client went away, or the shutdown deadline passed
  kRejected,  // turned away before running: queue full (429), loading or shutting down (503)
};
inline constexpr size_t kNumOutcomes = 4;
std::string_view outcome_label(RequestOutcome outcome);

// Latencies of one request measured from engine event timestamps.
struct RequestLatency {
  std::optional<double> ttft_s;  // arrival -> first token
  std::optional<double> tpot_s;  // mean gap between a sample's tokens (samples with >= 2 tokens)
  std::optional<double> e2e_s;   // arrival -> last event
};

// Collects RequestLatency from a request's events. Thread-safety: one instance per request.
class RequestTimer {
 public:
  using Clock = std::chrono::steady_clock;
  RequestTimer(Clock::time_point arrival, int32_t n_samples);
  void observe(const EngineEvent& e);
  RequestLatency latency() const;

 private:
  struct Sample {
    Clock::time_point first, last;
    int64_t tokens = 0;
  };
  Clock::time_point arrival_;
  std::optional<Clock::time_point> first_token_, done_;
  std::vector<Sample> samples_;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void count_request(RequestOutcome outcome);
  void observe_latency(const RequestLatency& latency);

  // The exposition text. `engine` is null while the model loads; `in_flight` is the number of
  // generation requests admitted and not finished.
  std::string render(const EngineStats* engine, bool ready, int64_t in_flight) const;

 private:
  std::array<std::atomic<uint64_t>, kNumOutcomes> requests_{};
  Histogram ttft_;
  Histogram tpot_;
  Histogram e2e_;
};

}  // namespace strata::server
