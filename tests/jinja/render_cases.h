// What the Jinja reference-table tests share: a case (template, context, Python Jinja2's output
// or error message), loading a table of tests/jinja/data/render_cases.json, and rendering with a
// fixed date for strftime_now. That file is written by scripts/reference/jinja_cases.py, which
// renders every case with Python Jinja2 3.1 configured as Hugging Face's apply_chat_template
// configures it; the tests never need Python.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "jinja/template.h"
#include "support/test_support.h"

namespace strata::jinja::test {

struct RenderCase {
  std::string name;
  std::string source;
  nlohmann::ordered_json context;  // a JSON object
  std::string expected;            // Python Jinja2's output (tables "expression", "statement")
  std::string expected_error;      // or the message of its error (table "error")
};

inline void PrintTo(const RenderCase& c, std::ostream* os) { *os << c.name; }

// The cases of one table ("expression", "statement" or "error"); empty when the file cannot be
// read (each suite's TableIsComplete test then fails with the reason).
inline std::vector<RenderCase> load_cases(const std::string& table, std::string* error = nullptr) {
  std::vector<RenderCase> cases;
  try {
    const auto doc =
        nlohmann::ordered_json::parse(strata::test::read_file(STRATA_SOURCE_DIR "/tests/jinja/data/render_cases.json"));
    for (const auto& c : doc.at(table))
      cases.push_back({c.at("name").get<std::string>(), c.at("template").get<std::string>(), c.at("context"),
                       c.value("expected", std::string()), c.value("expected_error", std::string())});
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    cases.clear();
  }
  return cases;
}

// Renders `source` with strftime_now fixed to 29 Nov 2026 (the date the tables were made on).
inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  RenderOptions o;
  o.now = parse_date("2026-11-29");
  return Template::parse(source).render(context, o);
}

inline std::string case_name(const ::testing::TestParamInfo<RenderCase>& info) { return info.param.name; }

}  // namespace strata::jinja::test
