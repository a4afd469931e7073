#include "server/generation_handler.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "core/error.h"
#include "server/chat_api.h"
#include "server/completion_api.h"
#include "server/json_fields.h"

namespace strata::server {
namespace {

using Clock = std::chrono::steady_clock;

// How long one call of the stream provider waits for an event before letting httplib check for
// shutdown; and after how much silence a comment line is sent, which also finds clients that left
// while their request waited in the queue.
constexpr auto kEventPoll = std::chrono::milliseconds(100);
constexpr auto kKeepAliveInterval = std::chrono::seconds(10);

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

// The state of one streamed response, shared by httplib's content provider and releaser.
class EventStream {
 public:
  EventStream(ServerContext& ctx, std::shared_ptr<RequestHandle> handle, std::unique_ptr<ResponseFormatter> fmt,
              const GenerationRequest& g, Clock::time_point arrival, CounterHold slot, CounterHold exchange)
      : ctx_(ctx),
        handle_(std::move(handle)),
        fmt_(std::move(fmt)),
        n_(g.request.params.n),
        logprobs_(g.request.params.logprobs),
        include_usage_(g.include_usage),
        timer_(arrival, g.request.params.n),
        pending_(static_cast<size_t>(g.request.params.n)),
        slot_(std::move(slot)),
        exchange_(std::move(exchange)) {}

  // httplib calls this until sink.done() or a false return; false means the client is gone.
  bool pump(httplib::DataSink& sink) {
    if (!opened_) {
      opened_ = true;
      for (int32_t i = 0; i < n_; ++i) {
        if (auto c = fmt_->stream_open(i); c && !write(sink, sse(*c))) return false;
      }
    }
    EngineEvent e;
    const std::optional<bool> got = handle_->next_for(e, kEventPoll);
    if (!got) {
      if (Clock::now() - last_write_ >= kKeepAliveInterval) return write(sink, ": keep-alive\n\n");
      return true;
    }
    if (!*got) return finish(sink);  // the engine went away without kDone: end the stream
    timer_.observe(e);
    if (e.index < 0 || e.index >= n_) return true;  // not expected from the engine; never index out of range
    std::vector<TokenStep>& pending = pending_[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case EngineEvent::Kind::kToken:
        if (logprobs_) pending.push_back(step_of(e));
        // A token whose text is held back (part of a character or of a possible stop string)
        // travels with the next chunk that has text.
        if (e.text.empty()) return true;
        return send_chunk(sink, e.index, e.text, std::nullopt);
      case EngineEvent::Kind::kFinish:
        if (e.finish_reason == FinishReason::kAbort) aborted_ = true;
        return send_chunk(sink, e.index, e.text, e.finish_reason);
      case EngineEvent::Kind::kError:
        failed_ = true;
        return write(sink, sse(ApiError(500, fmt::format("generation failed: {}", e.error)).body()));
      case EngineEvent::Kind::kDone:
        if (include_usage_ && !write(sink, sse(fmt_->stream_usage(e.usage)))) return false;
        return finish(sink);
    }
    return true;
  }

  // httplib's releaser: runs when the response is destroyed, whether or not the stream completed.
  void release() {
    if (!completed_) handle_->cancel();
    RequestOutcome outcome = RequestOutcome::kSuccess;
    if (!completed_ || aborted_) outcome = RequestOutcome::kAborted;
    else if (failed_) outcome = RequestOutcome::kError;
    ctx_.metrics().count_request(outcome);
    if (completed_ && outcome == RequestOutcome::kSuccess) ctx_.metrics().observe_latency(timer_.latency());
  }

 private:
  bool send_chunk(httplib::DataSink& sink, int32_t index, const std::string& text, std::optional<FinishReason> finish) {
    std::vector<TokenStep>& pending = pending_[static_cast<size_t>(index)];
    const bool ok = write(sink, sse(fmt_->stream_chunk(index, text, pending, finish)));
    pending.clear();
    return ok;
  }

  bool finish(httplib::DataSink& sink) {
    if (!write(sink, "data: [DONE]\n\n")) return false;
    completed_ = true;
    sink.done();
    return true;
  }

  // httplib ends the stream on an empty write, so `bytes` is never empty here.
  bool write(httplib::DataSink& sink, const std::string& bytes) {
    if (!sink.write(bytes.data(), bytes.size())) {
      handle_->cancel();
      return false;
    }
    last_write_ = Clock::now();
    return true;
  }

  ServerContext& ctx_;
  std::shared_ptr<RequestHandle> handle_;
  std::unique_ptr<ResponseFormatter> fmt_;
  int32_t n_;
  bool logprobs_;
  bool include_usage_;
  RequestTimer timer_;
  std::vector<std::vector<TokenStep>> pending_;  // per choice: tokens not yet sent with text
  CounterHold slot_;
  CounterHold exchange_;
  Clock::time_point last_write_ = Clock::now();
  bool opened_ = false;
  bool completed_ = false;  // [DONE] written
  bool aborted_ = false;
  bool failed_ = false;
};

void respond_whole(ServerContext& ctx, RequestHandle& handle, ResponseFormatter& fmt, const GenerationRequest& g,
                   Clock::time_point arrival, httplib::Response& res) {
  const int32_t n = g.request.params.n;
  std::vector<ChoiceResult> choices(static_cast<size_t>(n));
  RequestTimer timer(arrival, n);
  Usage usage;
  bool done = false, aborted = false;
  std::optional<std::string> error;
  EngineEvent e;
  while (handle.next(e)) {
    timer.observe(e);
    if (e.index < 0 || e.index >= n) continue;
    ChoiceResult& c = choices[static_cast<size_t>(e.index)];
    switch (e.kind) {
      case EngineEvent::Kind::kToken:
        c.text += e.text;
        if (g.request.params.logprobs) c.steps.push_back(step_of(e));
        break;
      case EngineEvent::Kind::kFinish:
        c.text += e.text;
        c.finish_reason = e.finish_reason;
        aborted |= e.finish_reason == FinishReason::kAbort;
        break;
      case EngineEvent::Kind::kError:
        error = e.error;
        break;
      case EngineEvent::Kind::kDone:
        usage = e.usage;
        done = true;
        break;
    }
  }
  if (error) throw ApiError(500, fmt::format("generation failed: {}", *error));
  if (!done) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  res.status = 200;
  res.set_content(dump_json(fmt.response(choices, usage)), "application/json");
  ctx.metrics().count_request(aborted ? RequestOutcome::kAborted : RequestOutcome::kSuccess);
  if (!aborted) ctx.metrics().observe_latency(timer.latency());
}

}  // namespace

void handle_generation(ServerContext& ctx, Api api, const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  CounterHold exchange = ctx.hold_exchange();
  ModelHost& host = ctx.host();
  const Json body = parse_json_object(req.body);
  check_model(ctx, body);
  GenerationRequest g = api == Api::kChat ? parse_chat_request(body, host.tokenizer(), host.chat_template())
                                          : parse_completion_request(body, host.tokenizer());
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

  std::shared_ptr<RequestHandle> handle;
  try {
    handle = host.engine().submit(g.request);
  } catch (const Error& e) {
    // submit refuses after Engine::shutdown began; that is the drain, not the client's fault.
    if (ctx.draining()) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    throw bad_request(e.what(), api == Api::kChat ? "messages" : "prompt");
  }

  if (!g.stream) {
    respond_whole(ctx, *handle, *fmt, g, arrival, res);
    return;
  }
  auto stream = std::make_shared<EventStream>(ctx, std::move(handle), std::move(fmt), g, arrival, std::move(*slot), std::move(exchange));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->pump(sink); },
      [stream](bool) { stream->release(); });
}

}  // namespace strata::server
