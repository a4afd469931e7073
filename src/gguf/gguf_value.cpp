#include "gguf/gguf_value.h"

#include <fmt/format.h>

#include <bit>
#include <limits>

#include "core/error.h"

namespace strata {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "u8";
    case GgufType::kInt8: return "i8";
    case GgufType::kUint16: return "u16";
    case GgufType::kInt16: return "i16";
    case GgufType::kUint32: return "u32";
    case GgufType::kInt32: return "i32";
    case GgufType::kFloat32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "u64";
    case GgufType::kInt64: return "i64";
    case GgufType::kFloat64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type()) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

namespace {

// Integer value as a (negative, magnitude) pair so that u64 and i64 both fit.
struct IntParts {
  bool negative;
  uint64_t magnitude;
};

IntParts int_parts(const GgufValue& v) {
  return std::visit(
      [&](const auto& x) -> IntParts {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) return {true, static_cast<uint64_t>(-(static_cast<int64_t>(x) + 1)) + 1};
          }
          return {false, static_cast<uint64_t>(x)};
        } else {
          fail("expected an integer, found a {}", gguf_type_name(v.type()));
        }
      },
      v.data);
}

}  // namespace

uint64_t GgufValue::as_uint() const {
  IntParts p = int_parts(*this);
  if (p.negative) fail("expected a non-negative integer, found -{}", p.magnitude);
  return p.magnitude;
}

int64_t GgufValue::as_int() const {
  IntParts p = int_parts(*this);
  if (!p.negative) {
    if (p.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("integer {} does not fit a signed 64-bit value", p.magnitude);
    return static_cast<int64_t>(p.magnitude);
  }
  return static_cast<int64_t>(~(p.magnitude - 1));
}

double GgufValue::as_float() const {
  if (type() == GgufType::kFloat32) return std::get<float>(data);
  if (type() == GgufType::kFloat64) return std::get<double>(data);
  if (is_integer()) {
    IntParts p = int_parts(*this);
    return p.negative ? -static_cast<double>(p.magnitude) : static_cast<double>(p.magnitude);
  }
  fail("expected a number, found a {}", gguf_type_name(type()));
}

bool GgufValue::as_bool() const {
  if (type() != GgufType::kBool) fail("expected a bool, found a {}", gguf_type_name(type()));
  return std::get<bool>(data);
}

const std::string& GgufValue::as_string() const {
  if (type() != GgufType::kString) fail("expected a string, found a {}", gguf_type_name(type()));
  return std::get<std::string>(data);
}

const GgufArray& GgufValue::as_array() const {
  if (type() != GgufType::kArray) fail("expected an array, found a {}", gguf_type_name(type()));
  return *std::get<std::shared_ptr<GgufArray>>(data);
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  return {std::move(a)};
}

GgufValue GgufValue::array_of_strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(str(s));
  return array(GgufType::kString, std::move(v));
}

GgufValue GgufValue::array_of_f32(const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float f : items) v.push_back(f32(f));
  return array(GgufType::kFloat32, std::move(v));
}

GgufValue GgufValue::array_of_i32(const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(i32(x));
  return array(GgufType::kInt32, std::move(v));
}

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string GgufValue::to_string(size_t max_items) const {
  switch (type()) {
    case GgufType::kString: {
      const auto& s = std::get<std::string>(data);
      if (s.size() > 200) return quote(s.substr(0, 200)) + fmt::format("... ({} bytes)", s.size());
      return quote(s);
    }
    case GgufType::kBool: return std::get<bool>(data) ? "true" : "false";
    case GgufType::kFloat32: return fmt::format("{}", std::get<float>(data));
    case GgufType::kFloat64: return fmt::format("{}", std::get<double>(data));
    case GgufType::kArray: {
      const auto& a = as_array();
      std::string out = "[";
      const size_t n = a.items.size();
      const size_t shown = n <= max_items ? n : max_items;
      for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        out += a.items[i].to_string(max_items);
      }
      if (shown < n) out += fmt::format(", ... ({} items)", n);
      return out + "]";
    }
    default: {
      IntParts p = int_parts(*this);
      return p.negative ? fmt::format("-{}", p.magnitude) : fmt::format("{}", p.magnitude);
    }
  }
}

bool operator==(const GgufArray& a, const GgufArray& b) { return a.elem_type == b.elem_type && a.items == b.items; }

bool operator==(const GgufValue& a, const GgufValue& b) {
  if (a.data.index() != b.data.index()) return false;
  if (a.type() == GgufType::kArray) return a.as_array() == b.as_array();
  if (a.type() == GgufType::kFloat32) {  // bitwise, so that nan == nan round-trips
    return std::bit_cast<uint32_t>(std::get<float>(a.data)) == std::bit_cast<uint32_t>(std::get<float>(b.data));
  }
  if (a.type() == GgufType::kFloat64) {
    return std::bit_cast<uint64_t>(std::get<double>(a.data)) == std::bit_cast<uint64_t>(std::get<double>(b.data));
  }
  return a.data == b.data;
}

}  // namespace strata
