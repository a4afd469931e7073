// A memory read-bandwidth probe: how fast the pool's threads can stream a buffer far larger than
// the caches. `strata bench model` divides the bytes of weights one decode step reads by this to
// get the machine's generation-speed limit. Thread-safety: uses the pool (one caller at a time).
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace strata::cpu {

// Sums a freshly written buffer of `bytes` with all pool threads (each its contiguous share),
// `reps` times, and returns the best rate in GB/s (1e9 bytes per second). The buffer is allocated
// and released inside. Preconditions: bytes >= 1 MiB, reps >= 1.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes = size_t{1} << 30, int reps = 5);

// The probe's read loop: the sum of the 64-bit words [p, p + n) (p 64-byte aligned). For
// benchmarks that read other layouts the way the probe does.
uint64_t sum_words(const uint64_t* p, size_t n);

}  // namespace strata::cpu
