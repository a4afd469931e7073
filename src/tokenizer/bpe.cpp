#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_type.h"
#include "tokenizer/bigram_merge.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace strata {
namespace {

using Symbol = MergeSymbol;
using Bigram = MergePair<int32_t>;

// Heap order: lowest rank first, then leftmost (llama.cpp's llm_bigram_bpe::comparator).
bool lower_priority(const Bigram& a, const Bigram& b) {
  return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
}

}  // namespace

struct BpeEncoder::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
  std::string spelled;
};

BpeEncoder::BpeEncoder(const Vocab& vocab)
    : vocab_(vocab), pretokenizer_(vocab.pre_type()->regexes) {
  const std::vector<std::string>& merges = vocab_.merges();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    // "left right"; searching from 1 lets a left part start with a space, as in llama.cpp.
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    const std::string_view left = std::string_view(m).substr(0, space);
    const std::string_view right = std::string_view(m).substr(space + 1);
    const int32_t a = intern(left);
    const int32_t b = intern(right);
    const int32_t c = intern(std::string(left) + std::string(right));
    // The first rank of a repeated pair wins.
    merges_.insert(static_cast<uint32_t>(a), static_cast<uint32_t>(b), Merge{static_cast<int32_t>(rank), c});
  }
  for (int b = 0; b < 256; ++b) byte_symbols_[static_cast<size_t>(b)] = intern(byte_level::encode_byte(static_cast<uint8_t>(b)));
}

int32_t BpeEncoder::intern(std::string_view text) {
  const TokenId id = vocab_.find(text);
  if (id != kNoToken) return id;
  const auto it = extra_symbols_.find(text);
  if (it != extra_symbols_.end()) return it->second;
  const auto sym = static_cast<int32_t>(vocab_.size() + static_cast<int32_t>(extra_symbols_.size()));
  extra_symbols_.emplace(std::string(text), sym);
  return sym;
}

void BpeEncoder::encode(std::string_view text, std::vector<TokenId>& out) const {
  std::string sanitized;
  if (!utf8::is_valid(text)) {
    utf8::sanitize(text, sanitized);
    text = sanitized;
  }
  std::vector<std::string_view> words;
  pretokenizer_.split(text, words);
  Scratch scratch;
  for (std::string_view w : words) encode_word(w, scratch, out);
}

void BpeEncoder::encode_word(std::string_view word, Scratch& scratch, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (vocab_.flags().ignore_merges) {
    scratch.spelled.clear();
    byte_level::encode(word, scratch.spelled);
    const TokenId id = vocab_.find(scratch.spelled);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back({i - 1, i + 1 == n ? -1 : i + 1, static_cast<uint32_t>(i), 1,
                       byte_symbols_[static_cast<uint8_t>(word[static_cast<size_t>(i)])]});
  }
  merge_pairs(symbols, heap, lower_priority, [&](const Symbol& l, const Symbol& r, Bigram* pair) {
    const Merge* m = merges_.find(static_cast<uint32_t>(l.id), static_cast<uint32_t>(r.id));
    if (m == nullptr) return false;
    pair->priority = m->rank;
    pair->result = m->result;
    return true;
  });

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.id < vocab_.size()) {
      out.push_back(s.id);
      continue;
    }
    // The merged text is not a token: llama.cpp looks up each byte of its byte-level spelling as a
    // one-byte token and keeps those it finds.
    scratch.spelled.clear();
    byte_level::encode(word.substr(s.start, s.length), scratch.spelled);
    for (char c : scratch.spelled) {
      const TokenId id = vocab_.find(std::string_view(&c, 1));
      if (id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace strata
