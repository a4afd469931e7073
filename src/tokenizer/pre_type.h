// The BPE pre-tokenizer types that `tokenizer.ggml.pre` selects: for each, the regexes that split text
// into words (applied one after the other, as llama.cpp's llama-vocab.cpp lists them) and the
// tokenizer defaults that go with the type.
// Thread-safety: the table is immutable; callable from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct PreTokenizerType {
  std::string_view id;                   // the canonical name, e.g. "llama3"
  std::vector<std::string_view> regexes;  // PCRE2 syntax, applied in order to the pieces of the last
  bool clean_spaces = true;              // decode applies clean_up_tokenization_spaces
  bool ignore_merges = false;            // a word that is a whole token is not merged
  bool add_bos = false;                  // default of tokenizer.ggml.add_bos_token
  bool no_bos = false;                   // the type has no BOS token (ChatGLM)
};

// The type that the value of `tokenizer.ggml.pre` names, or nullptr when it is unknown or names a
// pre-tokenizer Strata does not implement. An empty name (key absent) means "default", as in llama.cpp.
const PreTokenizerType* find_pre_tokenizer_type(std::string_view pre);

// True when `pre` is a type llama.cpp knows but Strata does not implement (it needs custom code).
bool is_unsupported_pre_tokenizer_type(std::string_view pre);

// Every name find_pre_tokenizer_type accepts, comma-separated, for error messages.
std::string known_pre_tokenizer_names();

}  // namespace strata
