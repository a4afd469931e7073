// Which SIMD target the kernels run on (kernels.h: simd_target_name): each kernel file dispatches
// on its own, and all of them compile the same targets, so asking one table answers for all.

#include "backend/cpu/kernels.h"

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

}  // namespace strata::cpu
#endif  // HWY_ONCE
