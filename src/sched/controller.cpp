#include "sched/controller.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata {

PidLoop::PidLoop(Config cfg) : cfg_(cfg), out_(cfg.out_min) {
  STRATA_CHECK(cfg.out_min <= cfg.out_max && cfg.max_slew > 0);
}

double PidLoop::update(double error, double dt) {
  STRATA_CHECK(dt > 0);
  const double derivative = has_last_ ? (error - last_error_) / dt : 0.0;
  const double integral = integral_ + error * dt;
  const double raw = cfg_.kp * error + cfg_.ki * integral + cfg_.kd * derivative;
  const double lo = std::max(cfg_.out_min, out_ - cfg_.max_slew);
  const double hi = std::min(cfg_.out_max, out_ + cfg_.max_slew);
  const double out = std::clamp(raw, lo, hi);
  // Anti-windup (conditional integration): the integral keeps its value while the output is held
  // at a bound or by the slew limit and the error pushes further that way.
  const bool held_high = raw > hi && error > 0;
  const bool held_low = raw < lo && error < 0;
  if (!held_high && !held_low) integral_ = integral;
  last_error_ = error;
  has_last_ = true;
  out_ = out;
  return out_;
}

MemoryController::MemoryController(const ControllerConfig& cfg, const ControllerKnobs& base)
    : cfg_(cfg), base_(base), knobs_(base), memory_(cfg.memory), latency_(cfg.latency) {
  STRATA_CHECK(cfg.kv_target > 0 && cfg.kv_target <= 1 && cfg.tpot_slo_ms > 0 && cfg.horizon_tokens > 0);
  STRATA_CHECK(base.batch_reserve >= 0 && cfg.reserve_max >= base.batch_reserve && cfg.reserve_max < 1);
  for (double s : {cfg.max_batched_tokens_min_share, cfg.max_seqs_min_share, cfg.hot_tokens_min_share}) {
    STRATA_CHECK(s > 0 && s <= 1);
  }
}

ControllerKnobs MemoryController::bounds() const {
  auto shrink = [](int32_t base, double share) { return std::max(1, static_cast<int32_t>(std::lround(base * share))); };
  ControllerKnobs b;
  b.batch_reserve = cfg_.reserve_max;
  b.max_batched_tokens = std::min(base_.max_batched_tokens, shrink(base_.max_batched_tokens, cfg_.max_batched_tokens_min_share));
  b.max_seqs = std::min(base_.max_seqs, shrink(base_.max_seqs, cfg_.max_seqs_min_share));
  b.hot_tokens = std::min(base_.hot_tokens, static_cast<int32_t>(std::lround(base_.hot_tokens * cfg_.hot_tokens_min_share)));
  return b;
}

ControllerKnobs MemoryController::update(const ControllerSignals& s, double dt) {
  const double p_kv = memory_.update(s.kv_demand - cfg_.kv_target, dt);
  // No interactive request finished lately: nothing to protect, the pressure relaxes.
  const double slo = cfg_.tpot_slo_ms / 1000.0;
  const double tpot_error = s.has_tpot ? std::clamp((s.interactive_tpot_s - slo) / slo, -1.0, 1.0) : -1.0;
  const double p_lat = latency_.update(tpot_error, dt);
  const ControllerKnobs b = bounds();
  auto lerp = [](double from, double to, double p) { return from + (to - from) * p; };
  auto ilerp = [&](int32_t from, int32_t to, double p) { return static_cast<int32_t>(std::lround(lerp(from, to, p))); };
  knobs_.batch_reserve = lerp(base_.batch_reserve, b.batch_reserve, p_kv);
  knobs_.hot_tokens = ilerp(base_.hot_tokens, b.hot_tokens, p_kv);
  // Not with p_kv: a smaller budget slows interactive prompts as much as batch ones.
  knobs_.max_batched_tokens = ilerp(base_.max_batched_tokens, b.max_batched_tokens, p_lat);
  knobs_.max_seqs = ilerp(base_.max_seqs, b.max_seqs, p_lat);
  return knobs_;
}

ControllerState MemoryController::state() const {
  ControllerState st;
  st.enabled = cfg_.enabled;
  st.kv_target = cfg_.kv_target;
  st.kv_demand = memory_.error() + cfg_.kv_target;
  st.kv_error = memory_.error();
  st.memory_pressure = memory_.output();
  st.tpot_slo_s = cfg_.tpot_slo_ms / 1000.0;
  st.tpot_error = latency_.error();
  st.latency_pressure = latency_.output();
  st.knobs = knobs_;
  return st;
}

}  // namespace strata
