// The swap-or-recompute choice of --preempt auto, per victim, by measured costs: swapping moves
// the victim's blocks (KvManager::swap_out_bytes) to the cold tier now and back later, so it costs
// 2 x bytes / the cold tier's bandwidth; recomputing costs its computed tokens / the prefill rate.
// Both rates are exponential moving averages (weight kEmaWeight for each new sample) of what the
// engine measured: the cold-tier moves KvStorage timed (KvTransferStats::cold_bytes/cold_seconds)
// — and, on a GPU, the device transfer engine's bytes over its copy-stream seconds (TransferStats)
// — and the forward passes of steps of at least kMinRateTokens tokens (smaller ones, decode steps
// of a few sequences, say nothing about prefill throughput). Before any cold-tier measurement the
// bandwidth is the default (set_default_bandwidth: the pinned bandwidth the backend measured at
// start-up on a GPU, else kDefaultColdBytesPerS); before any prefill measurement the choice is
// swap (the behaviour of auto before costs were measured: swap when there is a cold tier).
// Thread-safety: a plain value (the engine thread feeds it; the scheduler reads it).
#pragma once

#include <cstdint>

#include "sched/scheduler_config.h"

namespace strata {

// 10 GB/s: a conservative figure for pinned host memory over PCIe 4 x16 (~25 GB/s peak) and for a
// host memcpy; used until KvStorage has measured a cold-tier move or a backend its bandwidth.
inline constexpr double kDefaultColdBytesPerS = 10e9;

class PreemptCostModel {
 public:
  static constexpr double kEmaWeight = 0.2;
  static constexpr int64_t kMinRateTokens = 32;

  explicit PreemptCostModel(double default_bytes_per_s = kDefaultColdBytesPerS) : default_bw_(default_bytes_per_s) {}

  // The bandwidth assumed until a cold-tier move is measured. Precondition: > 0.
  void set_default_bandwidth(double bytes_per_s);
  // `bytes` of cold-tier moves took `seconds` (ignored when either is 0).
  void observe_transfer(uint64_t bytes, double seconds);
  // A forward pass of `tokens` tokens took `seconds` (ignored below kMinRateTokens tokens).
  void observe_forward(int64_t tokens, double seconds);

  double bandwidth() const { return bw_ > 0 ? bw_ : default_bw_; }  // bytes/s
  double prefill_rate() const { return rate_; }                       // tokens/s, 0 until measured
  bool measured_transfer() const { return bw_ > 0; }

  double swap_seconds(uint64_t bytes) const { return 2.0 * static_cast<double>(bytes) / bandwidth(); }
  double recompute_seconds(int64_t tokens) const;  // +inf until a prefill rate is measured

  // kSwap or kRecompute for a victim whose swap would move `bytes` and whose recompute would
  // compute `tokens` again: the cheaper (swap on a tie, and when nothing would be recomputed
  // only if nothing would be moved either).
  PreemptMode choose(uint64_t bytes, int64_t tokens) const;

 private:
  double default_bw_;
  double bw_ = 0;    // EMA, bytes/s; 0 = not measured
  double rate_ = 0;  // EMA, tokens/s; 0 = not measured
};

}  // namespace strata
