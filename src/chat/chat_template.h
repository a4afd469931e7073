// Chat templates: turning a conversation (OpenAI-style messages) into the prompt text a model
// was trained on, by rendering the model's Jinja chat template the way Hugging Face's
// apply_chat_template does (see jinja/template.h for the dialect).
//
//   ChatTemplate t = ChatTemplate::from_gguf(*gguf);       // or ChatTemplate(src, bos, eos)
//   std::string prompt = t.apply(messages, /*add_generation_prompt=*/true);
//
// Errors: construction throws jinja::TemplateSyntaxError for a malformed template; apply()
// throws jinja::RaiseException when the template rejects the conversation (its message is
// meant for the client, e.g. an HTTP 400) and jinja::TemplateRuntimeError otherwise.
// Thread-safety: immutable after construction; apply() may run on many threads at once.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "jinja/template.h"

namespace strata {

class GgufFile;

class ChatTemplate {
 public:
  // Parses `source` once; bos_token/eos_token are the texts of the model's special tokens,
  // available to the template as variables.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);

  // Renders the conversation. Variables: `messages`, `add_generation_prompt`, `bos_token`,
  // `eos_token`, plus every key of `extra_vars` (a JSON object, e.g. "tools", "date_string");
  // extra_vars may override bos_token/eos_token but not the two explicit arguments.
  // Precondition: messages is a JSON array (anything else is what the template sees).
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json::object(),
                    const jinja::RenderOptions& options = {}) const;

  // The ChatML template, used when a model ships without one.
  static std::string chatml();

  // The template from GGUF metadata (`tokenizer.chat_template`, ChatML when absent) with the
  // texts of the BOS and EOS tokens (`tokenizer.ggml.tokens` at `tokenizer.ggml.bos_token_id` /
  // `eos_token_id`; "" when an id is absent). Throws strata::Error for an id outside the
  // vocabulary and jinja::TemplateSyntaxError for a malformed template.
  static ChatTemplate from_gguf(const GgufFile& file);

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  jinja::Template template_;
};

}  // namespace strata
