// Parser of the Prometheus text exposition format (what GET /metrics returns), enough to read
// counters and gauges of any server: `name{label="value",...} value [timestamp]` lines, `#`
// comments (HELP/TYPE) skipped, escaped label values (\" \\ \n), NaN and ±Inf values.
//
// Thread-safety: functions are pure; a parsed MetricSamples is a plain value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::bench {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

class MetricSamples {
 public:
  MetricSamples() = default;
  explicit MetricSamples(std::vector<MetricSample> samples) : samples_(std::move(samples)) {}

  // The value of the sample `name` whose labels include every pair of `labels` (the first one in
  // text order when several match); nullopt when none does.
  std::optional<double> find(std::string_view name, const std::map<std::string, std::string>& labels = {}) const;

  // The sum over every sample called `name` (all label sets); nullopt when there is none.
  std::optional<double> sum(std::string_view name) const;

  const std::vector<MetricSample>& samples() const { return samples_; }

 private:
  std::vector<MetricSample> samples_;
};

// Parses a whole exposition. Malformed lines are skipped, not fatal: a benchmark must not fail
// because one metric of a server it does not control is odd. `skipped`, when given, receives
// how many non-comment lines could not be parsed.
MetricSamples parse_prometheus_text(std::string_view text, size_t* skipped = nullptr);

}  // namespace strata::bench
