// The kernels run on the best SIMD target this CPU supports (printed), and the bandwidth probe
// reads its whole buffer (it checks its own checksum) and reports a plausible rate.
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <cmath>
#include <iostream>

#include "backend/cpu/bandwidth.h"
#include "backend/cpu/kernels.h"

namespace strata::cpu {
namespace {

TEST(Dispatch, ChoosesTheBestSupportedTarget) {
  const int64_t usable = hwy::SupportedTargets() & simd_compiled_targets();
  ASSERT_NE(usable, 0);
  const int64_t best = usable & -usable;  // Highway orders targets best = lowest bit
  std::cout << "SIMD target: " << simd_target_name() << " (compiled:";
  for (int64_t t = simd_compiled_targets(); t != 0; t &= t - 1) std::cout << ' ' << hwy::TargetName(t & -t);
  std::cout << ")\n";
  EXPECT_EQ(simd_target_name(), hwy::TargetName(best));
#if defined(__x86_64__)
  // Independently of Highway's own detection: what the CPU reports must be used.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi2") &&
                    __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512bitalg");
  if (vnni) {
    EXPECT_EQ(simd_target_name(), "AVX3_DL");
  } else if (avx512) {
    EXPECT_EQ(simd_target_name(), "AVX3");
  } else if (avx2) {
    EXPECT_EQ(simd_target_name(), "AVX2");
  }
#endif
}

TEST(Bandwidth, ProbeReadsTheWholeBuffer) {
  ThreadPool pool(2);
  const double gbs = measure_read_bandwidth_gbs(pool, size_t{64} << 20, 2);
  std::cout << "read bandwidth (64 MiB, 2 threads): " << gbs << " GB/s\n";
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_GT(gbs, 0.1);
}

}  // namespace
}  // namespace strata::cpu
