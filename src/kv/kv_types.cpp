#include "kv/kv_types.h"

namespace strata {

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kF16: return "f16";
    case KvDtype::kBF16: return "bf16";
  }
  return "?";
}

std::optional<KvDtype> kv_dtype_from_name(std::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "f16") return KvDtype::kF16;
  if (name == "bf16") return KvDtype::kBF16;
  return std::nullopt;
}

}  // namespace strata
