#include "engine/monitor.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace strata {

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Monitor::Monitor(MonitorConfig cfg) : cfg_(cfg) {}

namespace {
int64_t to_ns(double s) { return std::llround(s * 1e9); }
}  // namespace

void Monitor::on_step(Clock::time_point now, double kv_s, double compute_s, double wait_s) {
  const StepSample st{now, to_ns(kv_s), to_ns(compute_s), to_ns(wait_s)};
  steps_.push_back(st);
  steps_kv_ns_ += st.kv_ns;
  steps_compute_ns_ += st.compute_ns;
  steps_wait_ns_ += st.wait_ns;
}

void Monitor::on_first_token(QosClass c, Clock::time_point now, double ttft_s) {
  ttft_[static_cast<size_t>(c)].push_back({now, ttft_s});
}

void Monitor::on_finish(QosClass c, Clock::time_point now, double tpot_s) {
  tpot_[static_cast<size_t>(c)].push_back({now, tpot_s});
}

void Monitor::prune(Clock::time_point now) {
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.window_s));
  auto old = [&](const auto& x) { return x.t < horizon; };
  // The oldest counter sample inside the window is the base of the rates; keep one before it.
  while (counters_.size() > 2 && counters_[1].t < horizon) counters_.pop_front();
  while (!steps_.empty() && old(steps_.front())) {
    steps_kv_ns_ -= steps_.front().kv_ns;
    steps_compute_ns_ -= steps_.front().compute_ns;
    steps_wait_ns_ -= steps_.front().wait_ns;
    steps_.pop_front();
  }
  for (auto* d : {&ttft_, &tpot_}) {
    for (auto& q : *d) {
      while (!q.empty() && old(q.front())) q.pop_front();
    }
  }
}

void Monitor::sample(Clock::time_point now, const KvStats& kv, const TransferTotals& transfers, int64_t preemptions,
                     const Scheduler& sched) {
  counters_.push_back({now, preemptions, kv.spill_bytes_out, kv.spill_bytes_in, transfers, kv.prefix_queried_tokens,
                       kv.prefix_hit_tokens});
  prune(now);
  MonitorSnapshot s;
  s.kv_usage = kv.usage_ratio();
  auto used = [](const KvTierStats& t) { return t.slots ? static_cast<double>(t.used) / static_cast<double>(t.slots) : 0.0; };
  s.kv_usage_hot = used(kv.hot);
  s.kv_usage_warm = used(kv.warm);
  s.kv_usage_cold = used(kv.cold);
  const double hot_token_slots = static_cast<double>(kv.hot.used) * kv.block_size;
  s.kv_fragmentation = hot_token_slots > 0 ? static_cast<double>(kv.fragmented_slots) / hot_token_slots : 0.0;
  const Counters& a = counters_.front();
  const Counters& b = counters_.back();
  const double dt = std::chrono::duration<double>(b.t - a.t).count();
  if (dt > 0) {
    s.preemptions_per_s = static_cast<double>(b.preemptions - a.preemptions) / dt;
    auto rate = [&](uint64_t from, uint64_t to) { return to >= from ? static_cast<double>(to - from) / dt : 0.0; };
    s.cold_write_bytes_per_s = rate(a.cold_written, b.cold_written);
    s.cold_read_bytes_per_s = rate(a.cold_read, b.cold_read);
    s.swap_bytes_per_s = s.cold_write_bytes_per_s + s.cold_read_bytes_per_s;
    s.remote_write_bytes_per_s = rate(a.transfers.remote_written, b.transfers.remote_written);
    s.remote_read_bytes_per_s = rate(a.transfers.remote_read, b.transfers.remote_read);
    s.to_host_bytes_per_s = rate(a.transfers.to_host, b.transfers.to_host);
    s.to_device_bytes_per_s = rate(a.transfers.to_device, b.transfers.to_device);
  }
  const int64_t queried = b.prefix_queried - a.prefix_queried;
  if (queried > 0) s.prefix_hit_rate = static_cast<double>(b.prefix_hit - a.prefix_hit) / static_cast<double>(queried);
  if (!steps_.empty()) {
    const double n = static_cast<double>(steps_.size());
    s.step_kv_s = static_cast<double>(steps_kv_ns_) * 1e-9 / n;
    s.step_compute_s = static_cast<double>(steps_compute_ns_) * 1e-9 / n;
    s.step_wait_s = static_cast<double>(steps_wait_ns_) * 1e-9 / n;
    const double span = std::chrono::duration<double>(now - steps_.front().t).count();
    s.steps_per_s = span > 0 ? n / span : 0;
  }
  std::vector<double> v;
  for (size_t c = 0; c < kNumQosClasses; ++c) {
    s.queues[c] = sched.counts(static_cast<QosClass>(c));
    QosLatency& l = s.latency[c];
    v.clear();
    for (const Timed& x : ttft_[c]) v.push_back(x.v);
    l.ttft_samples = static_cast<int64_t>(v.size());
    l.ttft_p50_s = quantile(v, 0.5);
    l.ttft_p99_s = quantile(v, 0.99);
    v.clear();
    for (const Timed& x : tpot_[c]) v.push_back(x.v);
    l.tpot_samples = static_cast<int64_t>(v.size());
    l.tpot_p50_s = quantile(v, 0.5);
    l.tpot_p90_s = quantile(v, 0.9);
    l.tpot_p99_s = quantile(v, 0.99);
  }
  s.fairness_index = sched.fairness_index();
  for (const std::string& t : cfg_.tenants) s.tenants.push_back({t, sched.counts_of_tenant(t), sched.drf().dominant_share(t)});
  snap_ = s;
}

}  // namespace strata
