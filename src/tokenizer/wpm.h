// WordPiece for BERT-style embedding vocabularies, as llama.cpp (b4748) does it: each code point is
// replaced by the first code point of its canonical decomposition (so "é" becomes "e", while a
// combining mark written on its own, as in Devanagari, stays), control characters are dropped, the
// rest lowercased, and words are split at whitespace, punctuation, ASCII symbols and CJK ideographs.
// Then per word a greedy longest match from the word's start with the U+2581 word-start marker that
// GGUF WordPiece vocabularies use instead of "##" continuations. A word with an unmatchable part
// becomes the unknown token as a whole.
// tokenizer.ggml.normalizer.lowercase / strip_accents = false (keys b4748 does not read) turn off the
// lowercasing / the decomposition.
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
