#include "tokenizer/spm.h"

#include <algorithm>

#include "tokenizer/bigram_merge.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace strata {
namespace {

using Symbol = MergeSymbol;
using Bigram = MergePair<float>;

// Heap order: highest score first, then leftmost (llama.cpp's llm_bigram_spm::comparator).
bool lower_priority(const Bigram& a, const Bigram& b) {
  return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
}

// Byte offsets where the characters of `s` start, by the lead-byte rule the encoder splits text with.
void char_starts(std::string_view s, std::vector<size_t>& starts) {
  starts.clear();
  for (size_t pos = 0; pos < s.size();) {
    starts.push_back(pos);
    pos += std::min(utf8::sequence_length(static_cast<unsigned char>(s[pos])), s.size() - pos);
  }
}

}  // namespace

SpmEncoder::SpmEncoder(const Vocab& vocab) : vocab_(vocab) {
  // A merged symbol is always a token and an unmerged one is one character, so every pair the
  // encoder can meet is a split of some token into two parts that are each a token or a character.
  std::vector<size_t> starts;
  const auto part_symbol = [&](std::string_view part, bool single_char) -> int32_t {
    const TokenId id = vocab_.find(part);
    if (id != kNoToken) return id;
    return single_char ? intern_char(part) : -1;
  };
  for (TokenId t = 0; t < vocab_.size(); ++t) {
    const std::string& text = vocab_.text(t);
    if (vocab_.find(text) != t) continue;  // a duplicate text: the map's id is the one merges produce
    char_starts(text, starts);
    for (size_t k = 0; k + 1 < starts.size(); ++k) {
      const size_t end = k + 2 < starts.size() ? starts[k + 2] : text.size();
      const int32_t a = part_symbol(std::string_view(text).substr(starts[k], starts[k + 1] - starts[k]), true);
      const int32_t b = part_symbol(std::string_view(text).substr(starts[k + 1], end - starts[k + 1]), true);
      adjacent_chars_.insert(static_cast<uint32_t>(a), static_cast<uint32_t>(b), true);
    }
    for (size_t k = 1; k < starts.size(); ++k) {
      const std::string_view left = std::string_view(text).substr(0, starts[k]);
      const std::string_view right = std::string_view(text).substr(starts[k]);
      const int32_t a = part_symbol(left, k == 1);
      const int32_t b = part_symbol(right, k + 1 == starts.size());
      if (a < 0 || b < 0) continue;
      merges_.insert(static_cast<uint32_t>(a), static_cast<uint32_t>(b), Merge{t, vocab_.score(t)});
    }
  }
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    ascii_symbols_[static_cast<size_t>(c)] = char_symbol(std::string_view(&ch, 1));
  }
}

int32_t SpmEncoder::intern_char(std::string_view c) {
  const auto it = extra_chars_.find(c);
  if (it != extra_chars_.end()) return it->second;
  const auto id = static_cast<int32_t>(vocab_.size() + static_cast<int32_t>(extra_chars_.size()));
  extra_chars_.emplace(std::string(c), id);
  return id;
}

int32_t SpmEncoder::char_symbol(std::string_view c) const {
  const TokenId id = vocab_.find(c);
  if (id != kNoToken) return id;
  const auto it = extra_chars_.find(c);
  return it == extra_chars_.end() ? -1 : it->second;
}

struct SpmEncoder::Segment {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

void SpmEncoder::encode(std::string_view text, std::vector<TokenId>& out) const {
  Segment seg;
  int32_t prev_id = -1;
  for (size_t pos = 0; pos < text.size();) {
    const auto c = static_cast<unsigned char>(text[pos]);
    const size_t len = std::min(utf8::sequence_length(c), text.size() - pos);
    const int32_t id = c < 0x80 ? ascii_symbols_[c] : char_symbol(text.substr(pos, len));
    const bool joinable = prev_id >= 0 && id >= 0 &&
                          adjacent_chars_.find(static_cast<uint32_t>(prev_id), static_cast<uint32_t>(id)) != nullptr;
    if (!seg.symbols.empty() && !joinable) encode_segment(text, seg, out);
    seg.symbols.push_back({0, 0, static_cast<uint32_t>(pos), static_cast<uint32_t>(len), id});
    prev_id = id;
    pos += len;
  }
  if (!seg.symbols.empty()) encode_segment(text, seg, out);
}

void SpmEncoder::encode_segment(std::string_view text, Segment& seg, std::vector<TokenId>& out) const {
  auto& symbols = seg.symbols;
  auto& heap = seg.heap;
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)].prev = i - 1;
    symbols[static_cast<size_t>(i)].next = i + 1 == n ? -1 : i + 1;
  }
  merge_pairs(symbols, heap, lower_priority, [&](const Symbol& l, const Symbol& r, Bigram* pair) {
    if (l.id < 0 || r.id < 0) return false;  // characters no token contains
    const Merge* m = merges_.find(static_cast<uint32_t>(l.id), static_cast<uint32_t>(r.id));
    if (m == nullptr) return false;
    pair->priority = m->score;
    pair->result = m->token;
    return true;
  });

  const TokenId unk = vocab_.special().unk;
  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0 && s.id < vocab_.size()) {
      out.push_back(s.id);
      continue;
    }
    // Not a token: spell it with byte tokens (llama.cpp throws when the vocabulary has none; the
    // unknown token is the SentencePiece answer).
    for (uint32_t k = 0; k < s.length; ++k) {
      const TokenId bt = vocab_.byte_token(static_cast<uint8_t>(text[s.start + k]));
      if (bt != kNoToken) {
        out.push_back(bt);
      } else if (unk != kNoToken) {
        out.push_back(unk);
      }
    }
  }
  symbols.clear();
}

}  // namespace strata
