// libFuzzer target for the server's request parsing: an HTTP body goes through what
// POST /v1/completions and POST /v1/chat/completions do before the engine sees it
// (parse_json_object, then parse_completion_request / parse_chat_request: every field, the
// sampling validation, the chat template, tokenization). Each body must either become a request
// or an ApiError 400 whose body serializes; any other exception, a crash or undefined behaviour is
// a finding. The chat path runs with ChatML (the vocabulary has no template) and with Llama 3.1's
// template, the real-world kind with raise_exception, loops and string slicing.
// The vocabulary is ../shared/tokenizer/ggml-vocab-llama-spm.gguf (or $STRATA_FUZZ_VOCAB), loaded once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "server/api_error.h"
#include "server/chat_api.h"
#include "server/completion_api.h"
#include "server/json_fields.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace strata;
using namespace strata::server;

struct Context {
  std::unique_ptr<GgufFile> vocab;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chatml;
  std::optional<ChatTemplate> llama3;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "request_fuzz: cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const Context& context() {
  static const Context* ctx = [] {
    auto* c = new Context();
    const char* env = std::getenv("STRATA_FUZZ_VOCAB");
    const std::string shared = STRATA_SHARED_DIR;
    c->vocab = GgufFile::open(env != nullptr ? env : shared + "/tokenizer/ggml-vocab-llama-spm.gguf");
    c->tokenizer = Tokenizer::from_gguf(*c->vocab);
    c->chatml.emplace(ChatTemplate::from_gguf(*c->vocab));
    c->llama3.emplace(read_text(shared + "/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), "<s>", "</s>");
    return c;
  }();
  return *ctx;
}

[[noreturn]] void finding(const char* what, std::string_view detail) {
  std::fprintf(stderr, "request_fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// What the HTTP layer does with a parsed request before submitting it: build the formatter and
// open every choice's stream.
void format(const GenerationRequest& g) {
  ResponseContext rc;
  rc.id = "fuzz";
  rc.model = "fuzz";
  rc.tokenizer = context().tokenizer.get();
  rc.include_usage = g.include_usage;
  auto fmt = g.api == Api::kChat ? make_chat_formatter(rc, g) : make_completion_formatter(rc, g);
  for (int32_t i = 0; i < g.request.params.n; ++i) {
    if (auto c = fmt->stream_open(i)) (void)dump_json(*c);
  }
}

template <typename Parse>
void run_one(const Json& body, Parse parse) {
  try {
    format(parse(body));
  } catch (const ApiError& e) {
    if (e.status() != 400) finding("an error other than 400", e.message());
    (void)dump_json(e.body());
  } catch (const std::exception& e) {
    finding("an exception other than ApiError", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Context& ctx = context();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json body;
  try {
    body = parse_json_object(text);
  } catch (const ApiError& e) {
    if (e.status() != 400) finding("an error other than 400", e.message());
    (void)dump_json(e.body());
    return 0;
  } catch (const std::exception& e) {
    finding("an exception other than ApiError", e.what());
  }
  run_one(body, [&](const Json& b) { return parse_completion_request(b, *ctx.tokenizer); });
  run_one(body, [&](const Json& b) { return parse_chat_request(b, *ctx.tokenizer, *ctx.chatml); });
  run_one(body, [&](const Json& b) { return parse_chat_request(b, *ctx.tokenizer, *ctx.llama3); });
  return 0;
}
