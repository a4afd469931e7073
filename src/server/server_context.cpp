#include "server/server_context.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <random>

namespace strata::server {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ServerContext::ServerContext(const ServerConfig& config, ModelHost& host) : config_(config), host_(host) {
  const std::filesystem::path path(config.model_path);
  file_name_ = path.filename().string();
  file_stem_ = path.extension() == ".gguf" ? path.stem().string() : file_name_;
  served_name_ = config.served_model_name.empty() ? file_stem_ : config.served_model_name;
  std::random_device rd;
  id_seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  started_unix_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<CounterHold> ServerContext::try_admit() {
  int64_t n = in_flight_.load(std::memory_order_acquire);
  do {
    if (n >= config_.max_queue) return std::nullopt;
  } while (!in_flight_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
  return CounterHold(&in_flight_);
}

CounterHold ServerContext::hold_exchange() {
  exchanges_.fetch_add(1, std::memory_order_acq_rel);
  return CounterHold(&exchanges_);
}

bool ServerContext::accepts_model(std::string_view name) const {
  return name == served_name_ || name == file_name_ || name == file_stem_;
}

std::string ServerContext::new_id(std::string_view prefix) {
  const uint64_t n = id_counter_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t a = splitmix64(id_seed_ ^ n), b = splitmix64(a ^ n);
  return fmt::format("{}-{:016x}{:08x}", prefix, a, static_cast<uint32_t>(b));
}

}  // namespace strata::server
