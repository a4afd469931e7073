// GGML tensor types as stored in GGUF files: ids, block sizes and byte sizes.
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

// Values are the on-disk ids of ggml's `ggml_type` (they must not change).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

struct GgmlTypeTraits {
  std::string_view name;  // lower case, as ggml prints it ("q4_k")
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Traits of a known type id, or nullopt for ids this build does not know.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);

// Traits of a known type (aborts on an id outside the enum: a programming error).
GgmlTypeTraits ggml_type_traits(GgmlType type);

std::string_view ggml_type_name(GgmlType type);

// Parses a name such as "q4_k", "Q8_0", "f16" (case-insensitive).
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of one row of `n` elements; requires n % block_size == 0.
uint64_t ggml_row_size(GgmlType type, uint64_t n);

}  // namespace strata
