// Python's operators on template values, with Jinja2's lookup rules: arithmetic (int64 with
// overflow errors, true division, floor division and modulo as Python rounds them), string and
// list concatenation and repetition (Markup escaping what is added to it), printf-style `%`,
// slicing, and attribute/item lookup (`obj.name` tries the attribute first, `obj[key]` the item
// first; a miss is an undefined value carrying Jinja2's hint; looking into an undefined value
// fails with its hint).
// Thread-safety: stateless; operators run on the render's thread.
#pragma once

#include <string_view>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace strata::jinja {

// a <op> b. Throws EvalError for unsupported operand types, division by zero, integer overflow
// and results beyond the interpreter's size limits.
Value binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b);

// obj[start:stop:step] of a str, list or tuple (none for an omitted bound).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Jinja2's environment.getattr and getitem.
Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);

}  // namespace strata::jinja
