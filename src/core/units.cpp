#include "core/units.h"

#include <fmt/format.h>

#include <cctype>
#include <string>

namespace strata {

std::optional<uint64_t> parse_bytes(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t num_start = i;
  bool seen_digit = false;
  bool seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (seen_dot) return std::nullopt;
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  if (!seen_digit) return std::nullopt;
  const std::string number(text.substr(num_start, i - num_start));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  long double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb") mult = 1e3L;
  else if (unit == "m" || unit == "mb") mult = 1e6L;
  else if (unit == "g" || unit == "gb") mult = 1e9L;
  else if (unit == "t" || unit == "tb") mult = 1e12L;
  else if (unit == "kib") mult = 1024.0L;
  else if (unit == "mib") mult = 1024.0L * 1024;
  else if (unit == "gib") mult = 1024.0L * 1024 * 1024;
  else if (unit == "tib") mult = 1024.0L * 1024 * 1024 * 1024;
  else return std::nullopt;
  long double v = std::stold(number) * mult;
  if (!(v >= 0) || v > 1.8e19L) return std::nullopt;
  return static_cast<uint64_t>(v + 0.5L);
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace strata
