#include "backend/cpu/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace strata::cpu {
namespace {

struct Counter {
  int64_t calls = 0;
  int64_t ns = 0;
};

std::map<std::string, Counter>& counters() {
  static std::map<std::string, Counter> c;
  return c;
}

}  // namespace

bool profile_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CPU_PROFILE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void profile_record(const std::string& name, int64_t ns) {
  Counter& c = counters()[name];
  ++c.calls;
  c.ns += ns;
}

void profile_report() {
  auto& all = counters();
  if (all.empty()) return;
  // Forward passes: one embed per pass. Pool and quantization lines are parts of matmul lines.
  const auto it = all.find("embed");
  const int64_t passes = it == all.end() ? 1 : std::max<int64_t>(1, it->second.calls);
  int64_t total = 0;
  std::vector<std::pair<std::string, Counter>> rows(all.begin(), all.end());
  for (const auto& [name, c] : rows) {
    if (name.rfind("  ", 0) != 0) total += c.ns;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::string out = fmt::format("STRATA_CPU_PROFILE: {} forward passes, {:.3f} ms of ops per pass\n", passes,
                                static_cast<double>(total) / 1e6 / static_cast<double>(passes));
  out += fmt::format("{:<40} {:>10} {:>12} {:>12} {:>7}\n", "op", "calls/pass", "us/call", "us/pass", "share");
  for (const auto& [name, c] : rows) {
    out += fmt::format("{:<40} {:>10.1f} {:>12.2f} {:>12.1f} {:>6.1f}%\n", name,
                       static_cast<double>(c.calls) / static_cast<double>(passes),
                       static_cast<double>(c.ns) / 1e3 / static_cast<double>(c.calls),
                       static_cast<double>(c.ns) / 1e3 / static_cast<double>(passes),
                       total > 0 ? 100.0 * static_cast<double>(c.ns) / static_cast<double>(total) : 0.0);
  }
  out += "(indented lines are parts of the matmul lines above them, not added to the total)\n";
  std::fputs(out.c_str(), stderr);
  all.clear();
}

}  // namespace strata::cpu
