#include "sched/kv_demand.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

namespace strata {
namespace {

int64_t blocks(int32_t tokens, const DemandCurve& c, const DemandShape& shape) {
  return std::min<int64_t>({(int64_t{tokens} + shape.block_size - 1) / shape.block_size, shape.max_hot_blocks, c.max_blocks});
}

// Steps until c's last token has its slot: it is alive at steps 0..life(c) and gone after.
int32_t life(const DemandCurve& c) { return c.last - c.first; }

// What c adds to the demand at step t.
int64_t contribution(const DemandCurve& c, int32_t t, const DemandShape& shape) {
  if (t > life(c)) return c.extra - c.held;  // finished: what it held (and took) is free again
  const int32_t at = std::min(c.last, c.first + t);
  return c.extra + blocks(at, c, shape) - blocks(c.from, c, shape);
}

}  // namespace

int64_t peak_demand(int64_t used, std::span<const DemandCurve> curves, int32_t horizon, const DemandShape& shape) {
  STRATA_CHECK(horizon >= 0 && shape.block_size > 0);
  // The curve only falls between these steps (a sequence finishing), so its peaks are at them.
  std::vector<int32_t> steps{0, horizon};
  for (const DemandCurve& c : curves) {
    STRATA_CHECK(c.from <= c.first && c.first <= c.last, "demand curve {} {} {}", c.from, c.first, c.last);
    if (life(c) < horizon) steps.push_back(life(c));
  }
  int64_t peak = used;
  for (int32_t t : steps) {
    int64_t d = used;
    for (const DemandCurve& c : curves) d += contribution(c, t, shape);
    peak = std::max(peak, d);
  }
  return peak;
}

}  // namespace strata
