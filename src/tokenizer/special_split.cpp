#include "tokenizer/special_split.h"

#include <algorithm>

#include "tokenizer/vocab.h"

namespace strata {
namespace {

// std::isspace in the C locale, without its undefined behaviour for bytes above 0x7F.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool parsed(const Vocab& vocab, TokenId id, bool parse_special) {
  return parse_special || !vocab.has_attr(id, token_attr::kControl | token_attr::kUnknown);
}

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(vocab), nodes_(1), root_children_(256, -1) {
  const std::vector<TokenId>& specials = vocab_.special_tokens();
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    const std::string& text = vocab_.text(specials[rank]);
    int32_t node = 0;
    for (const char ch : text) {
      const auto c = static_cast<unsigned char>(ch);
      int32_t next = child(node, c);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& kids = nodes_[static_cast<size_t>(node)].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1})), {c, next});
        if (node == 0) root_children_[c] = next;
      }
      node = next;
    }
    if (nodes_[static_cast<size_t>(node)].rank < 0) nodes_[static_cast<size_t>(node)].rank = static_cast<int32_t>(rank);
  }
}

int32_t SpecialTokenSplitter::child(int32_t node, unsigned char c) const {
  if (node == 0) return root_children_[c];
  const auto& kids = nodes_[static_cast<size_t>(node)].children;
  const auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
  return it != kids.end() && it->first == c ? it->second : -1;
}

std::vector<int32_t> SpecialTokenSplitter::occurring(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ranks;
  if (nodes_.size() == 1) return ranks;
  const std::vector<TokenId>& specials = vocab_.special_tokens();
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t node = root_children_[static_cast<unsigned char>(text[i])];
    for (size_t j = i + 1; node >= 0; ++j) {
      const int32_t rank = nodes_[static_cast<size_t>(node)].rank;
      if (rank >= 0 && parsed(vocab_, specials[static_cast<size_t>(rank)], parse_special)) ranks.push_back(rank);
      if (j >= text.size()) break;
      node = child(node, static_cast<unsigned char>(text[j]));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNoToken, 0, text.size()});
  // Only tokens that occur can split anything; finding them with the trie first keeps long texts
  // from being scanned once per special token.
  std::vector<Fragment> next;
  for (const int32_t rank : occurring(text, parse_special)) {
    const TokenId id = vocab_.special_tokens()[static_cast<size_t>(rank)];
    const std::string_view token_text = vocab_.text(id);
    const bool lstrip = vocab_.has_attr(id, token_attr::kLstrip);
    const bool rstrip = vocab_.has_attr(id, token_attr::kRstrip);
    next.clear();
    for (const Fragment& f : fragments) {
      if (!f.is_text()) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      const size_t end = f.offset + f.length;
      while (base < end) {
        const size_t match = text.substr(0, end).find(token_text, base);
        if (match == std::string_view::npos) {
          next.push_back({kNoToken, base, end - base});
          break;
        }
        size_t left = match - base;
        if (lstrip) {
          while (left > 0 && is_space(text[base + left - 1])) --left;
        }
        if (left > 0) next.push_back({kNoToken, base, left});
        next.push_back({id, 0, 0});
        base = match + token_text.size();
        if (rstrip) {
          while (base < end && is_space(text[base])) ++base;
        }
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace strata
