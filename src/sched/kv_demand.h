// The projected KV demand: the most hot blocks the running sequences will hold at once from now
// until they finish, each decoding one token per step up to its max_tokens, within a horizon of
// steps. A sequence that finishes frees its blocks, so the peak is usually far below the sum of
// every sequence's final size: the demand curve
//   D(t) = held now + sum over sequences alive at step t of the blocks grown by then
//                   - sum over sequences finished before t of the blocks they held now
// is evaluated where it can peak (each one's last step, and the horizon). The rest of a prompt
// still being prefilled counts at once; a sequence thinned by an eviction policy (--kv-evict)
// counts at most its budget. Exact when every request runs to max_tokens (--ignore-eos loads) and
// no blocks are shared; an upper bound when requests stop earlier. Blocks shared by several
// sequences (forks, prefix-cache hits) count as freed when any holder finishes, so sharing makes
// it an underestimate: the admission it gates is then optimistic and preemption remains the
// fallback. The pid controller measures it (sched/
// controller.h) and the scheduler admits batch work by it (Scheduler::set_batch_admission).
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <span>

namespace strata {

// One sequence's future. Tokens are "with slots" (the last sampled token never gets one).
struct DemandCurve {
  int32_t from = 0;   // tokens it holds slots for now (or will, after `extra` is allocated)
  int32_t first = 0;  // tokens with slots once its prompt is in (>= from)
  int32_t last = 0;   // tokens with slots when it finishes: prompt + max_tokens - 1 (>= first)
  int32_t held = 0;   // blocks it frees when it finishes, besides what it grows (those it holds now)
  int32_t extra = 0;  // blocks it takes now and are not yet in `used` (a sequence being admitted)
  // Hot blocks it never exceeds (eviction keeps a sequence within its budget: --kv-evict).
  int32_t max_blocks = INT32_MAX;
};

struct DemandShape {
  int32_t block_size = 16;
  // With a warm tier only the hot window stays hot: at most this many hot blocks per sequence.
  int32_t max_hot_blocks = INT32_MAX;
};

// The peak of the demand curve over steps [0, horizon] (blocks), from `used` blocks held now.
// Preconditions: horizon >= 0; every curve has from <= first <= last.
int64_t peak_demand(int64_t used, std::span<const DemandCurve> curves, int32_t horizon, const DemandShape& shape);

}  // namespace strata
