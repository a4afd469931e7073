// A GGUF metadata value: one of the 13 GGUF value types, arrays (also of strings and nested arrays)
// included. Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace strata {

// On-disk ids of GGUF value types; the variant index of GgufValue::data equals the id.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;

std::string_view gguf_type_name(GgufType t);

struct GgufArray;

struct GgufValue {
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                            std::shared_ptr<GgufArray>, uint64_t, int64_t, double>;
  Data data;

  GgufType type() const { return static_cast<GgufType>(data.index()); }
  bool is_integer() const;
  bool is_float() const { return type() == GgufType::kFloat32 || type() == GgufType::kFloat64; }

  // Conversions that throw strata::Error (naming the actual type) when the value does not fit.
  uint64_t as_uint() const;        // any integer type holding a value >= 0
  int64_t as_int() const;          // any integer type holding a value that fits int64
  double as_float() const;         // float or integer types
  bool as_bool() const;            // bool only
  const std::string& as_string() const;
  const GgufArray& as_array() const;

  // Builders.
  static GgufValue u8(uint8_t v) { return {v}; }
  static GgufValue i8(int8_t v) { return {v}; }
  static GgufValue u16(uint16_t v) { return {v}; }
  static GgufValue i16(int16_t v) { return {v}; }
  static GgufValue u32(uint32_t v) { return {v}; }
  static GgufValue i32(int32_t v) { return {v}; }
  static GgufValue f32(float v) { return {v}; }
  static GgufValue boolean(bool v) { return {v}; }
  static GgufValue str(std::string v) { return {std::move(v)}; }
  static GgufValue u64(uint64_t v) { return {v}; }
  static GgufValue i64(int64_t v) { return {v}; }
  static GgufValue f64(double v) { return {v}; }
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> items);
  static GgufValue array_of_strings(const std::vector<std::string>& items);
  static GgufValue array_of_f32(const std::vector<float>& items);
  static GgufValue array_of_i32(const std::vector<int32_t>& items);

  // Human-readable rendering; arrays longer than `max_items` are abbreviated as "[a, b, ... (N items)]".
  std::string to_string(size_t max_items = 8) const;

  friend bool operator==(const GgufValue& a, const GgufValue& b);
};

struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  std::vector<GgufValue> items;  // every item has type elem_type
};

bool operator==(const GgufArray& a, const GgufArray& b);

}  // namespace strata
