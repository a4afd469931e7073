#include "jinja/text.h"

#include <fmt/format.h>
#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <cstring>

namespace strata::jinja::text {
namespace {

// Case mapping and classification need Unicode tables; glibc's C.UTF-8 locale has them. The
// handle is created once and never changed, and the *_l functions take it explicitly, so no
// process-wide locale is touched.
locale_t utf8_locale() {
  static const locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (l == static_cast<locale_t>(nullptr)) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", static_cast<locale_t>(nullptr));
    return l;
  }();
  return loc;
}

char32_t map_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(cp), l)) : cp;
}

char32_t map_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(cp), l)) : cp;
}

bool cp_is_upper(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  locale_t l = utf8_locale();
  return l && iswupper_l(static_cast<wint_t>(cp), l);
}

bool cp_is_lower(char32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  locale_t l = utf8_locale();
  return l && iswlower_l(static_cast<wint_t>(cp), l);
}

bool is_cased(char32_t cp) { return cp_is_upper(cp) || cp_is_lower(cp) || map_upper(cp) != map_lower(cp); }

// Appends the code point at s[pos..pos+len) mapped by f; stray bytes are copied unchanged.
template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    char32_t cp = decode_at(s, i, &len);
    bool stray = len == 1 && static_cast<unsigned char>(s[i]) >= 0x80;
    if (stray) {
      out.push_back(s[i]);
    } else {
      append_utf8(out, f(cp, i));
    }
    i += len;
  }
  return out;
}

// Python's str.isprintable() for non-ASCII code points, approximated without the full Unicode
// database: the control, format, separator, surrogate and private-use ranges are escaped.
bool is_printable_non_ascii(char32_t cp) {
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x1680 || cp == 0x180E)
    return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) return false;
  if (cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF) return false;
  if ((cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return false;
  if (cp == 0x110BD || (cp >= 0x1D173 && cp <= 0x1D17A) || (cp >= 0xE0000 && cp <= 0xE0FFF)) return false;
  if (cp >= 0xF0000) return false;
  return true;
}

bool is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  size_t len = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(decode_at(s, i, &len))) i += len;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.emplace_back(strip(s.substr(i), StripSide::kRight));
      return out;
    }
    size_t start = i;
    while (i < s.size() && !is_space(decode_at(s, i, &len))) i += len;
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

}  // namespace

char32_t decode_at(std::string_view s, size_t pos, size_t* len) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[pos + k]); };
  unsigned char c = b(0);
  *len = 1;
  if (c < 0x80) return c;
  size_t need = 0;
  char32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    cp = c & 0x07;
  } else {
    return c;
  }
  if (pos + need >= s.size()) return c;  // truncated sequence
  for (size_t k = 1; k <= need; ++k) {
    if ((b(k) & 0xC0) != 0x80) return c;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
    return c;
  *len = need + 1;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    append_utf8(out, 0xFFFD);
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    decode_at(s, i, &len);
    ++n;
  }
  return n;
}

size_t byte_offset(std::string_view s, size_t index) {
  size_t i = 0;
  size_t len = 0;
  for (size_t n = 0; n < index && i < s.size(); ++n) {
    decode_at(s, i, &len);
    i += len;
  }
  return i;
}

std::vector<std::string> chars(std::string_view s) {
  std::vector<std::string> out;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    decode_at(s, i, &len);
    out.emplace_back(s.substr(i, len));
  }
  return out;
}

bool is_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view strip(std::string_view s, StripSide side, std::optional<std::string_view> chars_opt) {
  std::vector<char32_t> set;
  if (chars_opt) {
    size_t len = 0;
    for (size_t i = 0; i < chars_opt->size(); i += len) set.push_back(decode_at(*chars_opt, i, &len));
  }
  auto strippable = [&](char32_t cp) {
    if (!chars_opt) return is_space(cp);
    for (char32_t c : set)
      if (c == cp) return true;
    return false;
  };
  size_t begin = 0;
  size_t end = s.size();
  size_t len = 0;
  if (side != StripSide::kRight) {
    while (begin < end && strippable(decode_at(s, begin, &len))) begin += len;
  }
  if (side != StripSide::kLeft) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      char32_t cp = decode_at(s, start, &len);
      if (start + len != end) {  // a stray continuation byte: take it alone
        start = end - 1;
        cp = static_cast<unsigned char>(s[start]);
      }
      if (!strippable(cp)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit);
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t at = s.find(*sep, start);
    if (at == std::string_view::npos || sep->empty()) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, -1);
  std::vector<std::string> out;
  if (!sep) {
    size_t end = s.size();
    size_t len = 0;
    auto prev_start = [&](size_t e) {
      size_t p = e - 1;
      while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      return p;
    };
    while (end > 0) {
      while (end > 0 && is_space(decode_at(s, prev_start(end), &len))) end = prev_start(end);
      if (end == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(strip(s.substr(0, end), StripSide::kLeft));
        end = 0;
        break;
      }
      size_t start = end;
      while (start > 0 && !is_space(decode_at(s, prev_start(start), &len))) start = prev_start(start);
      out.emplace_back(s.substr(start, end - start));
      end = start;
    }
    return {out.rbegin(), out.rend()};
  }
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit && !sep->empty()) {
    if (end < sep->size()) break;
    size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0;
  size_t i = 0;
  size_t len = 0;
  while (i < s.size()) {
    char32_t cp = decode_at(s, i, &len);
    if (!is_line_break(cp)) {
      i += len;
      continue;
    }
    size_t brk = len;
    if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') brk = 2;
    out.emplace_back(s.substr(start, (keepends ? i + brk : i) - start));
    i += brk;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    size_t len = 0;
    int64_t done = 0;
    for (size_t i = 0; i < s.size(); i += len) {
      decode_at(s, i, &len);
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      out.append(s.substr(i, len));
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string upper(std::string_view s) {
  return map_chars(s, [](char32_t cp, size_t) { return map_upper(cp); });
}

std::string lower(std::string_view s) {
  return map_chars(s, [](char32_t cp, size_t) { return map_lower(cp); });
}

std::string swapcase(std::string_view s) {
  return map_chars(s, [](char32_t cp, size_t) {
    if (cp_is_upper(cp)) return map_lower(cp);
    if (cp_is_lower(cp)) return map_upper(cp);
    return cp;
  });
}

std::string capitalize(std::string_view s) {
  return map_chars(s, [](char32_t cp, size_t i) { return i == 0 ? map_upper(cp) : map_lower(cp); });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](char32_t cp, size_t) {
    char32_t r = prev_cased ? map_lower(cp) : map_upper(cp);
    prev_cased = is_cased(cp);
    return r;
  });
}

bool is_upper(std::string_view s) {
  bool any = false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    char32_t cp = decode_at(s, i, &len);
    if (cp_is_lower(cp)) return false;
    if (cp_is_upper(cp)) any = true;
  }
  return any;
}

bool is_lower(std::string_view s) {
  bool any = false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    char32_t cp = decode_at(s, i, &len);
    if (cp_is_upper(cp)) return false;
    if (cp_is_lower(cp)) any = true;
  }
  return any;
}

bool is_alpha_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  locale_t l = utf8_locale();
  return l && iswalpha_l(static_cast<wint_t>(cp), l);
}

bool is_digit_cp(char32_t cp) { return cp >= '0' && cp <= '9'; }

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    char32_t cp = decode_at(s, i, &len);
    bool stray = len == 1 && cp >= 0x80;
    if (stray) {
      out.push_back(s[i]);
    } else if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp < 0x80 || is_printable_non_ascii(cp)) {
      out.append(s.substr(i, len));
    } else if (cp <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: fixed notation when the decimal point
  // position is in (-4, 16], otherwise d.ddde[+-]XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits.push_back(c);
  int exp10 = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    char32_t cp = decode_at(s, i, &len);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else if (cp < 0x80 || !ensure_ascii) {
      out.append(s.substr(i, len));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      char32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                         static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    }
  }
  out.push_back('"');
}

}  // namespace strata::jinja::text
