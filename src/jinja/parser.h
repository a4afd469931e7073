// Recursive-descent parser from jinja_lexer tokens to the jinja_ast tree, following Jinja2's
// grammar and operator precedence (filters and tests bind tighter than arithmetic; `~` sits
// between + and *; comparisons chain). Nesting is limited (kMaxParseDepth) so hostile templates
// end in a syntax error instead of exhausting the stack while parsing or rendering.
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace strata::jinja {

inline constexpr int kMaxParseDepth = 100;    // brackets/blocks; Python Jinja2 fails at about 70
inline constexpr int kMaxChainLength = 500;  // a + b + ... links; Python Jinja2 fails near 500

// Parses a whole template. Throws TemplateSyntaxError with the line and column of the problem.
Body parse(const std::vector<Token>& tokens);

}  // namespace strata::jinja
