// The memory controller (--controller pid): two PID loops that retune the scheduler's and the KV
// manager's knobs from the monitor's live signals (engine/monitor.h).
//
//   memory loop   error = projected KV demand - target (default 0.9)  -> memory pressure p_kv in [0, 1]
//   latency loop  error = (interactive TPOT p90 - SLO) / SLO           -> latency pressure p_lat in [0, 1]
//
// The memory loop measures the projected demand (Scheduler::projected_demand_blocks: the hot
// blocks held plus those the running sequences will still need to reach their max_tokens, within
// a horizon of tokens each, over the hot pool), not the usage already reached: usage lags, and the
// preemptions of a loaded server come in bursts when several sequences grow into a full pool
// within a few steps. The same projection gates batch admissions (Scheduler::set_batch_admission):
// a batch sequence starts only while the demand with it stays within (1 - batch reserve) of the
// pool, so batch work never plans to outgrow the pool, and the reserve is room that interactive
// arrivals (which ignore the gate and the reserve) take without preempting anything.
// Pressure moves the knobs linearly between their base (the flags) and their bound:
//   batch reserve         0 .. reserve_max                with p_kv   (more room kept for interactive work)
//   hot window            base .. hot_tokens_min          with p_kv   (re-encode more into the warm
//                                                                       tier; only with a warm tier)
//   prefill token budget  base .. max_batched_tokens_min  with p_lat  (smaller steps)
//   max_seqs              base .. max_seqs_min            with p_lat
// so every knob stays within [bound, base] whatever the signals. The admission watermark stays
// the flag's: raising it made interactive admissions preempt batch sequences to clear it. Each
// loop limits its output's change per update (slew) and stops integrating while its output is
// held at a bound, or by the slew limit, in the direction of the error (anti-windup): when the
// load falls the output leaves the bound at once instead of first unwinding an integral grown
// while saturated. The warm fraction (the RAM split between hot and warm pools) is fixed when the
// pools are allocated and is not an actuator.
// Thread-safety: a plain object of the engine thread.
#pragma once

#include <cstdint>

namespace strata {

class PidLoop {
 public:
  struct Config {
    double kp = 1, ki = 0, kd = 0;
    double out_min = 0, out_max = 1;
    double max_slew = 1;  // most the output moves in one update
  };
  explicit PidLoop(Config cfg);

  // One update with `error` (measurement - setpoint; positive raises the output) after `dt`
  // (any unit the gains are in; > 0). Returns the new output, within [out_min, out_max].
  double update(double error, double dt);

  double output() const { return out_; }
  double integral() const { return integral_; }
  double error() const { return last_error_; }
  const Config& config() const { return cfg_; }

 private:
  Config cfg_;
  double integral_ = 0;
  double last_error_ = 0;
  bool has_last_ = false;
  double out_ = 0;
};

struct ControllerConfig {
  bool enabled = false;           // --controller off|pid (the command line's default is pid)
  double kv_target = 0.9;         // --controller-kv-target: projected KV demand the memory loop holds
  // --controller-horizon-tokens: the projection counts at most this many more tokens per running
  // sequence (a request without max_tokens would otherwise claim the whole context).
  int32_t horizon_tokens = 512;
  double tpot_slo_ms = 200;       // --controller-tpot-slo-ms: interactive TPOT p90 above it is latency pressure
  // --controller-kv-gains / --controller-tpot-gains KP,KI,KD, per second in the engine (updated every
  // 100 ms); slew: a tenth of the range per update. Scaled from the gains the simulated-plant test
  // settles with (per step, requests living ~50 steps) to requests living a few seconds.
  PidLoop::Config memory{0.3, 0.5, 0.0, 0.0, 1.0, 0.1};
  PidLoop::Config latency{0.3, 0.5, 0.0, 0.0, 1.0, 0.1};
  // Bounds of the knobs at full pressure.
  double reserve_max = 0.3;  // share of the hot pool batch admissions leave to interactive work
  double max_batched_tokens_min_share = 0.25;  // of the base
  double max_seqs_min_share = 0.25;
  double hot_tokens_min_share = 0.25;
};

// The knobs the controller moves, as values (Scheduler / KvManager setters apply them).
struct ControllerKnobs {
  double batch_reserve = 0;  // Scheduler::set_batch_admission
  int32_t max_batched_tokens = 0;
  int32_t max_seqs = 0;
  int32_t hot_tokens = 0;
  bool operator==(const ControllerKnobs&) const = default;
};

struct ControllerSignals {
  double kv_demand = 0;         // projected KV demand / hot blocks (may exceed 1)
  bool has_tpot = false;        // interactive requests finished in the monitor's window
  double interactive_tpot_s = 0;  // their TPOT p90
};

// Setpoints, errors and outputs of both loops, for /metrics.
struct ControllerState {
  bool enabled = false;
  double kv_demand = 0;  // the memory loop's measurement: projected KV demand / hot blocks
  double kv_target = 0, kv_error = 0, memory_pressure = 0;
  double tpot_slo_s = 0, tpot_error = 0, latency_pressure = 0;
  ControllerKnobs knobs;
};

class MemoryController {
 public:
  // `base`: the knobs as the flags set them (also the values at zero pressure; base.batch_reserve
  // is the reserve at zero pressure, normally 0).
  // Preconditions: 0 < kv_target <= 1, tpot_slo_ms > 0, horizon_tokens > 0,
  // base.batch_reserve <= reserve_max < 1, shares in (0, 1].
  MemoryController(const ControllerConfig& cfg, const ControllerKnobs& base);

  // One update after `dt` (seconds in the engine; steps in the simulated-plant tests).
  ControllerKnobs update(const ControllerSignals& s, double dt);

  const ControllerKnobs& knobs() const { return knobs_; }
  const ControllerKnobs& base() const { return base_; }
  // The bound each knob moves toward under full pressure.
  ControllerKnobs bounds() const;
  ControllerState state() const;

 private:
  ControllerConfig cfg_;
  ControllerKnobs base_;
  ControllerKnobs knobs_;
  PidLoop memory_, latency_;
};

}  // namespace strata
