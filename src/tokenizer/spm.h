// SentencePiece-style BPE (llama.cpp's llm_tokenizer_spm): the text is split into UTF-8 characters,
// then the adjacent pair whose concatenation is the vocabulary token with the highest score is merged
// (ties: leftmost first) until no pair forms a token; symbols that are not tokens fall back to
// <0xXX> byte tokens. SPM does not pre-split words, but no merge can cross a place between two
// characters that are never adjacent inside a token, so the text is cut there and each piece is merged
// on its own: the same result as merging the whole text at once, with small heaps.
// Thread-safety: immutable after construction; encode() may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/types.h"
#include "tokenizer/pair_map.h"

namespace strata {

class Vocab;

class SpmEncoder {
 public:
  // Precondition: `vocab` outlives the encoder.
  explicit SpmEncoder(const Vocab& vocab);

  // Appends the tokens of `text` to `out`. `text` is what the model's SentencePiece sees: the caller
  // has already added the space prefix and replaced spaces by U+2581. Any bytes are accepted.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    TokenId token = kNoToken;
    float score = 0.0f;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // Symbol id of a one-character symbol: its token id, an id >= n_vocab for a character that occurs
  // only inside tokens, or -1 when it can never merge nor stand alone.
  int32_t char_symbol(std::string_view c) const;
  int32_t intern_char(std::string_view c);

  const Vocab& vocab_;
  struct Segment;
  void encode_segment(std::string_view text, Segment& seg, std::vector<TokenId>& out) const;

  PairMap<Merge> merges_;  // (left symbol, right symbol) -> token of their concatenation
  PairMap<bool> adjacent_chars_;  // characters that follow each other inside some token
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra_chars_;
  std::array<int32_t, 128> ascii_symbols_{};
};

}  // namespace strata
