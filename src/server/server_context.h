// The state every HTTP handler shares: configuration, the model host, metrics, the admission count
// behind 429, the drain flag behind 503 at shutdown, the model names a request may use, and
// response ids.
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "server/metrics.h"
#include "server/model_host.h"
#include "server/server_config.h"

namespace strata::server {

// Holds one unit of a counter for as long as it lives (move-only).
class CounterHold {
 public:
  explicit CounterHold(std::atomic<int64_t>* counter) : counter_(counter) {}
  CounterHold(CounterHold&& o) noexcept : counter_(std::exchange(o.counter_, nullptr)) {}
  CounterHold& operator=(CounterHold&&) = delete;
  CounterHold(const CounterHold&) = delete;
  ~CounterHold() {
    if (counter_ != nullptr) counter_->fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t>* counter_;
};

class ServerContext {
 public:
  // Both must outlive the context.
  ServerContext(const ServerConfig& config, ModelHost& host);

  const ServerConfig& config() const { return config_; }
  ModelHost& host() { return host_; }
  ServerMetrics& metrics() { return metrics_; }

  // A slot for one generation request, or nullopt when config().max_queue are in flight.
  std::optional<CounterHold> try_admit();
  int64_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  // Streaming responses outlive their handler; the drain waits for them through this count.
  CounterHold hold_exchange();
  int64_t exchanges() const { return exchanges_.load(std::memory_order_acquire); }

  // From now on generation requests are refused with 503 and /health says 503.
  void begin_draining() { draining_.store(true, std::memory_order_release); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  // The name /v1/models lists and responses carry.
  const std::string& model_name() const { return served_name_; }
  // A request's `model` may be the served name, the model file's name, or that name without .gguf.
  bool accepts_model(std::string_view name) const;

  // "<prefix>-" followed by 24 hex digits, unique within this process.
  std::string new_id(std::string_view prefix);

  // When the server started, in Unix seconds (the `created` of /v1/models).
  int64_t started_unix() const { return started_unix_; }

 private:
  const ServerConfig& config_;
  ModelHost& host_;
  ServerMetrics metrics_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> exchanges_{0};
  std::atomic<bool> draining_{false};
  std::string served_name_, file_name_, file_stem_;
  uint64_t id_seed_;
  int64_t started_unix_;
  std::atomic<uint64_t> id_counter_{0};
};

}  // namespace strata::server
