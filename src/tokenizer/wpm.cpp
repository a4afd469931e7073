#include "tokenizer/wpm.h"

#include <algorithm>

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace strata {
namespace {

// CJK ideograph blocks as BERT's tokenizer lists them (its range ends at U+2CEAF past Extension E's
// start, and llama.cpp keeps that).
bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581

}  // namespace

// llama.cpp's llm_tokenizer_wpm_session::preprocess, code point by code point.
std::vector<std::string> WpmEncoder::split_words(std::string_view text) const {
  const VocabFlags& flags = vocab_.flags();
  std::vector<std::string> words(1);
  for (size_t pos = 0; pos < text.size();) {
    uint32_t c = utf8::decode_lenient(text, pos);
    // Past U+10FFFF llama.cpp throws out of llama_tokenize; Strata drops the code point.
    if (c > utf8::kMaxCodepoint) continue;
    // Not a full NFD: the marks of a precomposed letter go, a mark written on its own stays in its
    // word (and usually makes it [UNK]: the vocabulary has few marks as continuations).
    if (flags.strip_accents) c = unicode::nfd_first(c);
    if (unicode::is_whitespace(c)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (c == 0 || c == utf8::kReplacement) continue;
    const unicode::Category cat = unicode::category(c);
    if (cat == unicode::Category::kControl) continue;  // Cc, Cf, Co, Cs
    std::string s;
    utf8::append(s, flags.lowercase ? unicode::to_lower(c) : c);
    if (cat == unicode::Category::kPunctuation || (c < 0x7F && cat == unicode::Category::kSymbol) ||
        is_chinese_char(c)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WpmEncoder::encode(std::string_view text, std::vector<TokenId>& out) const {
  const size_t max_len = vocab_.max_token_length();
  std::string word;
  for (const std::string& w : split_words(text)) {
    word.assign(kWordStart);
    word += w;
    const size_t n = word.size();
    const size_t first = out.size();
    // Greedy longest match over byte positions, as llama.cpp does; one unmatchable position makes the
    // whole word the unknown token.
    for (size_t i = 0; i < n;) {
      size_t j = std::min(n, i + max_len + 1);
      TokenId id = kNoToken;
      for (; j > i; --j) {
        id = vocab_.find(std::string_view(word).substr(i, j - i));
        if (id != kNoToken) break;
      }
      if (id == kNoToken) {
        out.resize(first);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == first && vocab_.special().unk != kNoToken) out.push_back(vocab_.special().unk);
  }
}

}  // namespace strata
