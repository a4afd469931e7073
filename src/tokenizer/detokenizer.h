// From tokens back to text: the bytes each token stands for, the clean-up of tokenization spaces, and
// an incremental detokenizer for streaming that only ever emits well-formed UTF-8.
// Thread-safety: the free functions are pure; see IncrementalDetokenizer for the class.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/types.h"

namespace strata {

class Tokenizer;
class Vocab;

// The bytes token `id` stands for when special tokens are rendered (llama.cpp's token_to_piece with
// special = true): control, unknown and user-defined tokens as their text; SPM and WPM tokens with
// U+2581 turned back into spaces; byte-level BPE tokens through GPT-2's byte alphabet (a token with a
// character outside it keeps its UTF-8 text, as Hugging Face's ByteLevel decoder does); <0xXX> byte
// tokens as their byte; unused and undefined tokens as nothing. Precondition: vocab.contains(id).
std::string make_token_piece(const Vocab& vocab, TokenId id);

// Hugging Face's clean_up_tokenization_spaces as llama.cpp applies it: " ?", " !", " .", " ,"
// lose their space, " ' " becomes "'", and " 's", " 'm", " 're", " 've" lose the space before the
// apostrophe.
void clean_up_tokenization_spaces(std::string& text);

// Turns a stream of token ids into text chunks that are always well-formed UTF-8: bytes of a
// character split across tokens (byte-fallback tokens, byte-level BPE pieces) are held back until
// the character is complete; bytes that can never form a character become U+FFFD. Pieces are
// concatenated as they are (no leading-space removal, no space clean-up): the tokens are taken to
// continue a prompt.
// Thread-safety: not thread-safe; one instance per stream. The Tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool render_special = false);

  // Adds a token and returns the text that is now complete (possibly empty).
  // Throws strata::Error when `id` is not in the vocabulary.
  std::string push(TokenId id);

  // Ends the stream: returns what is held back, each incomplete sequence as U+FFFD.
  std::string flush();

  // Bytes held back, waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace strata
