// WordPiece for BERT-style embedding vocabularies (llama.cpp's llm_tokenizer_wpm): a BertNormalizer-
// like pass (drop control characters, lowercase, strip accents through NFD, split at whitespace,
// punctuation, ASCII symbols and CJK ideographs), then per word a greedy longest match from the
// word's start with the U+2581 word-start marker that GGUF WordPiece vocabularies use instead of
// "##" continuations. A word with an unmatchable part becomes the unknown token.
// Thread-safety: immutable after construction; encode() may run concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace strata {

class Vocab;

class WpmEncoder {
 public:
  // Precondition: `vocab` outlives the encoder.
  explicit WpmEncoder(const Vocab& vocab) : vocab_(vocab) {}

  // Appends the tokens of `text` (any bytes; ill-formed UTF-8 is dropped) to `out`.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

  // The normalized words of `text` (exposed for tests).
  std::vector<std::string> split_words(std::string_view text) const;

 private:
  const Vocab& vocab_;
};

}  // namespace strata
