// The Python methods templates call on values: str (strip, split, startswith, replace, upper,
// format, ...), list (append, pop, index, ...) and dict (items, keys, values, get, update, ...).
// Mutating methods are allowed (Jinja2's plain sandbox allows them; Hugging Face's immutable
// sandbox does not, and templates that rely on them are written for runtimes that do).
// Thread-safety: stateless; methods run on the render's thread.
#pragma once

#include <string_view>

#include "jinja/value.h"

namespace strata::jinja {

// Whether `obj` (a str, list or dict) has a method called `name`.
bool has_method(const Value& obj, std::string_view name);

// Calls obj.name(args). Precondition: has_method(obj, name).
Value call_method(Interpreter& interp, const Value& obj, std::string_view name, CallArgs& args);

// obj.name as a callable value (a bound method). Precondition: has_method(obj, name).
Value bound_method(const Value& obj, std::string_view name);

// Python's printf-style `fmt % args` (also the `format` filter): %s %r %d %i %f %e %g %x %o %c
// with flags, width and precision; a dict argument supplies %(name)s.
std::string percent_format(std::string_view fmt, const Value& args);

}  // namespace strata::jinja
