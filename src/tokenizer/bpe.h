// Byte-level BPE (llama.cpp's llm_tokenizer_bpe): the text is split into words by the vocabulary's
// pre-tokenizer regexes, each word is spelled in GPT-2's byte-level alphabet, and within a word the
// adjacent pair with the lowest merge rank (ties: leftmost) is merged until no merge applies.
// Symbols left that are not tokens are spelled byte by byte where single-byte tokens exist (what
// llama.cpp does; it drops the rest).
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
#include "tokenizer/pretokenizer.h"

namespace strata {

class Vocab;

class BpeEncoder {
 public:
  // Compiles the pre-tokenizer and indexes the merges. Preconditions: vocab.type() is BPE and
  // `vocab` outlives the encoder. Throws strata::Error when a regex does not compile.
  explicit BpeEncoder(const Vocab& vocab);

  // Appends the tokens of `text` (one piece of raw text between special tokens; any bytes: invalid
  // UTF-8 is read as U+FFFD, as llama.cpp does) to `out`.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    int32_t rank = 0;
    int32_t result = -1;  // symbol id of the merged text
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Scratch;

  // Symbol ids: token ids for token texts, ids >= n_vocab for other texts the merges mention.
  int32_t intern(std::string_view text);
  void encode_word(std::string_view word, Scratch& scratch, std::vector<TokenId>& out) const;

  const Vocab& vocab_;
  PreTokenizer pretokenizer_;
  PairMap<Merge> merges_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra_symbols_;
  std::array<int32_t, 256> byte_symbols_{};
};

}  // namespace strata
