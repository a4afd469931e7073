// Per-op timing of the CPU backend, for finding where a decode step's time goes. Off by default;
// STRATA_CPU_PROFILE=1 in the environment turns it on for the process. When off, each timed op
// costs one predictable branch on a cached bool (no clock reads, no stores).
//
// When on, every CpuBackend op adds its wall time to a named counter ("matmul q8_0 32000x768",
// "rms_norm", "attention", ...), and matmul_multi adds the thread pool's share: the time from the
// dispatch to the last worker starting its first chunk ("pool wake"), the time from the first
// thread running out of chunks to the last one finishing ("pool tail"), and the activation
// quantization. The table goes to stderr when the CpuBackend is destroyed, per forward pass
// (counted by embed calls) and in total.
// Thread-safety: record() may be called from the engine thread only (the ops' caller).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace strata::cpu {

bool profile_enabled();

using ProfileClock = std::chrono::steady_clock;

// Adds ns to the counter `name` (one call) — only when profile_enabled().
void profile_record(const std::string& name, int64_t ns);
// Prints the counters to stderr and clears them (no-op when nothing was recorded).
void profile_report();

// Times its scope into `name` when profiling is on; `name` is built only then.
template <typename NameFn>
class ProfileScope {
 public:
  explicit ProfileScope(NameFn&& fn) : fn_(fn), on_(profile_enabled()) {
    if (on_) t0_ = ProfileClock::now();
  }
  ~ProfileScope() {
    if (on_) profile_record(fn_(), std::chrono::duration_cast<std::chrono::nanoseconds>(ProfileClock::now() - t0_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  NameFn fn_;
  bool on_;
  ProfileClock::time_point t0_{};
};

}  // namespace strata::cpu
