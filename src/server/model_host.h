// The model, its tokenizer and chat template, and the engine that runs them, loaded on a background
// thread so that the HTTP server listens (and answers /health with 503) while a large model maps.
//
// States: loading -> ready, or loading -> failed (the load threw; rethrow_failure() rethrows it).
// Thread-safety: state() from any thread; model()/tokenizer()/chat_template()/engine() from any
// thread once state() returned kReady (they never change afterwards; the engine is itself
// thread-safe). start(), wait_loaded() and shutdown_engine() from the owning thread.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "engine/engine.h"

namespace strata::server {

class ModelHost {
 public:
  struct Options {
    std::string model_path;
    int n_threads = 0;                                // 0 = one per physical core
    EngineConfig engine;
    std::optional<std::string> chat_template_source;  // overrides the model's tokenizer.chat_template
    DeviceKind device = DeviceKind::kAuto;
    int tensor_parallel = 1;                          // --tensor-parallel
  };
  enum class State { kLoading, kReady, kFailed };

  // Before anything listens: opens the model file and checks what the background load would
  // refuse without a backend — the GGUF structure (a truncated file), the hyper-parameters, every
  // tensor's presence and shape, the tokenizer and the chat template (the model's, or the one of
  // chat_template_source). Throws strata::Error naming the problem. Reads only metadata and the
  // tensor table (the weights stay unread).
  static void check_model(const Options& options);
  // Whether a --chat-template source parses; throws strata::Error with the message the load gives.
  static void check_chat_template(const std::string& source);

  explicit ModelHost(Options options);
  ~ModelHost();  // waits for the loader, then stops the engine without draining
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  // Starts loading. `on_done` runs on the loader thread once the state is kReady or kFailed.
  void start(std::function<void()> on_done);
  State state() const { return state_.load(std::memory_order_acquire); }
  bool ready() const { return state() == State::kReady; }
  // Blocks until the loader thread has finished (either way).
  void wait_loaded();
  // Precondition: state() == kFailed. Rethrows what the load threw.
  [[noreturn]] void rethrow_failure() const;

  // Preconditions: ready().
  Engine& engine() { return *engine_; }
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return *template_; }

  // Engine::shutdown when ready (see there); nothing otherwise.
  void shutdown_engine(bool drain, std::chrono::milliseconds timeout);

 private:
  void load();

  Options options_;
  std::atomic<State> state_{State::kLoading};
  std::exception_ptr failure_;
  std::function<void()> on_done_;
  std::thread loader_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace strata::server
