// The tokenizer of a GGUF model: text -> token ids -> text, for SPM (Llama/SentencePiece), byte-level
// BPE (GPT-2, Llama 3, Qwen, DeepSeek, ... with the pre-tokenizer `tokenizer.ggml.pre` names) and
// WPM (BERT embedding models) vocabularies, matching llama.cpp token for token.
//
// Thread-safety: immutable after from_gguf; every method is const and may be called from any number
// of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "tokenizer/vocab.h"

namespace strata {

class GgufFile;
class SpmEncoder;
class BpeEncoder;
class WpmEncoder;
class SpecialTokenSplitter;

class Tokenizer {
 public:
  // Builds the tokenizer from the `tokenizer.ggml.*` metadata of `file` (model or vocabulary-only);
  // the tokenizer copies what it needs and does not keep `file`. Throws strata::Error naming the file
  // and the problem (no tokenizer, unknown model or pre-tokenizer type, malformed arrays).
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes). `add_special`: add BOS/EOS (WPM: CLS/SEP) as the vocabulary's
  // add_bos/add_eos/add_sep flags say. `parse_special`: control tokens written in the text (such as
  // "<|im_start|>") become their ids; otherwise they are tokenized as plain text. User-defined tokens
  // are always recognised, as in llama.cpp and Hugging Face.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Text of `ids`: the pieces concatenated, without control/unknown tokens unless `render_special`;
  // for SPM vocabularies the space prefix that encode adds is removed from the first piece that has
  // text; BPE vocabularies whose tokenizer cleans up tokenization spaces do so. The result may hold
  // ill-formed UTF-8 if the ids split a character (use IncrementalDetokenizer to stream).
  // Throws strata::Error naming the first id outside [0, n_vocab).
  std::string decode(std::span<const TokenId> ids, bool render_special) const;

  // The bytes of one token: "" for control and unknown tokens unless `render_special`.
  // Precondition: is_valid(id).
  const std::string& token_to_piece(TokenId id, bool render_special) const;

  int32_t n_vocab() const { return vocab_.size(); }
  bool is_valid(TokenId id) const { return vocab_.contains(id); }
  // Preconditions for the per-token accessors: is_valid(id).
  const std::string& token_text(TokenId id) const { return vocab_.text(id); }
  float token_score(TokenId id) const { return vocab_.score(id); }
  uint32_t token_attr(TokenId id) const { return vocab_.attr(id); }
  // Control or unknown: not part of the text, hidden by decode unless render_special.
  bool is_control(TokenId id) const { return vocab_.has_attr(id, token_attr::kControl | token_attr::kUnknown); }

  // Special ids; kNoToken when the vocabulary has none.
  TokenId bos() const { return vocab_.special().bos; }
  TokenId eos() const { return vocab_.special().eos; }
  TokenId eot() const { return vocab_.special().eot; }
  TokenId eom() const { return vocab_.special().eom; }
  TokenId unk() const { return vocab_.special().unk; }
  TokenId pad() const { return vocab_.special().pad; }
  TokenId sep() const { return vocab_.special().sep; }
  TokenId nl() const { return nl_; }  // the token of "\n"
  bool add_bos() const { return vocab_.flags().add_bos; }
  bool add_eos() const { return vocab_.flags().add_eos; }

  // End of generation: EOS, EOT, EOM and the other tokens llama.cpp collects by text
  // ("<|im_end|>", "<end_of_turn>", "<|endoftext|>", ...).
  bool is_eog(TokenId id) const { return vocab_.is_eog(id); }
  const std::vector<TokenId>& eog_tokens() const { return vocab_.eog_tokens(); }

  VocabType type() const { return vocab_.type(); }
  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);

  Vocab vocab_;
  std::unique_ptr<SpecialTokenSplitter> splitter_;
  std::unique_ptr<SpmEncoder> spm_;
  std::unique_ptr<BpeEncoder> bpe_;
  std::unique_ptr<WpmEncoder> wpm_;
  std::vector<std::string> pieces_;  // token_to_piece(id, true) of every token
  TokenId nl_ = kNoToken;
};

}  // namespace strata
