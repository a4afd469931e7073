// Jinja2's builtin filters (`value | name(args)`) with the semantics of Jinja 3.1 in a sandbox
// without autoescaping, plus Hugging Face's tojson (json.dumps keeping non-ASCII, key order
// preserved). Unknown filter names are reported by the interpreter at the point of use.
// Thread-safety: the table is immutable; filters run on the render's thread.
#pragma once

#include <string_view>

#include "jinja/value.h"

namespace strata::jinja {

using FilterFn = Value (*)(Interpreter& interp, const Value& input, CallArgs& args);

// The filter called `name`, or nullptr.
FilterFn find_filter(std::string_view name);

}  // namespace strata::jinja
