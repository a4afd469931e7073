#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "core/check.h"
#include "sched/scheduler_config.h"

namespace strata::server {
namespace {

// Bucket bounds in seconds. Small models produce tokens in well under a millisecond on a CPU and
// large ones take seconds per prompt, so the ranges span both ends.
const std::vector<double> kTtftBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                         0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
const std::vector<double> kTpotBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1,    0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0, 2.5};
const std::vector<double> kE2eBounds = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,   2.5,  5.0,
                                        10.0, 15.0,  20.0, 30.0, 60.0, 120.0, 300.0, 600.0};

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Appends HELP and TYPE lines.
void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void single(std::string& out, std::string_view name, std::string_view type, std::string_view help, T value) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

void histogram(std::string& out, std::string_view name, std::string_view help, const Histogram& h) {
  header(out, name, "histogram", help);
  const Histogram::Snapshot s = h.snapshot();
  for (size_t i = 0; i < h.bounds().size(); ++i) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds()[i], s.cumulative[i]);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, s.cumulative.back());
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, s.sum, name, s.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  STRATA_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must ascend");
}

// The engine's monitor (engine/monitor.h) and controller (sched/controller.h).
static void render_monitor(std::string& out, const EngineStats& st) {
  const MonitorSnapshot& m = st.monitor;
  header(out, "strata_kv_tier_usage_ratio", "gauge", "Share of each KV tier's slots referenced by sequences.");
  for (const auto& [tier, v] : {std::pair{"hot", m.kv_usage_hot}, {"warm", m.kv_usage_warm}, {"cold", m.kv_usage_cold}})
    out += fmt::format("strata_kv_tier_usage_ratio{{tier=\"{}\"}} {}\n", tier, v);
  single(out, "strata_kv_fragmentation_ratio", "gauge",
         "Internal fragmentation: empty token slots in partly filled last blocks, over the token slots of the hot blocks in use.",
         m.kv_fragmentation);
  single(out, "strata_prefix_cache_hit_rate", "gauge",
         "Prompt tokens found in the prefix cache over those looked up, in the monitor's window (0 when none).", m.prefix_hit_rate);
  single(out, "strata_preemptions_per_second", "gauge", "Preemptions per second in the monitor's window.", m.preemptions_per_s);
  single(out, "strata_kv_swap_bytes_per_second", "gauge", "KV bytes per second to and from the cold tier in the monitor's window.",
         m.swap_bytes_per_s);
  header(out, "strata_kv_transfer_bytes_per_second", "gauge",
         "KV bytes per second moved in the monitor's window, per link and direction: cold tier (write: spills from the RAM tiers; "
         "read: fetches), remote pool (write: publishes; read: fetched blocks), device (on a GPU: to_host, to_device).");
  for (const auto& [link, dir, v] : {std::tuple{"cold", "write", m.cold_write_bytes_per_s}, {"cold", "read", m.cold_read_bytes_per_s},
                                     {"remote", "write", m.remote_write_bytes_per_s}, {"remote", "read", m.remote_read_bytes_per_s},
                                     {"device", "to_host", m.to_host_bytes_per_s}, {"device", "to_device", m.to_device_bytes_per_s}})
    out += fmt::format("strata_kv_transfer_bytes_per_second{{link=\"{}\",direction=\"{}\"}} {}\n", link, dir, v);
  header(out, "strata_engine_step_seconds", "gauge",
         "Mean time per engine step in the monitor's window: kv (scheduling and KV ops), compute (the forward pass), wait (between steps).");
  for (const auto& [phase, v] : {std::pair{"kv", m.step_kv_s}, {"compute", m.step_compute_s}, {"wait", m.step_wait_s}})
    out += fmt::format("strata_engine_step_seconds{{phase=\"{}\"}} {}\n", phase, v);
  single(out, "strata_engine_steps_per_second", "gauge", "Engine steps per second in the monitor's window.", m.steps_per_s);
  header(out, "strata_qos_sequences", "gauge", "Sequences per QoS class and state.");
  for (size_t c = 0; c < kNumQosClasses; ++c) {
    const std::string_view q = qos_class_name(static_cast<QosClass>(c));
    out += fmt::format("strata_qos_sequences{{qos=\"{}\",state=\"waiting\"}} {}\n", q, m.queues[c].waiting);
    out += fmt::format("strata_qos_sequences{{qos=\"{}\",state=\"running\"}} {}\n", q, m.queues[c].running);
    out += fmt::format("strata_qos_sequences{{qos=\"{}\",state=\"swapped\"}} {}\n", q, m.queues[c].swapped);
  }
  header(out, "strata_qos_ttft_seconds", "gauge", "TTFT quantiles per QoS class in the monitor's window (from the engine's arrival).");
  for (size_t c = 0; c < kNumQosClasses; ++c) {
    const std::string_view q = qos_class_name(static_cast<QosClass>(c));
    out += fmt::format("strata_qos_ttft_seconds{{qos=\"{}\",quantile=\"0.5\"}} {}\n", q, m.latency[c].ttft_p50_s);
    out += fmt::format("strata_qos_ttft_seconds{{qos=\"{}\",quantile=\"0.99\"}} {}\n", q, m.latency[c].ttft_p99_s);
  }
  header(out, "strata_qos_tpot_seconds", "gauge", "TPOT quantiles per QoS class in the monitor's window (requests of 2+ tokens).");
  for (size_t c = 0; c < kNumQosClasses; ++c) {
    const std::string_view q = qos_class_name(static_cast<QosClass>(c));
    out += fmt::format("strata_qos_tpot_seconds{{qos=\"{}\",quantile=\"0.5\"}} {}\n", q, m.latency[c].tpot_p50_s);
    out += fmt::format("strata_qos_tpot_seconds{{qos=\"{}\",quantile=\"0.9\"}} {}\n", q, m.latency[c].tpot_p90_s);
    out += fmt::format("strata_qos_tpot_seconds{{qos=\"{}\",quantile=\"0.99\"}} {}\n", q, m.latency[c].tpot_p99_s);
  }
  single(out, "strata_fairness_jain_index", "gauge",
         "Jain's fairness index over the tenants with work, of their weighted dominant shares (KV blocks held, tokens per step); 1 = equal.",
         m.fairness_index);
  if (!m.tenants.empty()) {
    header(out, "strata_tenant_sequences", "gauge", "Sequences per configured tenant (API keys, --tenant-weight) and state.");
    for (const TenantLoad& t : m.tenants) {
      const std::string name = label_value(t.name);
      out += fmt::format("strata_tenant_sequences{{tenant=\"{}\",state=\"waiting\"}} {}\n", name, t.sequences.waiting);
      out += fmt::format("strata_tenant_sequences{{tenant=\"{}\",state=\"running\"}} {}\n", name, t.sequences.running);
      out += fmt::format("strata_tenant_sequences{{tenant=\"{}\",state=\"swapped\"}} {}\n", name, t.sequences.swapped);
    }
    header(out, "strata_tenant_dominant_share", "gauge", "Weighted dominant share of each configured tenant (sched/drf.h).");
    for (const TenantLoad& t : m.tenants)
      out += fmt::format("strata_tenant_dominant_share{{tenant=\"{}\"}} {}\n", label_value(t.name), t.dominant_share);
  }
  const ControllerState& c = st.controller;
  single(out, "strata_controller_enabled", "gauge", "1 with --controller pid.", c.enabled ? 1 : 0);
  if (!c.enabled) return;
  single(out, "strata_controller_kv_demand_ratio", "gauge",
         "The memory loop's measurement: projected KV demand (the most hot blocks the running requests will hold at once "
         "until they finish, within the horizon) over the hot pool.", c.kv_demand);
  header(out, "strata_controller_setpoint", "gauge", "Setpoint of each controller loop (projected KV demand ratio; interactive TPOT p90 in seconds).");
  out += fmt::format("strata_controller_setpoint{{loop=\"kv_demand\"}} {}\n", c.kv_target);
  out += fmt::format("strata_controller_setpoint{{loop=\"interactive_tpot\"}} {}\n", c.tpot_slo_s);
  header(out, "strata_controller_error", "gauge", "Last error of each loop (projected KV demand - target; (TPOT - SLO) / SLO, -1 without samples).");
  out += fmt::format("strata_controller_error{{loop=\"kv_demand\"}} {}\n", c.kv_error);
  out += fmt::format("strata_controller_error{{loop=\"interactive_tpot\"}} {}\n", c.tpot_error);
  header(out, "strata_controller_output", "gauge", "Output (pressure, 0..1) of each loop.");
  out += fmt::format("strata_controller_output{{loop=\"kv_demand\"}} {}\n", c.memory_pressure);
  out += fmt::format("strata_controller_output{{loop=\"interactive_tpot\"}} {}\n", c.latency_pressure);
  header(out, "strata_controller_knob", "gauge", "The knobs as the controller set them.");
  out += fmt::format("strata_controller_knob{{knob=\"batch_reserve\"}} {}\n", c.knobs.batch_reserve);
  out += fmt::format("strata_controller_knob{{knob=\"max_batched_tokens\"}} {}\n", c.knobs.max_batched_tokens);
  out += fmt::format("strata_controller_knob{{knob=\"max_seqs\"}} {}\n", c.knobs.max_seqs);
  out += fmt::format("strata_controller_knob{{knob=\"hot_tokens\"}} {}\n", c.knobs.hot_tokens);
}

void Histogram::observe(double value) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t running = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(running += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::string_view outcome_label(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kSuccess:
      return "success";
    case RequestOutcome::kError:
      return "error";
    case RequestOutcome::kAborted:
      return "aborted";
    case RequestOutcome::kRejected:
      return "rejected";
  }
  return "unknown";
}

RequestTimer::RequestTimer(Clock::time_point arrival, int32_t n_samples)
    : arrival_(arrival), samples_(static_cast<size_t>(std::max(1, n_samples))) {}

void RequestTimer::observe(const EngineEvent& e) {
  if (e.kind == EngineEvent::Kind::kToken) {
    if (!first_token_) first_token_ = e.time;
    if (e.index >= 0 && static_cast<size_t>(e.index) < samples_.size()) {
      Sample& s = samples_[static_cast<size_t>(e.index)];
      if (s.tokens++ == 0) s.first = e.time;
      s.last = e.time;
    }
  } else if (e.kind == EngineEvent::Kind::kDone) {
    done_ = e.time;
  }
}

RequestLatency RequestTimer::latency() const {
  RequestLatency l;
  if (first_token_) l.ttft_s = seconds(*first_token_ - arrival_);
  if (done_) l.e2e_s = seconds(*done_ - arrival_);
  double sum = 0;
  int n = 0;
  for (const Sample& s : samples_) {
    if (s.tokens < 2) continue;
    sum += seconds(s.last - s.first) / static_cast<double>(s.tokens - 1);
    ++n;
  }
  if (n > 0) l.tpot_s = sum / n;
  return l;
}

ServerMetrics::ServerMetrics() : ttft_(kTtftBounds), tpot_(kTpotBounds), e2e_(kE2eBounds) {}

void ServerMetrics::count_request(RequestOutcome outcome) {
  requests_[static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::observe_latency(const RequestLatency& latency) {
  if (latency.ttft_s) ttft_.observe(*latency.ttft_s);
  if (latency.tpot_s) tpot_.observe(*latency.tpot_s);
  if (latency.e2e_s) e2e_.observe(*latency.e2e_s);
}

std::string ServerMetrics::render(const EngineStats* engine, bool ready, int64_t in_flight) const {
  const EngineStats st = engine != nullptr ? *engine : EngineStats{};
  std::string out;
  out.reserve(8192);
  single(out, "strata_model_ready", "gauge", "1 when the model is loaded and requests are served, 0 while loading.", ready ? 1 : 0);

  header(out, "strata_requests_total", "counter", "Generation requests (completions and chat) by how they ended.");
  for (size_t i = 0; i < kNumOutcomes; ++i)
    out += fmt::format("strata_requests_total{{status=\"{}\"}} {}\n", outcome_label(static_cast<RequestOutcome>(i)),
                       requests_[i].load(std::memory_order_relaxed));
  single(out, "strata_requests_in_flight", "gauge", "Generation requests admitted and not yet finished (bounded by --max-queue).",
         in_flight);
  single(out, "strata_requests_running", "gauge", "Sequences the scheduler is running.", st.counts.running);
  single(out, "strata_requests_waiting", "gauge", "Sequences waiting to be scheduled (including submitted, not yet seen).",
         static_cast<int64_t>(st.counts.waiting) + st.queued);
  single(out, "strata_requests_swapped", "gauge", "Sequences swapped out to the cold tier.", st.counts.swapped);

  single(out, "strata_kv_usage_ratio", "gauge", "Share of the RAM KV tiers (hot + warm) held by sequences, by bytes (prefix-cached blocks no sequence holds are evictable and not counted).", st.kv.usage_ratio());
  const std::pair<const char*, const KvTierStats*> tiers[] = {{"hot", &st.kv.hot}, {"warm", &st.kv.warm}, {"cold", &st.kv.cold}};
  header(out, "strata_kv_bytes", "gauge", "KV bytes held (used and cached blocks) per tier.");
  for (const auto& [name, t] : tiers) out += fmt::format("strata_kv_bytes{{tier=\"{}\"}} {}\n", name, t->bytes_used);
  header(out, "strata_kv_capacity_bytes", "gauge", "KV capacity in bytes per tier.");
  for (const auto& [name, t] : tiers) out += fmt::format("strata_kv_capacity_bytes{{tier=\"{}\"}} {}\n", name, t->bytes_total);
  header(out, "strata_kv_blocks_used", "gauge", "KV blocks (slots) referenced by sequences per tier.");
  for (const auto& [name, t] : tiers) out += fmt::format("strata_kv_blocks_used{{tier=\"{}\"}} {}\n", name, t->used);
  header(out, "strata_kv_blocks_cached", "gauge", "KV blocks holding reusable prefix-cache content, unreferenced, per tier.");
  for (const auto& [name, t] : tiers) out += fmt::format("strata_kv_blocks_cached{{tier=\"{}\"}} {}\n", name, t->cached);
  header(out, "strata_kv_blocks_free", "gauge", "Empty KV blocks (slots) per tier.");
  for (const auto& [name, t] : tiers) out += fmt::format("strata_kv_blocks_free{{tier=\"{}\"}} {}\n", name, t->free);

  // The tiers a block can live in, the cold tier split into its host-memory and file parts (a tier
  // that is not configured shows 0 of 0).
  const std::pair<const char*, const KvTierStats*> all_tiers[] = {
      {"hot", &st.kv.hot}, {"warm", &st.kv.warm}, {"host", &st.kv.host}, {"file", &st.kv.file}};
  header(out, "strata_kv_tier_blocks", "gauge",
         "KV blocks (slots) per tier (hot, warm: HBM or RAM; host: --kv-host-memory; file: --kv-spill-dir) and state: used "
         "(referenced by sequences), cached (reusable prefix-cache content), total (capacity).");
  for (const auto& [name, t] : all_tiers) {
    for (const auto& [state, v] : {std::pair{"used", t->used}, {"cached", t->cached}, {"total", t->slots}})
      out += fmt::format("strata_kv_tier_blocks{{tier=\"{}\",state=\"{}\"}} {}\n", name, state, v);
  }
  header(out, "strata_kv_tier_bytes", "gauge",
         "KV bytes per tier and state: used (blocks held by sequences or the prefix cache), total (capacity).");
  for (const auto& [name, t] : all_tiers) {
    for (const auto& [state, v] : {std::pair{"used", t->bytes_used}, {"total", t->bytes_total}})
      out += fmt::format("strata_kv_tier_bytes{{tier=\"{}\",state=\"{}\"}} {}\n", name, state, v);
  }
  header(out, "strata_kv_tier_moves_total", "counter",
         "KV blocks (slots) moved into (spill) or out of (fetch) each part of the cold tier: host (--kv-host-memory), file; "
         "migrate: blocks moved from host slots down to the file to free a host slot.");
  for (const auto& [tier, dir, v] : {std::tuple{"host", "spill", st.kv.host_spills}, {"host", "fetch", st.kv.host_fetches},
                                     {"file", "spill", st.kv.file_spills}, {"file", "fetch", st.kv.file_fetches},
                                     {"file", "migrate", st.kv.file_migrations}})
    out += fmt::format("strata_kv_tier_moves_total{{tier=\"{}\",op=\"{}\"}} {}\n", tier, dir, v);
  // What the storage measured of its transfers (KvTransferStats; the device transfer engine adds
  // its own counters).
  // --kv-offload: blocks of running sequences attended in place in host slots.
  single(out, "strata_kv_offloaded_blocks_total", "counter",
         "KV blocks of running sequences moved to host slots (--kv-offload), where attention reads them in place.",
         st.kv.offloaded_blocks);
  single(out, "strata_kv_host_resident_blocks", "gauge", "KV blocks of running sequences in host slots now (--kv-offload).",
         st.kv.host_resident_blocks);
  single(out, "strata_kv_host_attended_blocks_total", "counter",
         "KV blocks attention read from host slots, summed over forward passes and sequences (--kv-offload).",
         st.kv.host_attended_blocks);
  single(out, "strata_kv_host_attended_bytes_total", "counter",
         "KV bytes (K and V, every layer) attention read from host slots (--kv-offload).", st.kv.host_attended_bytes);
  single(out, "strata_kv_cold_transfer_bytes_total", "counter",
         "KV payload bytes spilled to or fetched from the cold tier, as timed by the KV storage.", st.kv.transfer.cold_bytes);
  single(out, "strata_kv_cold_transfer_seconds_total", "counter",
         "Seconds the engine thread spent on cold-tier spills and fetches (queueing writes, waiting for reads, device copies).",
         st.kv.transfer.cold_seconds);

  single(out, "strata_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
         st.kv.prefix_queried_tokens);
  single(out, "strata_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.", st.kv.prefix_hit_tokens);
  single(out, "strata_preemptions_total", "counter", "Sequences preempted (swapped out or recomputed) to free KV blocks.",
         st.preemptions);
  single(out, "strata_kv_spill_out_bytes_total", "counter", "KV bytes written to the cold tier.", st.kv.spill_bytes_out);
  single(out, "strata_kv_spill_in_bytes_total", "counter", "KV bytes read back from the cold tier.", st.kv.spill_bytes_in);
  single(out, "strata_kv_reencoded_blocks_total", "counter", "Hot KV blocks re-encoded into the warm tier (--kv-warm-dtype).",
         st.kv.reencoded_blocks);
  single(out, "strata_kv_cold_read_failures_total", "counter",
         "Cold-tier reads that failed or returned damaged bytes (checksum); each one is recomputed, never served.",
         st.kv.cold_read_failures);
  if (st.kv_budget > 0 || st.kv_budget_auto) {
    single(out, "strata_kv_budget_tokens", "gauge",
           "Cached tokens kept per sequence by the eviction policy (--kv-budget; with auto the elastic budget now, 0 while "
           "unbounded).",
           st.kv_budget);
    if (st.kv_budget_auto) {
      single(out, "strata_kv_budget_min_tokens", "gauge",
             "The lowest the elastic budget reached (--kv-budget auto; 0: never bounded).", st.kv_budget_min);
    }
    single(out, "strata_kv_evicted_tokens_total", "counter", "Tokens dropped from sequences by the eviction policy (--kv-evict).",
           st.kv.evicted_tokens);
    single(out, "strata_kv_compacted_tokens_total", "counter",
           "Tokens moved into the holes eviction left (compaction of a sequence's blocks).", st.kv.compacted_tokens);
    single(out, "strata_kv_recalled_tokens_total", "counter",
           "Demoted tokens loaded back into attention (--kv-recall: blocks of block-size tokens chosen by their key summaries).",
           st.kv.recalled_tokens);
    single(out, "strata_kv_recall_bytes", "gauge",
           "Host memory the demoted blocks of --kv-recall take (bounded by --kv-recall-memory).", st.kv.recall_bytes);
    single(out, "strata_kv_recall_spilled_blocks_total", "counter",
           "Demoted blocks moved to the recall spill file past --kv-recall-memory (--kv-spill-dir).",
           st.kv.recall_spilled_blocks);
    single(out, "strata_kv_recall_dropped_blocks_total", "counter",
           "Demoted blocks dropped for good past --kv-recall-memory (no spill file, or it was full).",
           st.kv.recall_dropped_blocks);
  }
  single(out, "strata_kv_cold_prefetch_hits_total", "counter",
         "Cold-tier fetches whose read was issued steps ahead (sequences about to resume or admit a cold prefix hit).",
         st.cold_prefetch_hits);
  {  // KV block transfers of a GPU backend (its copy stream): 0 on the CPU
    const TransferStats& t = st.kv_device_transfer;
    header(out, "strata_kv_transfer_bytes_total", "counter",
           "KV bytes copied between device memory and pinned host memory by the transfer engine (spills, fetches, reads ahead).");
    out += fmt::format("strata_kv_transfer_bytes_total{{dir=\"to_host\"}} {}\n", t.bytes_to_host);
    out += fmt::format("strata_kv_transfer_bytes_total{{dir=\"to_device\"}} {}\n", t.bytes_to_device);
    header(out, "strata_kv_transfer_seconds_total", "counter",
           "Seconds the transfer engine's copies took on their copy stream (finished transfers; events around each).");
    out += fmt::format("strata_kv_transfer_seconds_total{{dir=\"to_host\"}} {}\n", t.seconds_to_host);
    out += fmt::format("strata_kv_transfer_seconds_total{{dir=\"to_device\"}} {}\n", t.seconds_to_device);
    header(out, "strata_kv_transfer_gbs", "gauge",
           "Bandwidth the transfers achieved since start: bytes over copy-stream seconds (compare strata_kv_pcie_bandwidth_gbs).");
    auto gbs = [](uint64_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0; };
    out += fmt::format("strata_kv_transfer_gbs{{dir=\"to_host\"}} {}\n", gbs(t.bytes_to_host, t.seconds_to_host));
    out += fmt::format("strata_kv_transfer_gbs{{dir=\"to_device\"}} {}\n", gbs(t.bytes_to_device, t.seconds_to_device));
    single(out, "strata_kv_compute_wait_seconds_total", "counter",
           "Seconds the compute stream waited for KV transfers it needed (a spill's gather, a fetch's scatter).",
           t.compute_wait_seconds);
    if (st.kv_pcie_to_device_gbs > 0 || st.kv_pcie_to_host_gbs > 0) {
      header(out, "strata_kv_pcie_bandwidth_gbs", "gauge",
             "Host <-> device copy bandwidth over pinned memory, measured at start-up (the limit of KV transfers).");
      out += fmt::format("strata_kv_pcie_bandwidth_gbs{{dir=\"to_host\"}} {}\n", st.kv_pcie_to_host_gbs);
      out += fmt::format("strata_kv_pcie_bandwidth_gbs{{dir=\"to_device\"}} {}\n", st.kv_pcie_to_device_gbs);
    }
  }
  if (st.has_remote) {
    const RemoteKvStats& r = st.remote;
    single(out, "strata_kv_remote_hit_tokens_total", "counter",
           "Prompt tokens whose KV came from the remote tier (blocks imported into the local prefix cache).", st.kv.remote_imported_blocks * st.kv.block_size);
    single(out, "strata_kv_remote_lookups_total", "counter", "Remote lookups issued (new prompts with blocks missing locally).", r.lookups);
    single(out, "strata_kv_remote_hit_blocks_total", "counter", "Blocks found in the remote tier.", r.hit_blocks);
    single(out, "strata_kv_remote_miss_blocks_total", "counter", "Remote lookups that ended at an absent block.", r.miss_blocks);
    single(out, "strata_kv_remote_timeouts_total", "counter", "Remote operations answered after their deadline (a lookup then is a miss).",
           r.timeouts);
    single(out, "strata_kv_remote_errors_total", "counter", "Remote operations that failed (connection, protocol, error replies).",
           r.errors);
    single(out, "strata_kv_remote_corrupt_total", "counter",
           "Remote values rejected (header, length, checksum or hash mismatch); each one is a miss, never served.", r.corrupt);
    single(out, "strata_kv_remote_skipped_total", "counter", "Remote operations not tried because the circuit breaker was open.",
           r.skipped);
    single(out, "strata_kv_remote_published_blocks_total", "counter", "Blocks stored in the remote tier by this replica.",
           r.published_blocks);
    single(out, "strata_kv_remote_existing_blocks_total", "counter", "Blocks this replica published that were stored already.",
           r.existing_blocks);
    single(out, "strata_kv_remote_dropped_blocks_total", "counter",
           "Blocks not published: the queue was full, the breaker open, or the write failed.", r.dropped_blocks);
    single(out, "strata_kv_remote_read_bytes_total", "counter", "Value bytes read from the remote tier.", r.bytes_read);
    single(out, "strata_kv_remote_written_bytes_total", "counter", "Value bytes written to the remote tier.", r.bytes_written);
    single(out, "strata_kv_remote_queue_depth", "gauge", "Blocks waiting to be published.", r.queue_depth);
    single(out, "strata_kv_remote_waiting_requests", "gauge", "Requests waiting for a remote lookup.", st.remote_waiting);
    single(out, "strata_kv_remote_breaker_open", "gauge", "1 while the remote tier's circuit breaker is open (not tried).",
           r.breaker_open ? 1 : 0);
    single(out, "strata_kv_remote_breaker_trips_total", "counter", "Times the remote tier's circuit breaker opened.", r.breaker_trips);
  }
  single(out, "strata_requests_failed_total", "counter",
         "Requests ended by an engine error (KV lost more often than the engine retries).", st.requests_failed);
  single(out, "strata_engine_batched_steps_total", "counter", "Engine steps that ran more than one sequence.",
         st.batched_steps);
  single(out, "strata_engine_max_batch_seqs", "gauge", "Most sequences one engine step has run.", st.max_batch_seqs);
  single(out, "strata_engine_requests_submitted_total", "counter",
         "Requests the engine accepted, in the order it queues them (a request counted here is ordered before any later one).",
         st.requests_submitted);
  single(out, "strata_engine_steps_total", "counter",
         "Engine steps (one batched forward pass each); generated tokens beyond one per step were batched.", st.steps);
  single(out, "strata_engine_stalled_steps_total", "counter",
         "Engine steps that could schedule nothing while requests waited (the engine then sleeps up to 10 ms or until an "
         "arrival or cancel; expected to stay 0).",
         st.stalled_steps);
  single(out, "strata_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", st.prompt_tokens);
  single(out, "strata_generation_tokens_total", "counter", "Generated tokens of finished requests.", st.generated_tokens);

  render_monitor(out, st);

  histogram(out, "strata_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.", ttft_);
  histogram(out, "strata_time_per_output_token_seconds", "Mean time between consecutive generated tokens of a request.", tpot_);
  histogram(out, "strata_e2e_request_latency_seconds", "Time from a request's arrival to its last token.", e2e_);
  return out;
}

}  // namespace strata::server
