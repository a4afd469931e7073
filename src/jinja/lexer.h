// Splits Jinja template source into tokens: literal text (with whitespace control already
// applied) and the tokens inside {{ }} and {% %} tags. Comments and raw blocks are resolved here.
// Mirrors Jinja2's lexer: newlines are normalized to \n, one trailing newline is dropped, `{%-`
// and `-%}` strip whitespace, trim_blocks removes the newline after a block or comment tag,
// lstrip_blocks removes spaces and tabs before one at the start of a line, and `+` disables
// either; tag ends are only recognized while brackets are balanced.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja {

enum class TokenKind : uint8_t {
  kText,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords
  kString,         // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,       // text holds the spelling: "+", "//", "==", "(", ...
  kEnd,            // end of the source
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t line = 1;
  uint32_t column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;    // as Hugging Face's apply_chat_template sets them
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateSyntaxError (with line and column) on malformed source: unterminated tags,
// comments, raw blocks or strings, unexpected characters, unbalanced brackets. The result
// always ends with a kEnd token.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace strata::jinja
