// Unicode character properties the WordPiece normalizer needs (general category, lowercase, canonical
// decomposition), backed by ICU, plus the White_Space set every tokenizer shares.
// Thread-safety: pure functions over ICU's immutable data; callable from any thread.
#pragma once

#include <cstdint>

namespace strata::unicode {

// Unicode's White_Space property (tab..CR, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000): the set llama.cpp's tokenizers treat as whitespace.
inline bool is_whitespace(uint32_t cpt) {
  if (cpt < 0x80) return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
  return cpt == 0x85 || cpt == 0xA0 || cpt == 0x1680 || (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 ||
         cpt == 0x2029 || cpt == 0x202F || cpt == 0x205F || cpt == 0x3000;
}

// The major general category (first letter of the two-letter Unicode category).
enum class Category : uint8_t {
  kLetter,       // L*
  kMark,         // M*
  kNumber,       // N*
  kPunctuation,  // P*
  kSymbol,       // S*
  kSeparator,    // Z*
  kControl,      // Cc, Cf, Co, Cs
  kUnassigned,   // Cn
};
Category category(uint32_t cpt);

// Simple (one code point to one code point) lowercase mapping.
uint32_t to_lower(uint32_t cpt);

// The first code point of the canonical decomposition (NFD) of `cpt`; `cpt` itself when it has none.
// This is llama.cpp's unicode_cpts_normalize_nfd: its table keeps only that code point, so "é" becomes
// "e" and a Hangul syllable its leading jamo, while a combining mark written as such stays.
uint32_t nfd_first(uint32_t cpt);

}  // namespace strata::unicode
