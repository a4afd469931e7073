// Splits special tokens out of raw text before the model's tokenizer sees it (llama.cpp's
// tokenizer_st_partition): every special token in turn, longest text first, is cut out of the raw
// pieces left by the ones before it, eating neighbouring whitespace where its lstrip/rstrip attribute
// says so. User-defined tokens are always split out; control and unknown tokens only when special
// tokens are parsed.
// Thread-safety: immutable after construction; split() may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace strata {

class Vocab;

struct Fragment {
  TokenId token = kNoToken;  // a special token, or kNoToken for raw text
  size_t offset = 0;         // raw text: bytes [offset, offset + length) of the input
  size_t length = 0;

  bool is_text() const { return token == kNoToken; }
};

class SpecialTokenSplitter {
 public:
  // Precondition: `vocab` outlives the splitter.
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // The fragments of `text` in order. Raw fragments are never empty.
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t rank = -1;  // index into vocab.special_tokens() of the token ending here
  };
  int32_t child(int32_t node, unsigned char c) const;
  // Ranks of the special tokens that occur anywhere in `text`, ascending.
  std::vector<int32_t> occurring(std::string_view text, bool parse_special) const;

  const Vocab& vocab_;
  std::vector<Node> nodes_;  // a trie of the special token texts; nodes_[0] is the root
  std::vector<int32_t> root_children_;  // 256 entries: the root's children, for the common first step
};

}  // namespace strata
