// JSON in and out of template values: variables arrive as nlohmann::ordered_json (key order
// kept), and the tojson filter writes values back the way Python's json.dumps does (", " and
// ": " separators, "," + newline with an indent, floats as Python repr, non-ASCII kept unless
// ensure_ascii).
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "jinja/value.h"

namespace strata::jinja {

// Converts JSON to a value (objects become dicts, arrays lists). Throws EvalError when nested
// deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::string> item_separator;  // default ", " (or "," with an indent)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(v). Throws EvalError for values JSON cannot hold ("Object of type Undefined is not
// JSON serializable") and for nesting deeper than kMaxValueDepth.
std::string to_json(const Value& v, const JsonDumpOptions& options = {});

}  // namespace strata::jinja
