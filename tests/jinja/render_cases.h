// What the Jinja reference-table tests share: a case (template, context, Python Jinja2's output)
// and rendering with a fixed date for strftime_now.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "jinja/template.h"

namespace strata::jinja::test {

struct RenderCase {
  const char* name;
  const char* source;
  const char* context;   // JSON object
  const char* expected;  // Python Jinja2's output
};

inline void PrintTo(const RenderCase& c, std::ostream* os) { *os << c.name; }

// Renders `source` with strftime_now fixed to 29 Nov 2026 (the date the tables were made on).
inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  RenderOptions o;
  o.now = parse_date("2026-11-29");
  return Template::parse(source).render(context, o);
}

inline std::string case_name(const ::testing::TestParamInfo<RenderCase>& info) { return info.param.name; }

}  // namespace strata::jinja::test
