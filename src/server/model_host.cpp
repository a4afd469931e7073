#include "server/model_host.h"

#include "core/error.h"
#include "model/model.h"

namespace strata::server {

ModelHost::ModelHost(Options options) : options_(std::move(options)) {}

ModelHost::~ModelHost() {
  wait_loaded();
  if (engine_) engine_->shutdown(false);
}

void ModelHost::start(std::function<void()> on_done) {
  on_done_ = std::move(on_done);
  loader_ = std::thread([this] { load(); });
}

void ModelHost::wait_loaded() {
  if (loader_.joinable()) loader_.join();
}

void ModelHost::load() {
  try {
    model_ = Model::load(options_.model_path, BackendOptions{options_.device, options_.n_threads});
    tokenizer_ = Tokenizer::from_gguf(model_->file());
    if (tokenizer_->n_vocab() != model_->config().n_vocab)
      fail("the tokenizer has {} tokens but the model {}", tokenizer_->n_vocab(), model_->config().n_vocab);
    try {
      if (options_.chat_template_source) {
        auto text = [&](TokenId id) { return id == kNoToken ? std::string() : tokenizer_->token_text(id); };
        template_ = std::make_unique<ChatTemplate>(*options_.chat_template_source, text(tokenizer_->bos()), text(tokenizer_->eos()));
      } else {
        template_ = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(model_->file()));
      }
    } catch (const jinja::TemplateSyntaxError& e) {
      fail("the chat template {}: {} (use --chat-template FILE to give another)",
           options_.chat_template_source ? "of --chat-template" : "in the model", e.what());
    }
    engine_ = std::make_unique<Engine>(*model_, *tokenizer_, options_.engine);
    state_.store(State::kReady, std::memory_order_release);
  } catch (...) {
    failure_ = std::current_exception();
    state_.store(State::kFailed, std::memory_order_release);
  }
  if (on_done_) on_done_();
}

void ModelHost::rethrow_failure() const { std::rethrow_exception(failure_); }

void ModelHost::shutdown_engine(bool drain, std::chrono::milliseconds timeout) {
  if (ready()) engine_->shutdown(drain, timeout);
}

}  // namespace strata::server
