#include "bench_client/prometheus_text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace strata::bench {
namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

void skip_blanks(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

std::optional<double> parse_value(std::string_view s) {
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  const std::string copy(s);  // strtod needs a terminator
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return std::nullopt;
  return v;
}

// Parses `{a="x",b="y"}` starting at s[i] == '{'; leaves i after the '}'.
bool parse_labels(std::string_view s, size_t& i, std::map<std::string, std::string>& labels) {
  ++i;  // '{'
  while (true) {
    skip_blanks(s, i);
    if (i < s.size() && s[i] == '}') {
      ++i;
      return true;
    }
    const size_t start = i;
    while (i < s.size() && is_name_char(s[i])) ++i;
    if (i == start) return false;
    std::string key(s.substr(start, i - start));
    skip_blanks(s, i);
    if (i >= s.size() || s[i] != '=') return false;
    ++i;
    skip_blanks(s, i);
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    std::string value;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size()) {
        ++i;
        value.push_back(s[i] == 'n' ? '\n' : s[i]);
      } else {
        value.push_back(s[i]);
      }
      ++i;
    }
    if (i >= s.size()) return false;
    ++i;  // closing quote
    labels[std::move(key)] = std::move(value);
    skip_blanks(s, i);
    if (i < s.size() && s[i] == ',') ++i;
  }
}

std::optional<MetricSample> parse_line(std::string_view line) {
  MetricSample m;
  size_t i = 0;
  skip_blanks(line, i);
  const size_t start = i;
  if (i >= line.size() || !is_name_start(line[i])) return std::nullopt;
  while (i < line.size() && is_name_char(line[i])) ++i;
  m.name.assign(line.substr(start, i - start));
  skip_blanks(line, i);
  if (i < line.size() && line[i] == '{' && !parse_labels(line, i, m.labels)) return std::nullopt;
  skip_blanks(line, i);
  const size_t vstart = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  const auto v = parse_value(line.substr(vstart, i - vstart));
  if (!v) return std::nullopt;
  m.value = *v;
  return m;  // an optional timestamp may follow; it does not matter here
}

}  // namespace

std::optional<double> MetricSamples::find(std::string_view name, const std::map<std::string, std::string>& labels) const {
  for (const auto& s : samples_) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      const auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        all = false;
        break;
      }
    }
    if (all) return s.value;
  }
  return std::nullopt;
}

std::optional<double> MetricSamples::sum(std::string_view name) const {
  std::optional<double> total;
  for (const auto& s : samples_) {
    if (s.name == name) total = total.value_or(0.0) + s.value;
  }
  return total;
}

MetricSamples parse_prometheus_text(std::string_view text, size_t* skipped) {
  std::vector<MetricSample> samples;
  size_t bad = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    skip_blanks(line, i);
    if (i == line.size() || line[i] == '#') continue;
    if (auto m = parse_line(line)) {
      samples.push_back(std::move(*m));
    } else {
      ++bad;
    }
  }
  if (skipped) *skipped = bad;
  return MetricSamples(std::move(samples));
}

}  // namespace strata::bench
