#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/check.h"
#include "core/error.h"
#include "core/units.h"
#include "sample/stop_matcher.h"
#include "tokenizer/detokenizer.h"

namespace strata {

// --- RequestHandle -----------------------------------------------------------------------------

void RequestHandle::push(EngineEvent e) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (e.kind == EngineEvent::Kind::kDone) finished_ = true;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool RequestHandle::next(EngineEvent& e) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !events_.empty() || delivered_ || engine_ == nullptr; });
  if (events_.empty()) return false;
  e = std::move(events_.front());
  events_.pop_front();
  if (e.kind == EngineEvent::Kind::kDone) delivered_ = true;
  return true;
}

std::optional<bool> RequestHandle::next_for(EngineEvent& e, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty() || delivered_ || engine_ == nullptr; })) {
    return std::nullopt;
  }
  if (events_.empty()) return false;
  e = std::move(events_.front());
  events_.pop_front();
  if (e.kind == EngineEvent::Kind::kDone) delivered_ = true;
  return true;
}

void RequestHandle::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (engine_ != nullptr && !finished_) engine_->cancel(id_);
}

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

void RequestHandle::detach() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_ = nullptr;
  }
  cv_.notify_all();
}

// --- Engine ------------------------------------------------------------------------------------

Engine::Engine(Model& model, const Tokenizer& tokenizer, const EngineConfig& cfg)
    : model_(model), tokenizer_(tokenizer), cfg_(cfg) {
  if (const char* e = std::getenv("STRATA_ENGINE_DEVICE_PICKS")) device_picks_enabled_ = std::string_view(e) != "0";
  const ModelConfig& mc = model.config();
  n_ctx_ = cfg.n_ctx > 0 ? std::min(cfg.n_ctx, mc.n_ctx_train) : mc.n_ctx_train;
  // Under tensor parallelism a rank's KV heads; the storage holds every rank's arenas.
  const KvGeometry geo = model.kv_geometry(cfg.kv.block_size, cfg.kv.dtype);
  if (const int32_t tp = model.tensor_parallel(); tp > 1) {
    if (cfg.kv.evict.enabled()) fail("--kv-evict {} is not supported with --tensor-parallel {} yet", evict_kind_name(cfg.kv.evict.kind), tp);
    if (!cfg.kv.remote_url.empty()) fail("--kv-remote is not supported with --tensor-parallel {} yet", tp);
  }
  // On a GPU the KV cache takes, unless sized by a flag, a share of the memory left free after the
  // weights (kDeviceKvShare; the rest stays for activations, cuBLAS and CUDA graphs).
  if (!cfg_.kv.memory_bytes && !cfg_.kv.num_blocks) {
    if (const auto free = model.backend().free_memory_bytes()) {
      const uint64_t reserve = uint64_t{2} << 30;
      const uint64_t kv_bytes = *free > reserve ? static_cast<uint64_t>((*free - reserve) * kDeviceKvShare) : *free / 2;
      cfg_.kv.memory_bytes = kv_bytes;
      fmt::print(stderr, "KV cache: {:.1f} GiB of {} memory ({:.0f}% of the {:.1f} GiB free after the weights, less 2 GiB; "
                   "--kv-memory sets it)\n",
                   static_cast<double>(kv_bytes) / (uint64_t{1} << 30), device_kind_name(model.backend().kind()),
                   100.0 * static_cast<double>(kv_bytes) / static_cast<double>(*free),
                   static_cast<double>(*free) / (uint64_t{1} << 30));  // stderr: stdout may carry JSON
    }
  }
  const std::vector<Backend*> rank_backends = model.rank_backends();
  storage_ = std::make_unique<KvStorage>(geo, cfg_.kv, model.backend().thread_pool(), rank_backends);
  // The bus KV blocks cross to and from the cold tier on a GPU: its pinned bandwidth each way, the
  // limit transfers are reported against (/metrics strata_kv_pcie_bandwidth_gbs).
  if (!model.backend().host_visible() && storage_->has_cold_tier()) {
    stats_.kv_pcie_to_device_gbs = model.backend().measure_transfer_bandwidth_gbs(true, uint64_t{64} << 20, 3);
    stats_.kv_pcie_to_host_gbs = model.backend().measure_transfer_bandwidth_gbs(false, uint64_t{64} << 20, 3);
    fmt::print(stderr, "KV transfers: pinned host memory {:.1f} GB/s to the device, {:.1f} GB/s to the host\n",
               stats_.kv_pcie_to_device_gbs, stats_.kv_pcie_to_host_gbs);
  }
  kv_ = std::make_unique<KvManager>(geo, cfg_.kv, storage_->capacity(), model.fingerprint());
  capacity_tokens_ = kv_->max_sequence_tokens();
  if (kv_->has_warm_tier() && kv_->hot_tokens() < cfg_.kv.hot_tokens) {
    fmt::print(stderr,
               "KV hot window: {} tokens instead of --kv-hot-tokens {}: the hot pool ({} blocks) must hold a sequence's "
               "window, a warm group and the block of its next token\n",
               kv_->hot_tokens(), cfg_.kv.hot_tokens, kv_->num_hot_blocks());
  }
  sched_ = std::make_unique<Scheduler>(cfg.sched, *kv_);
  // --preempt auto assumes, until a cold-tier move is timed, the pinned bandwidth measured above on
  // a GPU (the slower direction), else kDefaultColdBytesPerS.
  if (const double gbs = std::min(stats_.kv_pcie_to_device_gbs, stats_.kv_pcie_to_host_gbs); gbs > 0) {
    sched_->preempt_costs().set_default_bandwidth(gbs * 1e9);
  }
  if (storage_->has_cold_tier()) {
    fmt::print(stderr, "KV cold tier: {} ({} cold slots, {} in host memory{}); preemption: {}\n", storage_->cold_tier_description(),
               storage_->capacity().cold_slots, storage_->capacity().cold_host_slots,
               kv_->migrates() ? ", the least recently written moving down to the file when full" : "",
               cfg.sched.preempt == PreemptMode::kAuto ? "auto (swap or recompute per victim by measured costs)"
                                                       : std::string(preempt_mode_name(cfg.sched.preempt)));
  }
  if (cfg_.kv.evict.enabled()) {
    if (!model.backend().reports_attention_importance()) {
      fail("--kv-evict {} needs attention kernels that report token importance (--device cpu or cuda); the {} backend's do not",
           evict_kind_name(cfg_.kv.evict.kind), device_kind_name(model.backend().kind()));
    }
    evictor_ = std::make_unique<KvEvictor>(*kv_, cfg_.kv.evict, mc.n_layer, mc.n_head, storage_->views(),
                                           model.backend().host_visible() ? nullptr : &model.backend(),
                                           make_recall_spill(cfg_.kv, kv_->geometry()));
    sched_->set_evictor(evictor_.get());
    stats_.kv_budget = cfg_.kv.evict.budget;
    stats_.kv_budget_auto = cfg_.kv.evict.auto_budget;
  }
  runner_ = std::make_unique<StepRunner>(*sched_, *kv_, *storage_);
  monitor_ = Monitor(cfg_.monitor);
  if (cfg_.controller.enabled) {
    const SchedulerConfig& sc = cfg_.sched;
    controller_ = std::make_unique<MemoryController>(
        cfg_.controller, ControllerKnobs{0.0, sc.max_batched_tokens, sc.max_seqs, kv_->hot_tokens()});
    sched_->set_batch_admission(cfg_.controller.horizon_tokens, 0.0);
    stats_.controller = controller_->state();  // on /metrics from the start
  }
  remote_ = make_remote_pool(cfg_.kv, storage_->remote_format(model.fingerprint()));
  if (remote_) {
    storage_->attach_remote(remote_.get());
    remote_->set_on_ready([this] {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        remote_ready_ = true;
      }
      cv_.notify_all();
    });
    stats_.has_remote = true;
    fmt::print(stderr, "KV remote tier: {} (lookups wait up to {} ms; publishing {})\n", remote_->describe(),
               cfg_.kv.remote_timeout_ms, cfg_.kv.remote_write == KvConfig::RemoteWrite::kAlways ? "every committed block" : "blocks evicted from RAM");
  }
  stats_.kv = kv_->stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  shutdown(false);
  if (remote_) {
    remote_->flush(std::chrono::milliseconds(2000));  // what was queued goes out, briefly
    // Its threads end here, while the mutex and condition variable its callback uses still exist.
    remote_.reset();
  }
}

std::shared_ptr<RequestHandle> Engine::submit(Request r) {
  const int32_t n_prompt = static_cast<int32_t>(r.prompt.size());
  auto reject = [&](const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.requests_rejected;
    }
    throw Error(message);
  };
  if (n_prompt == 0) reject("the prompt is empty");
  for (TokenId t : r.prompt) {
    if (t < 0 || t >= model_.config().n_vocab) reject(fmt::format("prompt token {} is not in the vocabulary (0..{})", t, model_.config().n_vocab - 1));
  }
  if (n_prompt >= n_ctx_) {
    reject(fmt::format("the prompt has {} tokens, but the context is {} tokens (at least one must be left to generate)", n_prompt, n_ctx_));
  }
  // The prompt and the first generated token must fit the pool together; a longer request could
  // never be admitted and would wait forever (max_tokens is clipped to the pool in start_request).
  if (n_prompt + 1 > capacity_tokens_) {
    const int32_t bs = cfg_.kv.block_size;
    reject(fmt::format("the prompt has {} tokens; with the first generated token it needs {} KV blocks of {} tokens, "
                       "more than the whole KV pool holds ({} blocks, {} tokens; --kv-blocks or --kv-memory sets it)",
                       n_prompt, (n_prompt + 1 + bs - 1) / bs, bs, capacity_tokens_ / bs, capacity_tokens_));
  }
  if (auto err = r.params.validate(model_.config().n_vocab)) reject(*err);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) {
    ++stats_.requests_rejected;
    fail("the engine failed: {}", failure_);
  }
  if (!accepting_) fail("the engine is shutting down");
  const RequestId id = next_id_++;
  auto handle = std::shared_ptr<RequestHandle>(new RequestHandle(id, this));
  pending_handles_.emplace_back(id, handle);
  pending_.emplace_back(id, std::move(r));
  ++stats_.requests_submitted;
  ++stats_.queued;
  cv_.notify_all();
  return handle;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_cancels_.push_back(id);
  }
  cv_.notify_all();
}

void Engine::shutdown(bool drain, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    drain_ = drain;
    if (!drain) stop_ = true;
  }
  cv_.notify_all();
  if (drain && thread_.joinable()) {
    const auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_ && Clock::now() < deadline) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
      if (stats_.requests_finished + stats_.requests_rejected >= stats_.requests_submitted + stats_.requests_rejected &&
          pending_.empty() && stats_.counts.running + stats_.counts.waiting + stats_.counts.swapped == 0) {
        break;
      }
    }
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

const KvManager& Engine::kv_after_shutdown() const {
  STRATA_CHECK(!thread_.joinable(), "the engine thread is still running");
  return *kv_;
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = stats_;
  }
  if (remote_) s.remote = remote_->stats();  // live: the pool works while the engine idles
  return s;
}

void Engine::emit(RequestState& rs, EngineEvent e) {
  e.time = Clock::now();
  if (e.kind == EngineEvent::Kind::kToken) {
    if (!rs.first_token) {
      rs.first_token = e.time;
      monitor_.on_first_token(rs.request.qos, e.time, std::chrono::duration<double>(e.time - rs.arrival).count());
    }
    rs.last_token = e.time;
    ++rs.tokens;
  } else if (e.kind == EngineEvent::Kind::kDone && rs.tokens >= 2) {
    monitor_.on_finish(rs.request.qos, e.time,
                       std::chrono::duration<double>(rs.last_token - *rs.first_token).count() / static_cast<double>(rs.tokens - 1));
  }
  if (rs.request.on_event) rs.request.on_event(e);
  else rs.handle->push(std::move(e));
}

void Engine::start_request(RequestId id, Request r) {
  RequestState rs;
  rs.n_prompt = static_cast<int32_t>(r.prompt.size());
  rs.n_samples = std::max<int32_t>(1, r.params.n);
  // With an eviction policy a sequence holds at most its budget (and a step's tokens) however long
  // it grows: neither the context nor the pool bounds what it may generate.
  const int64_t room = evictor_ ? int64_t{INT32_MAX} - rs.n_prompt : std::min<int64_t>(n_ctx_, capacity_tokens_) - rs.n_prompt;
  rs.max_tokens = static_cast<int32_t>(std::min<int64_t>(r.params.max_tokens.value_or(INT32_MAX), room));
  rs.usage.prompt_tokens = rs.n_prompt;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = pending_handles_.begin(); it != pending_handles_.end(); ++it) {
      if (it->first == id) {
        rs.handle = it->second;
        pending_handles_.erase(it);
        break;
      }
    }
  }
  Sequence s;
  s.id = id;
  s.request = id;
  s.priority = r.priority;
  s.tenant = r.tenant;
  s.arrival = Clock::now();
  s.qos = r.qos;
  s.kv_budget = r.kv_budget;
  s.deadline = s.arrival + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double, std::milli>(cfg_.sched.qos_ttft_ms[static_cast<size_t>(r.qos)]));
  rs.arrival = s.arrival;
  s.arrival_seq = arrival_counter_++;
  s.tokens = r.prompt;
  s.n_prompt = rs.n_prompt;
  s.max_tokens = rs.max_tokens;
  s.n_fork_children = rs.n_samples - 1;
  SeqRuntime rt;
  rt.sampler = std::make_unique<Sampler>(r.params, model_.config().n_vocab, 0);
  rt.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_);
  rt.stops = std::make_unique<StopMatcher>(r.params.stop);
  rs.request = std::move(r);
  requests_.emplace(id, std::move(rs));
  if (requests_.at(id).max_tokens <= 0) {
    // Nothing may be generated (max_tokens 0): finish at once.
    runtimes_.emplace(id, std::move(rt));
    sched_->add(std::move(s));
    finish_seq(id, FinishReason::kLength);
    return;
  }
  runtimes_.emplace(id, std::move(rt));
  add_sequence(std::move(s));
}

void Engine::add_sequence(Sequence s) {
  if (remote_ && cfg_.kv.prefix_cache) {
    std::vector<BlockHash> chain = kv_->prefix_chain(s.tokens);
    const int32_t local = kv_->cached_prefix_blocks(chain);
    if (local < static_cast<int32_t>(chain.size())) {
      RemoteWait w;
      w.first = local;
      w.deadline = Clock::now() + std::chrono::milliseconds(cfg_.kv.remote_timeout_ms);
      w.ticket = remote_->lookup(std::vector<BlockHash>(chain.begin() + local, chain.end()), w.deadline);
      w.chain = std::move(chain);
      w.seq = std::move(s);
      remote_waits_.push_back(std::move(w));
      return;
    }
  }
  sched_->add(std::move(s));
}

void Engine::service_remote(bool all) {
  if (remote_waits_.empty()) return;
  const auto now = Clock::now();
  const int32_t bs = cfg_.kv.block_size;
  for (auto it = remote_waits_.begin(); it != remote_waits_.end();) {
    std::optional<std::vector<RemoteBlock>> found = remote_->poll(it->ticket);
    if (!found && now < it->deadline && !all) {
      ++it;
      continue;
    }
    if (!found) {
      remote_->abandon(it->ticket);  // late: a miss, the tokens are computed
    } else {
      // Import in chain order while the parent is cached here; never more than the hot pool can
      // hold besides the block the first computed token needs.
      const std::span<const TokenId> tokens(it->seq.tokens);
      int32_t room = kv_->num_available_blocks() - 1;
      for (size_t i = 0; i < found->size() && room > 0; ++i) {
        const int32_t b = it->first + static_cast<int32_t>(i);
        if (kv_->is_cached(it->chain[static_cast<size_t>(b)])) continue;  // computed here meanwhile
        const BlockHash parent = b == 0 ? BlockHash{} : it->chain[static_cast<size_t>(b) - 1];
        const RemoteBlock& rb = (*found)[i];
        if (!kv_->import_block(parent, tokens.subspan(static_cast<size_t>(b) * bs, static_cast<size_t>(bs)), rb.content, rb.bytes)) break;
        if (rb.content == KvTier::kHot) --room;
      }
    }
    sched_->add(std::move(it->seq));
    it = remote_waits_.erase(it);
  }
}

std::optional<Clock::time_point> Engine::next_remote_deadline() const {
  std::optional<Clock::time_point> t;
  for (const RemoteWait& w : remote_waits_) {
    if (!t || w.deadline < *t) t = w.deadline;
  }
  return t;
}

void Engine::abort_request(RequestId id) {
  if (!requests_.count(id)) return;
  if (std::any_of(remote_waits_.begin(), remote_waits_.end(), [&](const RemoteWait& w) { return w.seq.request == id; })) {
    service_remote(/*all=*/true);  // its sequence joins the scheduler, to be finished below
  }
  for (SeqId s : sched_->sequences_of(id)) finish_seq(s, FinishReason::kAbort);
}

void Engine::finish_seq(SeqId id, FinishReason reason) {
  Sequence& s = sched_->seq(id);
  const RequestId rid = s.request;
  RequestState& rs = requests_.at(rid);
  SeqRuntime& rt = runtimes_.at(id);
  EngineEvent e;
  e.kind = EngineEvent::Kind::kFinish;
  e.index = s.sample_index;
  e.finish_reason = reason;
  if (!rt.stops->stopped() && reason != FinishReason::kAbort) e.text = rt.stops->feed(rt.detok->flush()).text + rt.stops->flush();
  rs.usage.completion_tokens += s.n_generated();
  rs.usage.preemptions += s.preemptions;
  // The request's first sequence is the one admitted with the prompt (forks share its blocks).
  if (s.id == rid) rs.usage.cached_tokens = s.cached_tokens;
  if (s.n_fork_children > 0) rs.n_finished += s.n_fork_children;  // children that were never forked
  emit(rs, std::move(e));
  sched_->finish(id);
  runtimes_.erase(id);
  if (++rs.n_finished >= rs.n_samples) {
    // The blocks this request held are free now: publish that before the reader sees kDone, so a
    // client that reads /metrics after its response never sees its blocks still in use.
    publish_stats();
    EngineEvent done;
    done.kind = EngineEvent::Kind::kDone;
    done.usage = rs.usage;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.requests_finished;
      if (reason == FinishReason::kAbort) ++stats_.requests_aborted;
      stats_.prompt_tokens += rs.usage.prompt_tokens;
      stats_.generated_tokens += rs.usage.completion_tokens;
    }
    emit(rs, std::move(done));
    requests_.erase(rid);
  }
}

void Engine::fail_request(RequestId id, const std::string& message) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  EngineEvent e;
  e.kind = EngineEvent::Kind::kError;
  e.error = message;
  emit(it->second, std::move(e));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests_failed;
  }
  for (SeqId s : sched_->sequences_of(id)) finish_seq(s, FinishReason::kAbort);
}

void Engine::fail_engine(const std::string& message) {
  const bool first = !failed_;
  fmt::print(stderr, "engine: a forward pass failed, failing every request: {}\n", message);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = message;
  }
  failed_ = true;
  std::vector<RequestId> ids;
  for (const auto& [id, rs] : requests_) ids.push_back(id);
  for (RequestId id : ids) fail_request(id, "the engine failed: " + message);
  if (first && cfg_.on_failure) cfg_.on_failure(message);
}

std::string Engine::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void Engine::handle_lost_kv(SchedulerOutput& out, std::span<const SeqId> lost) {
  if (lost.empty()) return;
  for (SeqId id : lost) {
    if (!sched_->has(id)) continue;  // its request failed already (a sibling sample)
    const Sequence& s = sched_->seq(id);
    if (s.kv_losses > cfg_.max_kv_losses) {
      fail_request(s.request, fmt::format("the KV cache of this request could not be read back from the cold tier "
                                          "({} times); giving up",
                                          s.kv_losses));
    }
  }
  // Samples of a failed request may still be in the batch.
  std::erase_if(out.seqs, [&](const ScheduledSeq& sc) { return !sched_->has(sc.id); });
}

void Engine::sample_and_emit(SeqId id, std::span<const float> logits) {
  Sequence& s = sched_->seq(id);
  SeqRuntime& rt = runtimes_.at(id);
  row_.assign(logits.begin(), logits.end());
  const std::span<const TokenId> all(s.tokens);
  emit_sample(id, rt.sampler->sample(row_, all.first(static_cast<size_t>(s.n_prompt)), all.subspan(static_cast<size_t>(s.n_prompt))));
}

bool Engine::picks_on_device(const SchedulerOutput& out) const {
  if (!device_picks_enabled_ || out.seqs.empty() || !model_.picks_on_device()) return false;
  for (const ScheduledSeq& sc : out.seqs) {
    if (sc.n_new != 1 || !sc.logits || sc.importance != nullptr || sc.query != nullptr) return false;
    if (sched_->seq(sc.id).n_fork_children > 0) return false;
    const auto it = runtimes_.find(sc.id);
    if (it == runtimes_.end() || !it->second.sampler->picks_greedily()) return false;
  }
  return true;
}

void Engine::emit_sample(SeqId id, const SampleResult& r) {
  Sequence& s = sched_->seq(id);
  SeqRuntime& rt = runtimes_.at(id);
  RequestState& rs = requests_.at(s.request);
  const SamplingParams& p = rs.request.params;
  const bool eog = !p.ignore_eos && tokenizer_.is_eog(r.token);
  const bool stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), r.token) != p.stop_token_ids.end();
  if (eog || stop_token) {
    finish_seq(id, FinishReason::kStop);
    return;
  }
  sched_->append_token(id, r.token);
  EngineEvent e;
  e.kind = EngineEvent::Kind::kToken;
  e.index = s.sample_index;
  e.token = r.token;
  e.logprob = r.logprob;
  e.top_logprobs = r.top_logprobs;
  const auto step = rt.stops->feed(rt.detok->push(r.token));
  e.text = step.text;
  emit(rs, std::move(e));
  if (step.matched) finish_seq(id, FinishReason::kStop);
  else if (s.n_generated() >= s.max_tokens) finish_seq(id, FinishReason::kLength);
}

bool Engine::step() {
  if (failed_) return false;  // the loop fails what arrives
  const Clock::time_point t0 = Clock::now();
  StepRunner::Prepared p = runner_->prepare();
  SchedulerOutput& out = p.out;
  {
    // The cold-tier moves of this step's ops: those the storage timed, and the device engine's.
    PreemptCostModel& costs = sched_->preempt_costs();
    const KvTransferStats t = storage_->transfer_stats();
    costs.observe_transfer(t.cold_bytes - fed_cold_bytes_, t.cold_seconds - fed_cold_seconds_);
    fed_cold_bytes_ = t.cold_bytes;
    fed_cold_seconds_ = t.cold_seconds;
    const TransferStats d = storage_->device_transfer_stats();
    const uint64_t dev_bytes = d.bytes_to_host + d.bytes_to_device;
    const double dev_seconds = d.seconds_to_host + d.seconds_to_device;
    pending_dev_bytes_ += dev_bytes - seen_dev_bytes_;
    pending_dev_seconds_ += dev_seconds - seen_dev_seconds_;
    seen_dev_bytes_ = dev_bytes;
    seen_dev_seconds_ = dev_seconds;
    if (pending_dev_bytes_ > 0 && pending_dev_seconds_ > 0) {
      costs.observe_transfer(pending_dev_bytes_, pending_dev_seconds_);
      pending_dev_bytes_ = 0;
      pending_dev_seconds_ = 0;
    }
  }
  handle_lost_kv(out, p.lost);
  if (out.empty()) return !out.preempted.empty() || !out.resumed.empty() || !out.kv_ops.empty() || !p.lost.empty();
  max_batch_seqs_ = std::max(max_batch_seqs_, static_cast<int32_t>(out.seqs.size()));
  batched_steps_ += out.seqs.size() > 1;
  const Clock::time_point t1 = Clock::now();
  std::span<const float> logits;
  const bool device_picks = picks_on_device(out);
  try {
    if (device_picks) {  // no logits to the host: the tokens (waited for here, so t2 is the pass's end)
      const std::span<const TokenId> t = model_.picked(runner_->forward_pick(model_, out));
      picked_.assign(t.begin(), t.end());
    } else {
      logits = runner_->forward(model_, out);
    }
  } catch (const std::exception& e) {
    fail_engine(e.what());
    return true;
  }
  runner_->done(out);
  const Clock::time_point t2 = Clock::now();
  using Seconds = std::chrono::duration<double>;
  sched_->preempt_costs().observe_forward(out.n_tokens, Seconds(t2 - t1).count());
  monitor_.on_step(t2, Seconds(t1 - t0).count(), Seconds(t2 - t1).count(),
                   last_step_end_ == Clock::time_point{} ? 0.0 : Seconds(t0 - last_step_end_).count());
  last_step_end_ = t2;
  {
    // Counted before any token of this step is emitted, so a client that sees its request
    // finished also sees the step that finished it on /metrics.
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.steps;
  }
  if (device_picks) {
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      const SeqId id = out.seqs[i].id;
      if (picked_[i] < 0) {  // the sampler's refusal (it would have stopped the process)
        fail_request(sched_->seq(id).request, "no token can be sampled: the largest logit is not finite (a model fault)");
        continue;
      }
      SampleResult r;
      r.token = picked_[i];
      emit_sample(id, r);
    }
    return true;
  }
  const size_t V = static_cast<size_t>(model_.config().n_vocab);
  size_t row = 0;
  for (const ScheduledSeq& sc : out.seqs) {
    if (!sc.logits) continue;
    const auto rl = logits.subspan(row++ * V, V);
    Sequence& s = sched_->seq(sc.id);
    RequestState& rs = requests_.at(s.request);
    std::vector<SeqId> group{sc.id};
    if (s.n_fork_children > 0) {
      for (SeqId c : sched_->fork_children(sc.id)) {
        const Sequence& cs = sched_->seq(c);
        SeqRuntime rt;
        rt.sampler = std::make_unique<Sampler>(rs.request.params, model_.config().n_vocab, static_cast<uint64_t>(cs.sample_index));
        rt.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_);
        rt.stops = std::make_unique<StopMatcher>(rs.request.params.stop);
        runtimes_.emplace(c, std::move(rt));
        group.push_back(c);
      }
    }
    for (SeqId id : group) sample_and_emit(id, rl);
  }
  return true;
}

void Engine::publish_stats() {
  const SchedulerCounts c = sched_->counts();
  const KvStats kv = kv_->stats();
  const TransferStats kv_device_transfer = storage_->device_transfer_stats();
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.counts = c;
  stats_.kv = kv;
  if (evictor_ && evictor_->recall_store() != nullptr) {
    const RecallStore& r = *evictor_->recall_store();
    stats_.kv.recall_bytes = r.bytes();
    stats_.kv.recall_spilled_blocks = r.counters().spilled_blocks;
    stats_.kv.recall_dropped_blocks = r.counters().dropped_blocks;
  }
  stats_.kv_usage_peak = std::max(stats_.kv_usage_peak, kv.usage_ratio());
  stats_.preemptions = sched_->total_preemptions();
  if (evictor_ && evictor_->elastic()) {  // --kv-budget auto: 0 while unbounded
    stats_.kv_budget = evictor_->elastic_budget() == INT32_MAX ? 0 : evictor_->elastic_budget();
    stats_.kv_budget_min = evictor_->elastic_min() == INT32_MAX ? 0 : evictor_->elastic_min();
  }
  stats_.queued = static_cast<int64_t>(pending_.size());
  stats_.max_batch_seqs = max_batch_seqs_;
  stats_.batched_steps = batched_steps_;
  stats_.cold_prefetch_hits = storage_->prefetch_hits();
  stats_.kv_device_transfer = kv_device_transfer;
  stats_.kv.transfer = storage_->transfer_stats();
  if (remote_) {
    stats_.remote = remote_->stats();
    stats_.remote_waiting = static_cast<int64_t>(remote_waits_.size());
    stats_.queued += stats_.remote_waiting;
  }
}

void Engine::sample_monitor() {
  const Clock::time_point now = Clock::now();
  TransferTotals transfers;
  transfers.to_host = storage_->bytes_to_host();
  transfers.to_device = storage_->bytes_to_device();
  if (remote_) {
    const RemoteKvStats r = remote_->stats();
    transfers.remote_read = r.bytes_read;
    transfers.remote_written = r.bytes_written;
  }
  monitor_.sample(now, kv_->stats(), transfers, sched_->total_preemptions(), *sched_);
  const MonitorSnapshot& m = monitor_.snapshot();
  if (controller_ && now - last_control_ >= std::chrono::milliseconds(100)) {
    const double dt = last_control_ == Clock::time_point{} ? 0.1 : std::min(1.0, std::chrono::duration<double>(now - last_control_).count());
    last_control_ = now;
    const QosLatency& li = m.latency[static_cast<size_t>(QosClass::kInteractive)];
    const double demand = static_cast<double>(sched_->projected_demand_blocks(cfg_.controller.horizon_tokens)) /
                          std::max(1, kv_->num_hot_blocks());
    const ControllerKnobs k = controller_->update({demand, li.tpot_samples > 0, li.tpot_p90_s}, dt);
    sched_->set_batch_admission(cfg_.controller.horizon_tokens, k.batch_reserve);
    sched_->set_max_batched_tokens(k.max_batched_tokens);
    sched_->set_max_seqs(k.max_seqs);
    kv_->set_hot_tokens(k.hot_tokens);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.monitor = m;
  if (controller_) stats_.controller = controller_->state();
}

void Engine::loop() {
  for (;;) {
    std::vector<std::pair<RequestId, Request>> fresh;
    std::vector<RequestId> cancels;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (sched_->idle() && pending_.empty() && pending_cancels_.empty()) {
        auto wake = [&] {
          return stop_ || (drain_ && remote_waits_.empty()) || remote_ready_ || !pending_.empty() || !pending_cancels_.empty();
        };
        // Idle, the monitor still samples every 100 ms (its rates decay to what they are).
        auto until = Clock::now() + std::chrono::milliseconds(100);
        if (const auto deadline = next_remote_deadline()) until = std::min(until, *deadline);
        if (stop_ || (drain_ && !accepting_ && remote_waits_.empty())) stop = true;
        else cv_.wait_until(lock, until, wake);
      }
      remote_ready_ = false;
      if (stop_) stop = true;
      fresh.swap(pending_);
      cancels.swap(pending_cancels_);
    }
    for (auto& [id, r] : fresh) start_request(id, std::move(r));
    for (RequestId id : cancels) abort_request(id);
    if (failed_) {  // requests queued before the failure was published
      std::vector<RequestId> ids;
      for (const auto& [id, rs] : requests_) ids.push_back(id);
      for (RequestId id : ids) fail_request(id, "the engine failed: " + failure());
    }
    if (stop) service_remote(/*all=*/true);
    else service_remote();
    if (stop) {
      std::vector<RequestId> ids;
      for (const auto& [id, rs] : requests_) ids.push_back(id);
      for (RequestId id : ids) abort_request(id);
      publish_stats();
      break;
    }
    // Light load: give a burst a moment to arrive so it is batched together; when only batch-class
    // work waits, up to --qos-window-ms, cut short by an interactive arrival (its deadline is not
    // spent waiting for batch formation).
    const bool only_batch = sched_->only_batch_waiting();
    const double wait_ms = std::max(cfg_.sched.batch_wait_ms, only_batch ? cfg_.sched.qos_window_ms : 0.0);
    const int32_t max_seqs = sched_->config().max_seqs;
    if (wait_ms > 0 && sched_->counts().running == 0 && sched_->counts().waiting > 0 && sched_->counts().waiting < max_seqs) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::chrono::duration<double, std::milli>(wait_ms), [&] {
        const bool interactive = std::any_of(pending_.begin(), pending_.end(), [](const auto& p) { return p.second.qos == QosClass::kInteractive; });
        return stop_ || (only_batch && interactive) || static_cast<int32_t>(pending_.size()) + sched_->counts().waiting >= max_seqs;
      });
      fresh.clear();
      fresh.swap(pending_);
      lock.unlock();
      for (auto& [id, r] : fresh) start_request(id, std::move(r));
    }
    const bool stalled = !sched_->idle() && !step();
    sample_monitor();
    publish_stats();
    if (stalled) {
      // Nothing could be scheduled and nothing changed: only an arrival, a cancel, a remote answer
      // or shutdown can change that (or time, for what the scheduler gates on it), so wait for one
      // of them, at most 10 ms, instead of spinning on schedule().
      std::unique_lock<std::mutex> lock(mutex_);
      ++stats_.stalled_steps;
      cv_.wait_for(lock, std::chrono::milliseconds(10),
                   [&] { return stop_ || remote_ready_ || !pending_.empty() || !pending_cancels_.empty(); });
    }
  }
  // Wake every reader still waiting.
  std::vector<std::shared_ptr<RequestHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, h] : pending_handles_) handles.push_back(h);
  }
  for (auto& h : handles) h->detach();
}

}  // namespace strata
