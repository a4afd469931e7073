// The engine: one thread that owns the scheduler, the KV manager, the KV storage and the model,
// and runs the step protocol of engine/step_runner.h:
//   loop { out = scheduler.schedule(); storage.execute(out.kv_ops); drop lost sequences;
//          logits = model.forward(batch, storage.views()); tokens = sample(logits);
//          scheduler update (commit); stream events }
// Other threads submit requests and read their events through a RequestHandle, or cancel them;
// a cancelled request's blocks are free within one step.
// Thread-safety: submit/cancel/stats/shutdown may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/monitor.h"
#include "engine/request.h"
#include "engine/step_runner.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "kv/remote_pool.h"
#include "model/model.h"
#include "sched/controller.h"
#include "sched/scheduler.h"
#include "sample/stop_matcher.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace strata {

class Engine;

// The reading end of one request's event stream. Events can be read from any one thread.
class RequestHandle {
 public:
  RequestId id() const { return id_; }
  // Blocks for the next event; returns false once kDone has been read (or after shutdown).
  bool next(EngineEvent& e);
  // Same with a timeout; nullopt when nothing arrived in time.
  std::optional<bool> next_for(EngineEvent& e, std::chrono::milliseconds timeout);
  // Asks the engine to stop this request (finish reason "abort"); safe to call any time.
  void cancel();
  bool done() const;

 private:
  friend class Engine;
  RequestHandle(RequestId id, Engine* engine) : id_(id), engine_(engine) {}
  void push(EngineEvent e);
  void detach();  // the engine is going away

  RequestId id_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  bool finished_ = false;   // kDone queued
  bool delivered_ = false;  // kDone read
  Engine* engine_;          // guarded by mutex_; null after detach
};

struct EngineConfig {
  SchedulerConfig sched;
  KvConfig kv;
  int32_t n_ctx = 0;  // context per sequence; 0 = the model's training context
  // A sequence whose KV cannot be read back from the cold tier is recomputed; one that loses its
  // KV more often than this fails instead (kError to its request, then kDone), so a failing disk
  // cannot keep a request going round forever. The engine keeps serving the others.
  int32_t max_kv_losses = 3;
  ControllerConfig controller;  // --controller off|pid and its gains and targets
  MonitorConfig monitor;
  // Called once, on the engine thread, when a forward pass throws (a failed rank of tensor
  // parallelism, an out-of-memory device): the engine has then failed every request with the
  // message and rejects new ones (failure()). The server stops on it.
  std::function<void(const std::string& message)> on_failure;
};

struct EngineStats {
  SchedulerCounts counts;
  KvStats kv;
  double kv_usage_peak = 0;  // highest usage_ratio seen after any step
  int64_t steps = 0;
  // Scheduler calls that changed nothing while work waited (the scheduler's liveness rules make
  // this unreachable; if it happens the engine thread sleeps instead of spinning).
  int64_t stalled_steps = 0;
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;  // by any reason
  int64_t requests_aborted = 0;
  int64_t requests_rejected = 0;
  int64_t prompt_tokens = 0;      // of finished requests
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t queued = 0;             // submitted, not yet seen by the engine thread
  int64_t requests_failed = 0;    // ended with kError (also counted in requests_finished)
  // Batching: the most sequences one forward pass ran, and how many passes ran more than one.
  int32_t max_batch_seqs = 0;
  int64_t batched_steps = 0;
  int64_t cold_prefetch_hits = 0;  // cold-tier fetches served by a read issued steps ahead
  // KV block transfers of a GPU backend (Backend::transfer_stats: bytes over the bus each way,
  // copy-stream seconds, seconds the compute stream waited for them) and the pinned host <-> device
  // bandwidth measured at start-up (GB/s; 0 on the CPU or without a cold tier).
  TransferStats kv_device_transfer;
  double kv_pcie_to_device_gbs = 0;
  double kv_pcie_to_host_gbs = 0;
  // The remote KV tier (--kv-remote), when there is one: its own counters (the prompt tokens whose
  // KV came from it are kv.remote_imported_blocks * kv.block_size).
  bool has_remote = false;
  RemoteKvStats remote;
  int64_t remote_waiting = 0;  // requests waiting for a remote lookup now
  // Eviction within sequences (--kv-evict): the budget per sequence (0: no policy, or --kv-budget
  // auto while unbounded) and, with auto, the lowest it reached (0: never bounded); the tokens
  // evicted are kv.evicted_tokens.
  int32_t kv_budget = 0;
  bool kv_budget_auto = false;
  int32_t kv_budget_min = 0;
  MonitorSnapshot monitor;     // engine/monitor.h: windowed rates, percentiles per QoS class
  ControllerState controller;  // its setpoints, errors, outputs and the knobs as they are now
};

class Engine {
 public:
  // Starts the engine thread. The model and tokenizer must outlive the engine.
  Engine(Model& model, const Tokenizer& tokenizer, const EngineConfig& cfg);
  ~Engine();  // shutdown(false)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. Throws strata::Error with a user-facing message for
  // requests that can never run (empty prompt, prompt at or beyond the context, more KV than the
  // whole pool, invalid sampling parameters) or after shutdown. max_tokens is clipped to the
  // context and the pool.
  std::shared_ptr<RequestHandle> submit(Request r);

  void cancel(RequestId id);

  // Stops accepting requests. drain: run the queued and running ones to completion (waiting up
  // to `timeout`), then cancel what is left; otherwise cancel everything now. Joins the thread.
  void shutdown(bool drain, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  EngineStats stats() const;
  int32_t n_ctx() const { return n_ctx_; }
  const KvConfig& kv_config() const { return kv_->config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Model& model() const { return model_; }
  // The KV manager, for inspection once the engine thread has stopped (after shutdown()).
  const KvManager& kv_after_shutdown() const;
  // The error that failed the engine (a forward pass that threw), or empty while it is healthy.
  std::string failure() const;

 private:
  struct SeqRuntime {
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::unique_ptr<StopMatcher> stops;
  };
  struct RequestState {
    std::shared_ptr<RequestHandle> handle;
    Request request;
    int32_t n_prompt = 0;
    int32_t n_samples = 1;
    int32_t n_finished = 0;
    int32_t max_tokens = 0;
    Usage usage;
    Clock::time_point arrival;  // at the engine thread
    std::optional<Clock::time_point> first_token;
    Clock::time_point last_token;
    int64_t tokens = 0;  // emitted, over all samples
  };

  void loop();
  void start_request(RequestId id, Request r);
  void abort_request(RequestId id);
  // One scheduler step and its forward pass. Returns whether it changed anything: ran a batch,
  // preempted, resumed or moved KV. False means the work that waits cannot be scheduled now.
  bool step();
  void sample_and_emit(SeqId id, std::span<const float> logits);
  // The sampled token's consequences: the stop checks, the token appended and streamed.
  void emit_sample(SeqId id, const SampleResult& r);
  // Whether this step's tokens may be picked on the device (Model::forward_pick) instead of
  // sampled from copied logits: a device that picks, every sequence one new token with logits and
  // a sampler that picks greedily (Sampler::picks_greedily), no forks, importance or query.
  // STRATA_ENGINE_DEVICE_PICKS=0 turns it off (an A/B switch).
  bool picks_on_device(const SchedulerOutput& out) const;
  bool device_picks_enabled_ = true;
  std::vector<TokenId> picked_;  // this step's device picks
  void finish_seq(SeqId id, FinishReason reason);
  // Ends a request with kError (then kFinish "abort" per sample and kDone).
  void fail_request(RequestId id, const std::string& message);
  // A forward pass threw: every request fails with the message, new ones are rejected.
  void fail_engine(const std::string& message);
  bool failed_ = false;  // engine thread: fail_engine ran
  // Sequences whose KV this step's ops lost (already back to waiting, to recompute): fail the
  // requests that lost it too often.
  void handle_lost_kv(SchedulerOutput& out, std::span<const SeqId> lost);
  void emit(RequestState& rs, EngineEvent e);
  void publish_stats();
  // Samples the monitor (after every step, and every 100 ms when idle) and, with --controller pid,
  // updates the controller (at most every 100 ms) and applies its knobs.
  void sample_monitor();
  // A new sequence goes to the scheduler, or first waits for a remote lookup of the prompt's
  // blocks the local prefix cache lacks (--kv-remote).
  void add_sequence(Sequence s);
  // Hands every sequence whose lookup finished (or passed its deadline) to the scheduler, after
  // importing the blocks found. `all`: every waiting one, finished or not (cancel, shutdown).
  void service_remote(bool all = false);
  // The earliest deadline of a waiting lookup.
  std::optional<Clock::time_point> next_remote_deadline() const;

  Model& model_;
  const Tokenizer& tokenizer_;
  EngineConfig cfg_;
  int32_t n_ctx_;
  int64_t capacity_tokens_;
  std::unique_ptr<KvStorage> storage_;  // declared first: outlives the manager and scheduler
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<KvEvictor> evictor_;  // --kv-evict; null without a policy
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<RemoteKvPool> remote_;  // null without --kv-remote

  struct RemoteWait {
    Sequence seq;
    std::vector<BlockHash> chain;  // the prompt's full blocks
    int32_t first = 0;             // chain[first...] was looked up
    uint64_t ticket = 0;
    Clock::time_point deadline;
  };
  std::vector<RemoteWait> remote_waits_;

  // Engine-thread state.
  std::map<RequestId, RequestState> requests_;
  std::map<SeqId, SeqRuntime> runtimes_;
  std::vector<float> row_;
  uint64_t arrival_counter_ = 0;
  int32_t max_batch_seqs_ = 0;
  int64_t batched_steps_ = 0;
  Monitor monitor_;
  std::unique_ptr<MemoryController> controller_;  // null with --controller off
  Clock::time_point last_step_end_{};
  // Cold-tier moves timed by the storage so far (cold_bytes, cold_seconds) as last fed to the
  // scheduler's preempt costs (--preempt auto).
  uint64_t fed_cold_bytes_ = 0;
  double fed_cold_seconds_ = 0;
  // The same for the device transfer engine (host-memory slots on a GPU): totals last seen, and
  // bytes and seconds not yet fed (bytes count when issued, seconds when the copy has finished).
  uint64_t seen_dev_bytes_ = 0;
  double seen_dev_seconds_ = 0;
  uint64_t pending_dev_bytes_ = 0;
  double pending_dev_seconds_ = 0;
  Clock::time_point last_control_{};

  // Shared with other threads.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<RequestId, Request>> pending_;
  std::vector<std::pair<RequestId, std::shared_ptr<RequestHandle>>> pending_handles_;
  std::vector<RequestId> pending_cancels_;
  bool accepting_ = true;
  std::string failure_;  // fail_engine's message
  bool stop_ = false;
  bool drain_ = false;
  bool remote_ready_ = false;  // a remote lookup finished since the engine last looked
  RequestId next_id_ = 1;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace strata
