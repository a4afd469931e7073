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

}  // namespace strata::cpu
