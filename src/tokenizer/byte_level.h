// GPT-2's byte-level alphabet: byte-level BPE vocabularies spell every byte as one printable
// character (printable Latin-1 bytes as themselves, the other 68 bytes as U+0100..U+0143), so that
// token texts are valid UTF-8 whatever bytes they stand for.
// Thread-safety: pure functions over immutable tables; callable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::byte_level {

// The character standing for byte `b`, as UTF-8 (one or two bytes).
std::string_view encode_byte(uint8_t b);

// Appends the byte-level spelling of `bytes` to `out`.
void encode(std::string_view bytes, std::string& out);

// The byte a code point stands for, or -1 when it is not one of the 256 characters.
int decode_codepoint(uint32_t cpt);

// Appends the bytes that the byte-level text `text` spells to `out`. Returns false (leaving `out`
// partially appended) when `text` holds a character outside the alphabet.
bool decode(std::string_view text, std::string& out);

}  // namespace strata::byte_level
