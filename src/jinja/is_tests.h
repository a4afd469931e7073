// Jinja2's builtin tests (`value is name(args)`): defined, none, string, mapping, iterable,
// equalto, odd, in, ... with Jinja 3.1's semantics (bools are numbers but not integers,
// undefined values are iterable and empty).
// Thread-safety: the table is immutable; tests run on the render's thread.
#pragma once

#include <string_view>

#include "jinja/value.h"

namespace strata::jinja {

using TestFn = bool (*)(Interpreter& interp, const Value& input, CallArgs& args);

// The test called `name`, or nullptr.
TestFn find_test(std::string_view name);

}  // namespace strata::jinja
