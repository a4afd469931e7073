#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace strata::byte_level {
namespace {

constexpr uint32_t kShiftedBase = 0x100;
constexpr uint32_t kShiftedCount = 68;  // bytes that are not printable Latin-1

bool is_self(uint32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<std::string, 256> spelling;                // byte -> UTF-8 of its character
  std::array<int16_t, kShiftedBase + kShiftedCount> byte;  // code point -> byte, -1 if none

  Tables() {
    byte.fill(-1);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cpt = is_self(b) ? b : kShiftedBase + n++;
      utf8::append(spelling[b], cpt);
      byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view encode_byte(uint8_t b) { return tables().spelling[b]; }

void encode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (char c : bytes) out += t.spelling[static_cast<uint8_t>(c)];
}

int decode_codepoint(uint32_t cpt) {
  const Tables& t = tables();
  return cpt < t.byte.size() ? t.byte[cpt] : -1;
}

bool decode(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    const int b = decode_codepoint(utf8::decode_lenient(text, pos));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace strata::byte_level
