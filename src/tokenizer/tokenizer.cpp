#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm.h"
#include "tokenizer/wpm.h"

namespace strata {
namespace {

const std::string kEmpty;

// SentencePiece's whitespace escape: every space becomes U+2581.
void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(Vocab::from_gguf(file)));
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  splitter_ = std::make_unique<SpecialTokenSplitter>(vocab_);
  switch (vocab_.type()) {
    case VocabType::kSpm: spm_ = std::make_unique<SpmEncoder>(vocab_); break;
    case VocabType::kBpe: bpe_ = std::make_unique<BpeEncoder>(vocab_); break;
    case VocabType::kWpm: wpm_ = std::make_unique<WpmEncoder>(vocab_); break;
  }
  pieces_.reserve(static_cast<size_t>(vocab_.size()));
  for (TokenId id = 0; id < vocab_.size(); ++id) pieces_.push_back(make_token_piece(vocab_, id));

  // The newline token, found the way llama.cpp finds it.
  if (vocab_.type() == VocabType::kSpm) {
    nl_ = vocab_.byte_token('\n');
  } else if (vocab_.type() == VocabType::kWpm) {
    nl_ = vocab_.special().pad;
  } else {
    const std::vector<TokenId> ids = encode("\n", false, false);
    nl_ = ids.empty() ? vocab_.special().pad : ids.front();
  }
}

Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  const VocabFlags& flags = vocab_.flags();
  const SpecialTokens& sp = vocab_.special();
  const std::vector<Fragment> fragments = splitter_->split(text, parse_special);

  if (add_special && flags.add_bos) out.push_back(sp.bos);
  switch (vocab_.type()) {
    case VocabType::kSpm: {
      // SentencePiece prepends a space to the text; llama.cpp does so for every piece of text that
      // starts the input or follows a special token.
      bool after_special = true;
      std::string escaped;
      for (const Fragment& f : fragments) {
        if (!f.is_text()) {
          out.push_back(f.token);
          after_special = true;
          continue;
        }
        escaped.clear();
        if (flags.add_space_prefix && after_special) escaped += "\xE2\x96\x81";
        append_escaped(escaped, text.substr(f.offset, f.length));
        spm_->encode(escaped, out);
        after_special = false;
      }
      break;
    }
    case VocabType::kBpe:
      for (const Fragment& f : fragments) {
        if (f.is_text()) {
          bpe_->encode(text.substr(f.offset, f.length), out);
        } else {
          out.push_back(f.token);
        }
      }
      break;
    case VocabType::kWpm:
      for (const Fragment& f : fragments) {
        if (f.is_text()) {
          wpm_->encode(text.substr(f.offset, f.length), out);
        } else {
          out.push_back(f.token);
        }
      }
      break;
  }
  if (add_special && flags.add_eos) out.push_back(sp.eos);
  if (add_special && flags.add_sep && vocab_.type() == VocabType::kWpm) out.push_back(sp.sep);
  return out;
}

const std::string& Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  if (!render_special && is_control(id)) return kEmpty;
  return pieces_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string text;
  // The space SentencePiece prefixed to the text is not part of it. llama.cpp drops it from the first
  // token even when that token renders as nothing (a hidden BOS); Strata drops it from the first
  // piece that has text, so decode(encode(s, add_special=true)) == s as with Hugging Face.
  bool strip_space = vocab_.flags().add_space_prefix;
  for (const TokenId id : ids) {
    if (!is_valid(id)) fail("token id {} is out of range [0, {})", id, n_vocab());
    const std::string& piece = token_to_piece(id, render_special);
    if (piece.empty()) continue;
    if (strip_space && piece.front() == ' ') {
      text.append(piece, 1, std::string::npos);
    } else {
      text += piece;
    }
    strip_space = false;
  }
  if (vocab_.flags().clean_spaces) clean_up_tokenization_spaces(text);
  return text;
}

}  // namespace strata
