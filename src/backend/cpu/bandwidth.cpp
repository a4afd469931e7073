// Read-bandwidth probe (bandwidth.h). Each thread sums its share with SIMD integer adds (four
// independent accumulators, so the loop is bound by loads, not by add latency); the sums are kept
// so the compiler cannot drop the reads.

#include "backend/cpu/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/anon_memory.h"
#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/bandwidth.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of the 64-bit words [p, p + n); n a multiple of 4 vectors.
uint64_t SumWords(const uint64_t* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::Load(d, p + i));
    a1 = hn::Add(a1, hn::Load(d, p + i + N));
    a2 = hn::Add(a2, hn::Load(d, p + i + 2 * N));
    a3 = hn::Add(a3, hn::Load(d, p + i + 3 * N));
  }
  uint64_t s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(SumWords);

uint64_t sum_words(const uint64_t* p, size_t n) { return HWY_DYNAMIC_DISPATCH(SumWords)(p, n); }

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int reps) {
  STRATA_CHECK(bytes >= (size_t{1} << 20) && reps >= 1, "bandwidth probe: {} bytes, {} reps", bytes, reps);
  const size_t words = bytes / sizeof(uint64_t) / 64 * 64;
  // Storage in huge pages, as the CPU backend's copy of the weights (anon_memory.h): the limit is
  // what the machine reads at best. Written by the threads that will read it (first touch places
  // pages).
  AnonymousMemory storage(words * sizeof(uint64_t), AnonymousMemory::Pages::kHuge);
  auto* data = reinterpret_cast<uint64_t*>(storage.data());
  const auto threads = static_cast<size_t>(pool.size());
  auto share = [&](int t, size_t* begin, size_t* end) {
    *begin = words * static_cast<size_t>(t) / threads / 64 * 64;
    *end = t + 1 == static_cast<int>(threads) ? words : words * static_cast<size_t>(t + 1) / threads / 64 * 64;
  };
  pool.run([&](int t) {
    size_t b, e;
    share(t, &b, &e);
    for (size_t i = b; i < e; ++i) data[i] = i;
  });
  std::atomic<uint64_t> checksum{0};
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int t) {
      size_t b, e;
      share(t, &b, &e);
      checksum.fetch_add(HWY_DYNAMIC_DISPATCH(SumWords)(data + b, e - b), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s / 1e9);
  }
  // Σ i over the buffer, once per rep: a wrong sum means a share was skipped or read twice.
  const uint64_t w = words;
  STRATA_CHECK(checksum.load() == static_cast<uint64_t>(reps) * (w * (w - 1) / 2), "bandwidth probe: bad checksum");
  return best;
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
