// A model's vocabulary as its GGUF `tokenizer.ggml.*` metadata describes it: token texts, scores and
// attributes, BPE merges, the special token ids and the flags that steer tokenization, with the
// defaults and the by-name detections llama.cpp applies (llama-vocab.cpp) where the file is silent.
// Thread-safety: immutable after from_gguf; any thread may read concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace strata {

class GgufFile;
struct PreTokenizerType;

enum class VocabType {
  kSpm,  // tokenizer.ggml.model = "llama": SentencePiece BPE over scores, byte fallback
  kBpe,  // "gpt2": byte-level BPE over merge ranks, regex pre-tokenizer
  kWpm,  // "bert": WordPiece longest match
};
std::string_view vocab_type_name(VocabType type);  // "SPM", "BPE", "WPM"

// The byte an SPM byte-token text "<0xXX>" stands for, or -1 when `text` is not of that form.
int parse_byte_token(std::string_view text);

// Token attribute bits (llama.cpp's llama_token_attr). tokenizer.ggml.token_type values map onto the
// first six; the strip bits come from per-model rules.
namespace token_attr {
inline constexpr uint32_t kUndefined = 0;
inline constexpr uint32_t kUnknown = 1u << 0;
inline constexpr uint32_t kUnused = 1u << 1;
inline constexpr uint32_t kNormal = 1u << 2;
inline constexpr uint32_t kControl = 1u << 3;
inline constexpr uint32_t kUserDefined = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;
inline constexpr uint32_t kLstrip = 1u << 7;  // eat whitespace before the token when splitting it out
inline constexpr uint32_t kRstrip = 1u << 8;  // eat whitespace after it
}  // namespace token_attr

// Special token ids; kNoToken where the vocabulary has none.
struct SpecialTokens {
  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId eot = kNoToken;
  TokenId eom = kNoToken;
  TokenId unk = kNoToken;
  TokenId sep = kNoToken;
  TokenId pad = kNoToken;
  TokenId mask = kNoToken;
  TokenId fim_pre = kNoToken;
  TokenId fim_suf = kNoToken;
  TokenId fim_mid = kNoToken;
  TokenId fim_pad = kNoToken;
  TokenId fim_rep = kNoToken;
  TokenId fim_sep = kNoToken;
};

struct VocabFlags {
  bool add_bos = false;             // encode(add_special) starts with BOS
  bool add_eos = false;             // encode(add_special) ends with EOS
  bool add_sep = false;             // WPM: encode(add_special) ends with SEP
  bool add_space_prefix = false;    // SPM: a space before text that starts the input or follows a special token
  bool clean_spaces = false;        // decode removes spaces before punctuation (clean_up_tokenization_spaces)
  bool ignore_merges = false;       // BPE: a word that is a whole token is taken as is
  bool lowercase = true;            // WPM normalizer
  bool strip_accents = true;        // WPM normalizer
};

class Vocab {
 public:
  // Reads the tokenizer of `file` (a model or a vocabulary-only GGUF). Throws strata::Error naming
  // the file and the key or value at fault: missing tokens, unknown tokenizer model, unknown or
  // unsupported pre-tokenizer type, arrays shorter than the token list, add_bos without a BOS id.
  static Vocab from_gguf(const GgufFile& file);

  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabType type() const { return type_; }
  const std::string& model() const { return model_; }  // tokenizer.ggml.model
  const std::string& pre() const { return pre_; }      // tokenizer.ggml.pre, "" when absent
  // The pre-tokenizer of a BPE vocabulary; nullptr for SPM and WPM.
  const PreTokenizerType* pre_type() const { return pre_type_; }

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool contains(TokenId id) const { return id >= 0 && id < size(); }
  // Preconditions for the per-token accessors: contains(id).
  const std::string& text(TokenId id) const { return texts_[static_cast<size_t>(id)]; }
  float score(TokenId id) const { return scores_[static_cast<size_t>(id)]; }
  uint32_t attr(TokenId id) const { return attrs_[static_cast<size_t>(id)]; }
  bool has_attr(TokenId id, uint32_t mask) const { return (attr(id) & mask) != 0; }

  // The id whose text is exactly `text`, or kNoToken.
  TokenId find(std::string_view text) const;
  // The token standing for one raw byte (SPM "<0xXX>", BPE byte-level character), or kNoToken.
  TokenId byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  // Length in bytes of the longest token text.
  size_t max_token_length() const { return max_token_length_; }

  const SpecialTokens& special() const { return special_; }
  const VocabFlags& flags() const { return flags_; }
  // End-of-generation tokens (EOS, EOT, EOM and the tokens llama.cpp recognises by text), ascending.
  const std::vector<TokenId>& eog_tokens() const { return eog_; }
  bool is_eog(TokenId id) const;
  // Control, user-defined and unknown tokens, longest text first: the tokens split out of raw text.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }
  // BPE merges "left right", highest priority first.
  const std::vector<std::string>& merges() const { return merges_; }

 private:
  Vocab() = default;
  void detect_special_tokens();
  void collect_eog_tokens();
  void apply_model_specific_attrs(const GgufFile& file);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  VocabType type_ = VocabType::kSpm;
  std::string model_;
  std::string pre_;
  const PreTokenizerType* pre_type_ = nullptr;
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> ids_;
  std::array<TokenId, 256> byte_tokens_{};
  size_t max_token_length_ = 0;
  SpecialTokens special_;
  VocabFlags flags_;
  std::vector<TokenId> eog_;
  std::vector<TokenId> special_tokens_;
  std::vector<std::string> merges_;
};

}  // namespace strata
