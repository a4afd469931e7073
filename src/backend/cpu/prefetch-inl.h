// Per-target L2 prefetch pinned to a load, shared by the matmul kernels (matmul_float.cpp, the quant
// groups of matmul_quant_groups-inl.h). Included once per Highway target (foreach_target).
//
// PrefetchL2Tied(p, v): an L2 prefetch of p that the compiler keeps right where it stands, after
// the load that gave v and before v's first use. On x86 it is an asm that names v as an in/out
// operand: no instruction besides the prefetch. Left to itself GCC gathered a unit's prefetches into
// bursts, and llama-1b decode from memory lost 10-20% (Q4_K 46 -> 37-39 tok/s on the Xeon VM);
// spread between the loads, the weight stream overlaps the arithmetic. Thread-safety: none needed.

#if defined(STRATA_BACKEND_CPU_PREFETCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_BACKEND_CPU_PREFETCH_INL_H_
#undef STRATA_BACKEND_CPU_PREFETCH_INL_H_
#else
#define STRATA_BACKEND_CPU_PREFETCH_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {

template <class V>
HWY_INLINE void PrefetchL2Tied(const void* p, V& v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  asm volatile("prefetcht1 %1" : "+v"(v.raw) : "m"(*static_cast<const char*>(p)));
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  asm volatile("prefetcht1 %1" : "+x"(v.raw) : "m"(*static_cast<const char*>(p)));
#else
  (void)v;
  __builtin_prefetch(p, 0, 2);
#endif
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
