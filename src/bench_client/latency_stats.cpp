#include "bench_client/latency_stats.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata::bench {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  STRATA_CHECK(!sorted.empty());
  STRATA_CHECK(p >= 0 && p <= 100);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

LatencySummary summarize(std::vector<double> samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = samples.size();
  double total = 0;
  for (double x : samples) total += x;
  s.mean = total / static_cast<double>(samples.size());
  s.median = percentile_of_sorted(samples, 50);
  s.p99 = percentile_of_sorted(samples, 99);
  return s;
}

}  // namespace strata::bench
