// Summaries of latency samples as benchmark reports show them: mean, median and 99th percentile,
// with percentiles interpolated linearly between order statistics (numpy's default, which
// `vllm bench serve` uses too, so numbers from both tools compare directly).
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstddef>
#include <vector>

namespace strata::bench {

struct LatencySummary {
  size_t count = 0;   // samples summarised; all other fields are 0 when it is 0
  double mean = 0;
  double median = 0;
  double p99 = 0;
};

// The p-th percentile (p in [0, 100]) of `sorted`, which must be sorted ascending and non-empty:
// rank r = p/100 * (n-1), interpolated between the samples at floor(r) and ceil(r).
double percentile_of_sorted(const std::vector<double>& sorted, double p);

// Summary of the samples in any order (copied and sorted); an empty input gives all zeros.
LatencySummary summarize(std::vector<double> samples);

}  // namespace strata::bench
