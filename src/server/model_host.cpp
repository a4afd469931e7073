#include "server/model_host.h"

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace strata::server {
namespace {

[[noreturn]] void fail_template(bool from_flag, const jinja::TemplateSyntaxError& e) {
  fail("the chat template {}: {} (use --chat-template FILE to give another)", from_flag ? "of --chat-template" : "in the model", e.what());
}

struct TextSide {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
};

// The tokenizer and chat template of `file`, checked against the model's vocabulary size.
TextSide load_text_side(const GgufFile& file, int64_t n_vocab, const std::optional<std::string>& template_source) {
  TextSide t;
  t.tokenizer = Tokenizer::from_gguf(file);
  if (t.tokenizer->n_vocab() != n_vocab) fail("the tokenizer has {} tokens but the model {}", t.tokenizer->n_vocab(), n_vocab);
  try {
    if (template_source) {
      const Tokenizer& tok = *t.tokenizer;
      auto text = [&](TokenId id) { return id == kNoToken ? std::string() : tok.token_text(id); };
      t.chat_template = std::make_unique<ChatTemplate>(*template_source, text(tok.bos()), text(tok.eos()));
    } else {
      t.chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(file));
    }
  } catch (const jinja::TemplateSyntaxError& e) {
    fail_template(template_source.has_value(), e);
  }
  return t;
}

}  // namespace

void ModelHost::check_model(const Options& options) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(options.model_path);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  ModelWeights::check(*file, config);
  for (int32_t r = 0; r < options.tensor_parallel && options.tensor_parallel > 1; ++r) tp_shard(config, r, options.tensor_parallel);
  load_text_side(*file, config.n_vocab, options.chat_template_source);
}

void ModelHost::check_chat_template(const std::string& source) {
  try {
    ChatTemplate(source, "", "");
  } catch (const jinja::TemplateSyntaxError& e) {
    fail_template(true, e);
  }
}

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
    BackendOptions backend{options_.device, options_.n_threads};
    backend.tensor_parallel = options_.tensor_parallel;
    model_ = Model::load(options_.model_path, backend);
    TextSide text = load_text_side(model_->file(), model_->config().n_vocab, options_.chat_template_source);
    tokenizer_ = std::move(text.tokenizer);
    template_ = std::move(text.chat_template);
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
