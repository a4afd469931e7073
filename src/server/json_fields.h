// Reading a request body: JSON parsing with a nesting limit, and typed access to optional fields
// where every mismatch becomes an ApiError 400 that names the field (its `param`). As in OpenAI's
// API, a field set to null counts as absent.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace strata::server {

// Deeper bodies are refused before parsing: nlohmann's copy and dump recurse per level.
inline constexpr int kMaxJsonDepth = 64;

// Parses `body` as a JSON object. 400 for invalid JSON (including invalid UTF-8 in strings and
// unpaired surrogate escapes), nesting deeper than kMaxJsonDepth, or a non-object.
Json parse_json_object(std::string_view body);

// The value of `key` in `obj`, or nullptr when absent or null. Precondition: obj is an object.
const Json* find_field(const Json& obj, std::string_view key);

// An integer in [lo, hi]. JSON numbers with a fraction are rejected; integral floats (16.0) are
// accepted, as Python clients sometimes send them.
std::optional<int64_t> get_int(const Json& obj, std::string_view key, int64_t lo, int64_t hi);
// A finite number that fits a float (ranges are the caller's: SamplingParams::validate).
std::optional<float> get_float(const Json& obj, std::string_view key);
std::optional<bool> get_bool(const Json& obj, std::string_view key);
std::optional<std::string> get_string(const Json& obj, std::string_view key);

// Same checks on a value that is not an object member (array elements); `name` is used in messages
// and as the param.
int64_t as_int(const Json& v, std::string_view name, int64_t lo, int64_t hi);

// "an integer", "a string", ... for messages about `v`'s JSON type.
std::string_view json_type_name(const Json& v);

}  // namespace strata::server
