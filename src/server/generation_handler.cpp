#include "server/generation_handler.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/error.h"
#include "server/chat_api.h"
#include "server/completion_api.h"
#include "server/json_fields.h"
#include "server/utility_routes.h"

namespace strata::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string sse(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

TokenStep step_of(const EngineEvent& e) {
  return TokenStep{e.token, e.logprob.value_or(0.0f), e.top_logprobs};
}

void check_model(const ServerContext& ctx, const Json& body) {
  const Json* model = find_field(body, "model");
  if (model == nullptr) return;
  if (!model->is_string()) throw bad_request(fmt::format("'model' must be a string, got {}", json_type_name(*model)), "model");
  if (!ctx.accepts_model(model->get_ref<const std::string&>()))
    throw ApiError(404, fmt::format("The model `{}` does not exist (this server serves `{}`)", model->get<std::string>(), ctx.model_name()),
                   "model", "model_not_found");
}

// One generation answer, streamed or whole. Engine events arrive on the engine thread
// (on_engine_event) and are handed to the connection's strand, where everything else runs.
class GenerationExchange : public DeferredResponse, public std::enable_shared_from_this<GenerationExchange> {
 public:
  GenerationExchange(ServerContext& ctx, std::unique_ptr<ResponseFormatter> fmt, const GenerationRequest& g, Clock::time_point arrival,
                     CounterHold slot, CounterHold exchange)
      : ctx_(ctx),
        fmt_(std::move(fmt)),
        n_(g.request.params.n),
        logprobs_(g.request.params.logprobs),
        include_usage_(g.include_usage),
        stream_(g.stream),
        timer_(arrival, g.request.params.n),
        pending_(static_cast<size_t>(g.request.params.n)),
        choices_(static_cast<size_t>(g.request.params.n)),
        slot_(std::move(slot)),
        exchange_(std::move(exchange)) {}

  void set_handle(std::shared_ptr<RequestHandle> h) { handle_ = std::move(h); }

  // Engine thread: queue the event for the strand. Events queue up while a hand-over is pending,
  // so a connection that falls behind gets them in one batch (one handler, one write) instead of
  // one handler per token; events before start() wait for it.
  void on_engine_event(const EngineEvent& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_back(e);
    if (started_ && !handover_pending_) schedule_handover();
  }

  void start(std::weak_ptr<ResponseChannel> channel) override {
    channel_ = std::move(channel);
    if (stream_) {
      auto ch = channel_.lock();
      if (!ch) return;
      ch->begin_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
      for (int32_t i = 0; i < n_; ++i) {
        if (auto c = fmt_->stream_open(i)) ch->write(sse(*c));
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
    if (!queued_.empty()) schedule_handover();
  }

  void client_gone() override {
    if (ended_) return;
    if (handle_) handle_->cancel();
    end(RequestOutcome::kAborted);
  }

 private:
  // Called with mutex_ held.
  void schedule_handover() {
    auto ch = channel_.lock();
    if (!ch) return;
    handover_pending_ = true;
    ch->post([self = shared_from_this()] { self->take_events(); });
  }

  // On the strand: everything queued so far, in order.
  void take_events() {
    std::vector<EngineEvent> events;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events.swap(queued_);
      handover_pending_ = false;
    }
    for (const EngineEvent& e : events) on_event(e);
  }

  // On the strand.
  void on_event(const EngineEvent& e) {
    if (ended_) return;
    auto ch = channel_.lock();
    if (!ch) return;
    timer_.observe(e);
    if (e.index < 0 || e.index >= n_) return;  // not expected from the engine; never index out of range
    if (stream_) return on_stream_event(*ch, e);
    ChoiceResult& c = choices_[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case EngineEvent::Kind::kToken:
        c.text += e.text;
        if (logprobs_) c.steps.push_back(step_of(e));
        return;
      case EngineEvent::Kind::kFinish:
        c.text += e.text;
        c.finish_reason = e.finish_reason;
        aborted_ |= e.finish_reason == FinishReason::kAbort;
        return;
      case EngineEvent::Kind::kError:
        error_ = e.error;
        return;
      case EngineEvent::Kind::kDone: {
        // Counted before the answer goes out: a client that reads /metrics after its answer sees it.
        HttpResponse r;
        if (error_) {
          respond_error(r, ApiError(500, fmt::format("generation failed: {}", *error_)));
          end(RequestOutcome::kError);
        } else {
          r.set_content(dump_json(fmt_->response(choices_, e.usage)), "application/json");
          end(aborted_ ? RequestOutcome::kAborted : RequestOutcome::kSuccess);
        }
        ch->respond(std::move(r));
        return;
      }
    }
  }

  void on_stream_event(ResponseChannel& ch, const EngineEvent& e) {
    std::vector<TokenStep>& pending = pending_[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case EngineEvent::Kind::kToken:
        if (logprobs_) pending.push_back(step_of(e));
        // A token whose text is held back (part of a character or of a possible stop string)
        // travels with the next chunk that has text.
        if (e.text.empty()) return;
        return send_chunk(ch, e.index, e.text, std::nullopt);
      case EngineEvent::Kind::kFinish:
        if (e.finish_reason == FinishReason::kAbort) aborted_ = true;
        return send_chunk(ch, e.index, e.text, e.finish_reason);
      case EngineEvent::Kind::kError:
        error_ = e.error;
        ch.write(sse(ApiError(500, fmt::format("generation failed: {}", e.error)).body()));
        return;
      case EngineEvent::Kind::kDone:
        end(error_ ? RequestOutcome::kError : aborted_ ? RequestOutcome::kAborted : RequestOutcome::kSuccess);  // counted first
        if (include_usage_) ch.write(sse(fmt_->stream_usage(e.usage)));
        ch.write("data: [DONE]\n\n");
        ch.end_stream();
        return;
    }
  }

  void send_chunk(ResponseChannel& ch, int32_t index, const std::string& text, std::optional<FinishReason> finish) {
    std::vector<TokenStep>& pending = pending_[static_cast<size_t>(index)];
    ch.write(sse(fmt_->stream_chunk(index, text, pending, finish)));
    pending.clear();
  }

  void end(RequestOutcome outcome) {
    ended_ = true;
    ctx_.metrics().count_request(outcome);
    if (outcome == RequestOutcome::kSuccess) ctx_.metrics().observe_latency(timer_.latency());
    slot_.reset();
    exchange_.reset();
  }

  ServerContext& ctx_;
  std::unique_ptr<ResponseFormatter> fmt_;
  const int32_t n_;
  const bool logprobs_;
  const bool include_usage_;
  const bool stream_;
  RequestTimer timer_;
  std::vector<std::vector<TokenStep>> pending_;  // streaming, per choice: tokens not yet sent with text
  std::vector<ChoiceResult> choices_;            // whole answer, per choice
  std::optional<CounterHold> slot_;
  std::optional<CounterHold> exchange_;
  std::shared_ptr<RequestHandle> handle_;
  std::weak_ptr<ResponseChannel> channel_;
  std::optional<std::string> error_;
  bool aborted_ = false;
  bool ended_ = false;  // counted; nothing more is written

  std::mutex mutex_;  // guards started_, queued_, handover_pending_ and channel_ reads from the engine thread
  bool started_ = false;
  bool handover_pending_ = false;  // a take_events() is posted and has not yet taken the queue
  std::vector<EngineEvent> queued_;
};

}  // namespace

void handle_generation(ServerContext& ctx, Api api, const HttpRequest& req, HttpResponse& res) {
  const Clock::time_point arrival = Clock::now();
  CounterHold exchange = ctx.hold_exchange();
  ModelHost& host = ctx.host();
  const Json body = parse_json_object(req.body);
  check_model(ctx, body);
  GenerationRequest g = api == Api::kChat ? parse_chat_request(body, host.tokenizer(), host.chat_template())
                                          : parse_completion_request(body, host.tokenizer());
  // The key's defaults: its class unless the body names one, its tenant in place of `user`.
  if (!g.qos_given) g.request.qos = req.api_key && req.api_key->qos ? *req.api_key->qos : ctx.config().qos_default;
  if (req.api_key && !req.api_key->tenant.empty()) g.request.tenant = req.api_key->tenant;
  std::optional<CounterHold> slot = ctx.try_admit();
  if (!slot) {
    throw ApiError(429, fmt::format("too many requests in flight (at most {}); retry later", ctx.config().max_queue), "",
                   "rate_limit_exceeded");
  }
  ResponseContext rc;
  rc.id = ctx.new_id(api == Api::kChat ? "chatcmpl" : "cmpl");
  rc.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  rc.model = ctx.model_name();
  rc.tokenizer = &host.tokenizer();
  rc.include_usage = g.include_usage;
  std::unique_ptr<ResponseFormatter> fmt = api == Api::kChat ? make_chat_formatter(rc, g) : make_completion_formatter(rc, g);

  auto ex = std::make_shared<GenerationExchange>(ctx, std::move(fmt), g, arrival, std::move(*slot), std::move(exchange));
  // The connection owns the exchange; once it has closed, the engine's events have nowhere to go.
  g.request.on_event = [weak = std::weak_ptr<GenerationExchange>(ex)](const EngineEvent& e) {
    if (auto ex = weak.lock()) ex->on_engine_event(e);
  };
  std::shared_ptr<RequestHandle> handle;
  try {
    handle = host.engine().submit(std::move(g.request));
  } catch (const Error& e) {
    // submit refuses after Engine::shutdown began; that is the drain, not the client's fault.
    if (ctx.draining()) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    throw bad_request(e.what(), api == Api::kChat ? "messages" : "prompt");
  }
  ex->set_handle(std::move(handle));
  res.deferred = std::move(ex);
}

}  // namespace strata::server
