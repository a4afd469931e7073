#include "jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>

#include "jinja/template_error.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

// Newlines become \n (Jinja's newline_sequence) and one trailing newline is dropped unless kept.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

enum class TagKind { kVariable, kBlock, kComment };

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize_newlines(source, options.keep_trailing_newline)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag_start(pos);
      if (tag == std::string::npos) {
        emit_text(pos, std::string_view(src_).substr(pos));
        break;
      }
      std::string_view text = std::string_view(src_).substr(pos, tag - pos);
      char kind_char = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      size_t raw_body = kind_char == '%' ? match_raw_begin(tag) : std::string::npos;
      bool is_variable = kind_char == '{';
      emit_text(pos, apply_left_control(text, sign, !is_variable, line_starting));
      size_t after_open = tag + 2 + (sign ? 1 : 0);
      if (raw_body != std::string::npos) {
        pos = lex_raw(tag, raw_body, &line_starting);
      } else if (kind_char == '#') {
        pos = lex_comment(tag, after_open, &line_starting);
      } else {
        pos = lex_tag(tag, after_open, is_variable ? TagKind::kVariable : TagKind::kBlock, &line_starting);
      }
    }
    Token end;
    end.kind = TokenKind::kEnd;
    position(src_.size(), &end);
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    Token t;
    position(pos, &t);
    throw TemplateSyntaxError(message, t.line, t.column);
  }

  void position(size_t pos, Token* t) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    t->line = static_cast<uint32_t>(line);
    t->column = static_cast<uint32_t>(pos - line_starts_[line - 1] + 1);
  }

  size_t find_tag_start(size_t pos) const {
    while (true) {
      size_t at = src_.find('{', pos);
      if (at == std::string::npos || at + 1 >= src_.size()) return std::string::npos;
      char c = src_[at + 1];
      if (c == '{' || c == '%' || c == '#') return at;
      pos = at + 1;
    }
  }

  // Whitespace control on the text before a tag: `-` strips all trailing whitespace;
  // lstrip_blocks strips the spaces and tabs that start the tag's line (block and comment
  // tags only, and only when the tag really starts the line).
  std::string_view apply_left_control(std::string_view text, char sign, bool block_like, bool line_starting) const {
    if (sign == '-') return text::strip(text, text::StripSide::kRight);
    if (sign == '+' || !block_like || !opt_.lstrip_blocks) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    std::string_view tail = text.substr(l_pos);
    if (tail.empty() || text::strip(tail, text::StripSide::kBoth).size() != 0) return text;
    return text.substr(0, l_pos);
  }

  void emit_text(size_t pos, std::string_view text) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::string(text);
    position(pos, &t);
    tokens_.push_back(std::move(t));
  }

  // Skips whitespace (Python's \s) from pos.
  size_t skip_space(size_t pos) const {
    size_t len = 0;
    while (pos < src_.size() && text::is_space(text::decode_at(src_, pos, &len))) pos += len;
    return pos;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at `tag`: returns where the raw body starts, or npos.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) return skip_space(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  // After a closing `%}`/`#}` (not `-` or `+` controlled): trim_blocks eats one newline.
  size_t after_plain_close(size_t pos) const {
    if (opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  size_t lex_raw(size_t tag, size_t body, bool* line_starting) {
    *line_starting = body > 0 && src_[body - 1] == '\n';
    for (size_t p = body; (p = src_.find("{%", p)) != std::string::npos; ++p) {
      size_t q = p + 2;
      char sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = skip_space(q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = after_plain_close(q + 2);
      } else {
        continue;
      }
      std::string_view data = std::string_view(src_).substr(body, p - body);
      emit_text(body, apply_left_control(data, sign, true, *line_starting));
      *line_starting = end > 0 && src_[end - 1] == '\n';
      return end;
    }
    fail(tag, "missing end of raw directive ({% endraw %})");
  }

  size_t lex_comment(size_t tag, size_t body, bool* line_starting) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail(tag, "missing end of comment tag");
    size_t end;
    if (close > body && src_[close - 1] == '-') {
      end = skip_space(close + 2);
    } else if (close > body && src_[close - 1] == '+') {
      end = close + 2;
    } else {
      end = after_plain_close(close + 2);
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t tag, size_t pos, TagKind kind, bool* line_starting) {
    Token open;
    open.kind = kind == TagKind::kVariable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin;
    position(tag, &open);
    tokens_.push_back(std::move(open));
    std::vector<char> brackets;
    const char close_char = kind == TagKind::kVariable ? '}' : '%';
    while (true) {
      if (pos >= src_.size())
        fail(tag, fmt::format("unexpected end of template: the tag opened here is missing its '{}}}'", close_char));
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (kind == TagKind::kBlock && src_.compare(pos, 3, "+%}") == 0) {
          end = pos + 3;
        } else if (src_.compare(pos, 1, "-") == 0 && src_.compare(pos + 1, 2, std::string{close_char, '}'}) == 0) {
          end = skip_space(pos + 3);
        } else if (src_.compare(pos, 2, std::string{close_char, '}'}) == 0) {
          end = kind == TagKind::kBlock ? after_plain_close(pos + 2) : pos + 2;
        }
        if (end != std::string::npos) {
          Token close;
          close.kind = kind == TagKind::kVariable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd;
          position(pos, &close);
          tokens_.push_back(std::move(close));
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      char c = src_[pos];
      if (is_ascii_space(c)) {
        ++pos;
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t start = pos;
        while (pos < src_.size() && is_name_char(src_[pos])) ++pos;
        push(TokenKind::kName, start, src_.substr(start, pos - start));
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, &brackets);
      }
    }
  }

  void push(TokenKind kind, size_t pos, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    position(pos, &t);
    tokens_.push_back(std::move(t));
  }

  // Digits with optional '_' separators starting at p; returns the end.
  size_t digits(size_t p, bool (*ok)(char)) const {
    if (p >= src_.size() || !ok(src_[p])) return p;
    ++p;
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  }

  size_t lex_number(size_t start) {
    auto strip_underscores = [](std::string_view s) {
      std::string out;
      for (char c : s)
        if (c != '_') out.push_back(c);
      return out;
    };
    // Prefixed integers: 0b, 0o, 0x.
    if (src_[start] == '0' && start + 1 < src_.size()) {
      char p = static_cast<char>(src_[start + 1] | 0x20);
      int base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
      if (base) {
        size_t q = start + 2;
        std::string body;
        while (q < src_.size() && (src_[q] == '_' || (hex_value(src_[q]) >= 0 && hex_value(src_[q]) < base))) {
          if (src_[q] != '_') body.push_back(src_[q]);
          ++q;
        }
        if (body.empty()) fail(start, "invalid integer literal");
        errno = 0;
        unsigned long long v = std::strtoull(body.c_str(), nullptr, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) fail(start, "integer literal too large");
        Token t;
        t.kind = TokenKind::kInteger;
        t.int_value = static_cast<int64_t>(v);
        t.text = src_.substr(start, q - start);
        position(start, &t);
        tokens_.push_back(std::move(t));
        return q;
      }
    }
    size_t p = digits(start, is_digit);
    bool is_float = false;
    // A float needs digits after the '.', or an exponent; "1." and "x.0" are not floats.
    bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      p = digits(p + 1, is_digit);
      is_float = true;
    }
    if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      size_t r = digits(q, is_digit);
      if (r > q) {
        p = r;
        is_float = true;
      }
    }
    std::string clean = strip_underscores(std::string_view(src_).substr(start, p - start));
    Token t;
    t.text = src_.substr(start, p - start);
    position(start, &t);
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInteger;
      errno = 0;
      unsigned long long v = std::strtoull(clean.c_str(), nullptr, 10);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) fail(start, "integer literal too large");
      t.int_value = static_cast<int64_t>(v);
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  // Python's "unicode-escape" decoding of a string literal's body.
  size_t lex_string(size_t start) {
    char quote = src_[start];
    std::string value;
    size_t p = start + 1;
    char32_t pending_high = 0;  // a \uD8xx waiting for its low surrogate
    auto emit_cp = [&](char32_t cp) {
      if (pending_high) {
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          text::append_utf8(value, 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00));
          pending_high = 0;
          return;
        }
        text::append_utf8(value, 0xFFFD);
        pending_high = 0;
      }
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        pending_high = cp;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        text::append_utf8(value, 0xFFFD);
      } else {
        text::append_utf8(value, cp);
      }
    };
    auto flush = [&] {
      if (pending_high) text::append_utf8(value, 0xFFFD);
      pending_high = 0;
    };
    while (true) {
      if (p >= src_.size()) fail(start, "unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        flush();
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(start, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex_escape = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int i = 0; i < n; ++i) {
          int h = p < src_.size() ? hex_value(src_[p]) : -1;
          if (h < 0) fail(p, fmt::format("truncated \\{}{} escape in string literal", e, std::string(n, 'X')));
          v = v * 16 + static_cast<char32_t>(h);
          ++p;
        }
        return v;
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': flush(); value.push_back('\\'); break;
        case '\'': flush(); value.push_back('\''); break;
        case '"': flush(); value.push_back('"'); break;
        case 'a': flush(); value.push_back('\a'); break;
        case 'b': flush(); value.push_back('\b'); break;
        case 'f': flush(); value.push_back('\f'); break;
        case 'n': flush(); value.push_back('\n'); break;
        case 'r': flush(); value.push_back('\r'); break;
        case 't': flush(); value.push_back('\t'); break;
        case 'v': flush(); value.push_back('\v'); break;
        case 'x': emit_cp(hex_escape(2)); break;
        case 'u': emit_cp(hex_escape(4)); break;
        case 'U': {
          char32_t cp = hex_escape(8);
          if (cp > 0x10FFFF) fail(p, "illegal Unicode character in \\U escape");
          emit_cp(cp);
          break;
        }
        case 'N': fail(p, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p)
              v = v * 8 + static_cast<char32_t>(src_[p] - '0');
            emit_cp(v);
          } else {
            flush();
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    flush();
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(value);
    position(start, &t);
    tokens_.push_back(std::move(t));
    return p + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char>* brackets) {
    static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        push(TokenKind::kOperator, pos, std::string(op));
        return pos + 2;
      }
    }
    char c = src_[pos];
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      size_t len = 0;
      text::decode_at(src_, pos, &len);
      fail(pos, fmt::format("unexpected character '{}'", src_.substr(pos, len)));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets->empty()) fail(pos, fmt::format("unexpected '{}'", c));
      if (brackets->back() != c) fail(pos, fmt::format("unexpected '{}', expected '{}'", c, brackets->back()));
      brackets->pop_back();
    }
    push(TokenKind::kOperator, pos, std::string(1, c));
    return pos + 1;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace strata::jinja
