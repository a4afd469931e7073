// UTF-8 coding helpers shared by the tokenizers and the detokenizer.
//
// Two decoders exist on purpose: the tokenizers must split and repair text exactly as llama.cpp does
// (lenient: overlong forms are accepted, a bad byte becomes U+FFFD), while the detokenizer must only
// ever emit well-formed UTF-8 (strict: Unicode's "maximal subpart" rule).
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::utf8 {

inline constexpr uint32_t kReplacement = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Bytes in the sequence a lead byte announces, counted from its high nibble as llama.cpp does:
// 1 for ASCII and for stray continuation bytes, else 2, 3 or 4. No validation.
inline size_t sequence_length(unsigned char lead) {
  static constexpr unsigned char kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

// Decodes the code point at `pos` and advances `pos` past it, leniently (llama.cpp's rules: the lead
// byte's pattern and the continuation bytes are checked, overlong forms and surrogates are not).
// An ill-formed sequence yields kReplacement and advances one byte. Precondition: pos < s.size().
uint32_t decode_lenient(std::string_view s, size_t& pos);

// All code points of `s` by decode_lenient.
std::vector<uint32_t> decode_all(std::string_view s);

// Appends the UTF-8 encoding of `cpt`. Precondition: cpt <= kMaxCodepoint.
void append(std::string& out, uint32_t cpt);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool is_valid(std::string_view s);

// Re-encodes the code points decode_lenient finds in `s` into `out` (cleared first), so that `out`
// is well-formed UTF-8: ill-formed bytes become U+FFFD, as do decoded surrogates and values above
// U+10FFFF (which llama.cpp cannot encode either). This is the text llama.cpp's BPE pre-tokenizer
// works on.
void sanitize(std::string_view s, std::string& out);

// Strict decoding step for emitting text. Looks at the bytes at the front of `s`:
//   kComplete   - `length` bytes form one well-formed character;
//   kIncomplete - all of `s` is a proper prefix of a well-formed character (more bytes may fix it);
//   kInvalid    - the first `length` bytes are a maximal ill-formed subpart, to be replaced by U+FFFD.
enum class Step { kComplete, kIncomplete, kInvalid };
struct StepResult {
  Step step;
  size_t length;
};
// Precondition: !s.empty().
StepResult next_strict(std::string_view s);

}  // namespace strata::utf8
