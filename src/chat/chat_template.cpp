#include "chat/chat_template.h"

#include "gguf/gguf_file.h"

namespace strata {
namespace {

// The text of token `key` (an id into tokenizer.ggml.tokens), or "" when the id is absent.
std::string special_token_text(const GgufFile& file, std::string_view key) {
  std::optional<uint64_t> id = file.find_uint(key);
  if (!id) return "";
  const GgufArray& tokens = file.get_array("tokenizer.ggml.tokens");
  if (*id >= tokens.items.size())
    fail("{} is {} but the vocabulary has only {} tokens", key, *id, tokens.items.size());
  return tokens.items[static_cast<size_t>(*id)].as_string();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      template_(jinja::Template::parse(source_)) {}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& extra_vars, const jinja::RenderOptions& options) const {
  // Borrowed, not copied: messages can be large (and nlohmann's copy recurses).
  const nlohmann::ordered_json bos = bos_token_;
  const nlohmann::ordered_json eos = eos_token_;
  const nlohmann::ordered_json gen = add_generation_prompt;
  jinja::Template::Variables vars = {{"bos_token", &bos}, {"eos_token", &eos}};
  if (extra_vars.is_object())
    for (const auto& [k, v] : extra_vars.items()) vars.emplace_back(k, &v);
  vars.emplace_back("messages", &messages);
  vars.emplace_back("add_generation_prompt", &gen);
  return template_.render_vars(vars, options);
}

std::string ChatTemplate::chatml() {
  return "{% for message in messages %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
         "{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  std::optional<std::string> source = file.find_string("tokenizer.chat_template");
  return ChatTemplate(source ? *source : chatml(), special_token_text(file, "tokenizer.ggml.bos_token_id"),
                      special_token_text(file, "tokenizer.ggml.eos_token_id"));
}

}  // namespace strata
