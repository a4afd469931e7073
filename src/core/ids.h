// Identifiers shared by every module above core, and the clock their timestamps use.
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>

namespace strata {

using SeqId = int64_t;      // one sequence (a request has n of them, one per sample)
using RequestId = int64_t;  // one submitted request
using Clock = std::chrono::steady_clock;  // arrival times, event timestamps

}  // namespace strata
