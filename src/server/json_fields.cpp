#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace strata::server {
namespace {

// Depth of the deepest array/object, counting brackets outside strings.
int json_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::string range_text(int64_t lo, int64_t hi) { return fmt::format("[{}, {}]", lo, hi); }

}  // namespace

Json parse_json_object(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth)
    throw bad_request(fmt::format("invalid JSON: nested deeper than {} levels", kMaxJsonDepth));
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const Json::parse_error& e) {
    throw bad_request(fmt::format("invalid JSON: {}", e.what()));
  } catch (const Json::out_of_range& e) {  // e.g. a number beyond a double's range: 1e400
    throw bad_request(fmt::format("invalid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw bad_request(fmt::format("the request body must be a JSON object, got {}", json_type_name(j)));
  return j;
}

const Json* find_field(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string_view json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

int64_t as_int(const Json& v, std::string_view name, int64_t lo, int64_t hi) {
  const std::string param(name);
  auto out_of_range = [&]() {
    return bad_request(fmt::format("'{}' must be an integer in {}", name, range_text(lo, hi)), param);
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    // Unsigned only says the value is not negative; a positive lower bound still applies (0 < 1).
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) throw out_of_range();
    if (static_cast<int64_t>(u) < lo || static_cast<int64_t>(u) > hi) throw out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      throw bad_request(fmt::format("'{}' must be an integer, got {}", name, v.dump()), param);
    // Converting a double outside int64's range to int64 is undefined, and the bounds cannot be
    // compared as doubles: double(INT64_MAX) rounds up to 2^63. int64 holds exactly [-2^63, 2^63);
    // inside it the conversion is exact (d is integral), and the range check is an integer one.
    if (d < -0x1p63 || d >= 0x1p63) throw out_of_range();
    const int64_t i = static_cast<int64_t>(d);
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  throw bad_request(fmt::format("'{}' must be an integer, got {}", name, json_type_name(v)), param);
}

std::optional<int64_t> get_int(const Json& obj, std::string_view key, int64_t lo, int64_t hi) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::nullopt;
  return as_int(*v, key, lo, hi);
}

std::optional<float> get_float(const Json& obj, std::string_view key) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number())
    throw bad_request(fmt::format("'{}' must be a number, got {}", key, json_type_name(*v)), std::string(key));
  const double d = v->get<double>();
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    throw bad_request(fmt::format("'{}' is out of range: {}", key, v->dump()), std::string(key));
  return static_cast<float>(d);
}

std::optional<bool> get_bool(const Json& obj, std::string_view key) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean())
    throw bad_request(fmt::format("'{}' must be a boolean, got {}", key, json_type_name(*v)), std::string(key));
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& obj, std::string_view key) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string())
    throw bad_request(fmt::format("'{}' must be a string, got {}", key, json_type_name(*v)), std::string(key));
  return v->get<std::string>();
}

}  // namespace strata::server
