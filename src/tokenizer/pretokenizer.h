// Splits text into the words that byte-level BPE merges within, by a list of PCRE2 regexes (UTF and
// UCP mode, JIT-compiled), reproducing how llama.cpp's unicode_regex_split applies them:
//  - the regexes run one after the other, each on every piece the previous ones left;
//  - within a piece, every match is a word and so is every run of text between matches (nothing is
//    dropped); an empty match only marks a split point;
//  - a piece is the whole subject of its match, so lookaheads, `$` and `\b` stop at its ends;
//  - `$` matches only at the very end (ECMAScript semantics, not before a final newline);
//  - whitespace outside ASCII is seen by the regexes as U+000B (llama.cpp's std::regex cannot match
//    it otherwise), so `\s` means Unicode White_Space and a literal U+3000 in a class never matches.
// Thread-safety: immutable after construction; split() may run concurrently on one instance.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace strata {

class PreTokenizer {
 public:
  // Compiles the regexes; throws strata::Error naming the regex when one does not compile.
  explicit PreTokenizer(std::span<const std::string_view> regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` to `out`, as views into `text`, in order; they tile `text` exactly.
  // Precondition: `text` is well-formed UTF-8 (see utf8::sanitize).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace strata
