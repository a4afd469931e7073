// Small vocabulary types shared by every module.
#pragma once

#include <cstdint>

namespace strata {

using TokenId = int32_t;  // index into the model's vocabulary
inline constexpr TokenId kNoToken = -1;

}  // namespace strata
