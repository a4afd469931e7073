#include "tokenizer/detokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace strata {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

}  // namespace

std::string make_token_piece(const Vocab& vocab, TokenId id) {
  const std::string& text = vocab.text(id);
  if (vocab.has_attr(id, token_attr::kControl | token_attr::kUnknown | token_attr::kUserDefined)) return text;
  if (vocab.has_attr(id, token_attr::kNormal)) {
    if (vocab.type() != VocabType::kBpe) return unescape_spaces(text);
    std::string bytes;
    if (byte_level::decode(text, bytes)) return bytes;
    return text;
  }
  if (vocab.has_attr(id, token_attr::kByte)) {
    const int b = parse_byte_token(text);
    if (b >= 0) return std::string(1, static_cast<char>(b));
    // A byte-typed token of a byte-level vocabulary spells its byte in the byte alphabet.
    std::string bytes;
    if (byte_level::decode(text, bytes)) return bytes;
    return text;
  }
  return {};
}

void clean_up_tokenization_spaces(std::string& text) {
  // A literal port of llama.cpp's three in-place passes, including the NUL that pass 2 writes over
  // the space it removes (so that space no longer counts as the previous character).
  std::string& t = text;
  size_t total = t.size();
  {  // " ?", " !", " .", " ,"
    const size_t n = total;
    total = n > 0 ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = t[i];
      if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
      t[total++] = x;
    }
  }
  {  // " ' " -> "'"
    const size_t n = total;
    total = n > 0 ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = t[i];
      if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
        --total;
        t[++i] = '\0';
      }
      t[total++] = x;
    }
  }
  {  // " 's", " 'm", " 're", " 've" lose the space; " 't", " 'd", " 'll" keep it
    const size_t n = total;
    total = n > 0 ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = t[i];
      if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
        const char x1 = t[i + 1];
        if (x1 == 's' || x1 == 'm') {
          --total;
        } else if (i + 2 < n) {
          const char x2 = t[i + 2];
          if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
        }
      }
      t[total++] = x;
    }
  }
  t.resize(total);
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string IncrementalDetokenizer::push(TokenId id) {
  if (!tokenizer_.is_valid(id)) fail("token id {} is out of range [0, {})", id, tokenizer_.n_vocab());
  pending_ += tokenizer_.token_to_piece(id, render_special_);
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::StepResult r = utf8::next_strict(std::string_view(pending_).substr(pos));
    if (r.step == utf8::Step::kIncomplete) break;
    if (r.step == utf8::Step::kComplete) {
      out.append(pending_, pos, r.length);
    } else {
      out += kReplacementUtf8;
    }
    pos += r.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::StepResult r = utf8::next_strict(std::string_view(pending_).substr(pos));
    if (r.step == utf8::Step::kComplete) {
      out.append(pending_, pos, r.length);
    } else {
      out += kReplacementUtf8;  // an incomplete tail can no longer be completed
    }
    pos += r.length;
  }
  pending_.clear();
  return out;
}

}  // namespace strata
