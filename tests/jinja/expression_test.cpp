// Expressions, values, filters, tests and methods of the Jinja interpreter. The table "expression" of
// tests/jinja/data/render_cases.json holds cases whose expected strings were produced by Python
// Jinja2 3.1 configured as Hugging Face's apply_chat_template configures it (sandboxed, trim_blocks,
// lstrip_blocks, loopcontrols, HF's tojson, strftime_now on 29 Nov 2026); to add or change one, edit
// scripts/reference/jinja_cases.py and run it with --write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "jinja/render_cases.h"
#include "jinja/template.h"

namespace strata::jinja {
namespace {

using test::render;
using test::RenderCase;

class JinjaExpression : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaExpression, MatchesJinja2) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.source, c.context), c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, JinjaExpression,
                         ::testing::ValuesIn(test::load_cases("expression")), test::case_name);

TEST(JinjaExpression, TableIsComplete) {
  std::string error;
  EXPECT_GE(test::load_cases("expression", &error).size(), 54u) << error;
}

TEST(JinjaExpression, JsonValuesKeepTheirTypes) {
  const auto ctx = nlohmann::ordered_json::parse(
      R"({"i": 3, "f": 3.0, "big": 9223372036854775807, "neg": -1, "t": true, "n": null, "s": "x", "e": 1e100})");
  EXPECT_EQ(render("{{ i }} {{ f }} {{ big }} {{ neg }} {{ t }} {{ n }} {{ s }} {{ e }}", ctx),
            "3 3.0 9223372036854775807 -1 True None x 1e+100");
  EXPECT_EQ(render("{{ i is integer }}{{ f is float }}{{ t is boolean }}{{ n is none }}{{ i / 2 }}{{ f // 2 }}", ctx),
            "TrueTrueTrueTrue1.51.0");
}

TEST(JinjaExpression, TojsonKeepsNonAsciiAndOrder) {
  const auto ctx = nlohmann::ordered_json::parse(R"({"x": {"z": "é", "a": [1, 2.5, "\u0001"], "m": {}}})");
  EXPECT_EQ(render("{{ x|tojson }}", ctx), "{\"z\": \"é\", \"a\": [1, 2.5, \"\\u0001\"], \"m\": {}}");
  EXPECT_EQ(render("{{ x|tojson(indent=2) }}", ctx),
            "{\n  \"z\": \"é\",\n  \"a\": [\n    1,\n    2.5,\n    \"\\u0001\"\n  ],\n  \"m\": {}\n}");
}

TEST(JinjaExpression, StrftimeNowDefaultsToTheClock) {
  // Without an injected time the current local date is used; it is at least a plausible year.
  std::string year = Template::parse("{{ strftime_now('%Y') }}").render(nlohmann::ordered_json::object());
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(JinjaExpression, ParseDate) {
  auto d = parse_date("2024-02-29");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->tm_year, 124);
  EXPECT_EQ(d->tm_mon, 1);
  EXPECT_EQ(d->tm_mday, 29);
  EXPECT_EQ(d->tm_wday, 4);  // a Thursday
  EXPECT_FALSE(parse_date("2023-02-29").has_value());
  EXPECT_FALSE(parse_date("2024-2-29").has_value());
  EXPECT_FALSE(parse_date("29.02.2024").has_value());
  EXPECT_FALSE(parse_date("").has_value());
}
}  // namespace
}  // namespace strata::jinja
