// Which SIMD target the kernels run on (kernels.h: simd_target_name): each kernel file dispatches
// on its own, and all of them compile the same targets, so asking one table answers for all.

#include "backend/cpu/kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
int64_t ThisTarget() { return HWY_TARGET; }
}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(ThisTarget);

std::string_view simd_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(ThisTarget)()); }

int64_t simd_compiled_targets() { return HWY_TARGETS; }

void restrict_simd_target(std::string_view name) {
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
  };
  // The targets this CPU runs of those compiled in (read before any restriction of this process).
  static const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  std::string names;
  for (int64_t bits = usable; bits != 0; bits &= bits - 1) {
    const int64_t t = bits & -bits;
    if (same(name, hwy::TargetName(t))) {
      hwy::SetSupportedTargetsForTest(t);
      return;
    }
    names += fmt::format("{}{}", names.empty() ? "" : ", ", hwy::TargetName(t));
  }
  throw std::invalid_argument(fmt::format("SIMD target {}: not one this build runs on this CPU ({})", name, names));
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
