#include "tokenizer/utf8.h"

namespace strata::utf8 {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

uint32_t decode_lenient(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[pos + i]); };
  const unsigned char b0 = b(0);
  if (!(b0 & 0x80)) {
    pos += 1;
    return b0;
  }
  const size_t left = s.size() - pos;
  if (!(b0 & 0x40)) {
    // A continuation byte where a character should start.
  } else if (!(b0 & 0x20)) {
    if (left >= 2 && is_continuation(b(1))) {
      const uint32_t cpt = (static_cast<uint32_t>(b0 & 0x1F) << 6) | (b(1) & 0x3F);
      pos += 2;
      return cpt;
    }
  } else if (!(b0 & 0x10)) {
    if (left >= 3 && is_continuation(b(1)) && is_continuation(b(2))) {
      const uint32_t cpt =
          (static_cast<uint32_t>(b0 & 0x0F) << 12) | (static_cast<uint32_t>(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
      pos += 3;
      return cpt;
    }
  } else if (!(b0 & 0x08)) {
    if (left >= 4 && is_continuation(b(1)) && is_continuation(b(2)) && is_continuation(b(3))) {
      const uint32_t cpt = (static_cast<uint32_t>(b0 & 0x07) << 18) | (static_cast<uint32_t>(b(1) & 0x3F) << 12) |
                           (static_cast<uint32_t>(b(2) & 0x3F) << 6) | (b(3) & 0x3F);
      pos += 4;
      return cpt;
    }
  }
  pos += 1;
  return kReplacement;
}

std::vector<uint32_t> decode_all(std::string_view s) {
  std::vector<uint32_t> cpts;
  cpts.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) cpts.push_back(decode_lenient(s, pos));
  return cpts;
}

void append(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

StepResult next_strict(std::string_view s) {
  const auto c0 = static_cast<unsigned char>(s[0]);
  if (c0 < 0x80) return {Step::kComplete, 1};
  size_t need;            // continuation bytes after the lead
  unsigned char lo = 0x80;  // allowed range of the first continuation byte (excludes overlongs, surrogates)
  unsigned char hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return {Step::kInvalid, 1};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= s.size()) return {Step::kIncomplete, s.size()};
    const auto c = static_cast<unsigned char>(s[i]);
    const unsigned char min = i == 1 ? lo : 0x80;
    const unsigned char max = i == 1 ? hi : 0xBF;
    if (c < min || c > max) return {Step::kInvalid, i};
  }
  return {Step::kComplete, need + 1};
}

bool is_valid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII runs are the common case; skip them eight bytes at a time.
    while (pos + 8 <= s.size()) {
      uint64_t w = 0;
      for (size_t i = 0; i < 8; ++i) w |= static_cast<uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
      if (w & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= s.size()) break;
    const StepResult r = next_strict(s.substr(pos));
    if (r.step != Step::kComplete) return false;
    pos += r.length;
  }
  return true;
}

void sanitize(std::string_view s, std::string& out) {
  out.clear();
  out.reserve(s.size() + 8);
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cpt = decode_lenient(s, pos);
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > kMaxCodepoint) cpt = kReplacement;
    append(out, cpt);
  }
}

}  // namespace strata::utf8
