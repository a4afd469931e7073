// Statements and whitespace control of the Jinja interpreter. The table "statement" of
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

class JinjaStatement : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaStatement, MatchesJinja2) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.source, c.context), c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, JinjaStatement,
                         ::testing::ValuesIn(test::load_cases("statement")), test::case_name);

TEST(JinjaStatement, TableIsComplete) {
  std::string error;
  EXPECT_GE(test::load_cases("statement", &error).size(), 48u) << error;
}

TEST(JinjaStatement, ParsedOnceRenderedMany) {
  Template t = Template::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  EXPECT_EQ(t.render({{"messages", {{{"role", "user"}, {"content", "a"}}}}}), "user:a;");
  EXPECT_EQ(t.render({{"messages", nlohmann::ordered_json::array()}}), "");
  EXPECT_EQ(t.render(nlohmann::ordered_json::object()), "");
  // Borrowed variables: the later of two entries with one name wins.
  const nlohmann::ordered_json first = nlohmann::ordered_json::array({{{"role", "a"}, {"content", "1"}}});
  const nlohmann::ordered_json second = nlohmann::ordered_json::array({{{"role", "b"}, {"content", "2"}}});
  EXPECT_EQ(t.render_vars({{"messages", &first}, {"messages", &second}}), "b:2;");
}

TEST(JinjaStatement, DoAndMutatingMethods) {
  // Beyond Hugging Face's immutable sandbox, as other chat-template runtimes allow.
  EXPECT_EQ(render("{% set l = [1] %}{% do l.append(2) %}{% do l.extend([3, 4]) %}{{ l }}{{ l.pop() }}{{ l }}"),
            "[1, 2, 3, 4]4[1, 2, 3]");
  EXPECT_EQ(render("{% set d = {'a': 1} %}{% do d.update({'b': 2}) %}{{ d }}{{ d.pop('a') }}{{ d }}"),
            "{'a': 1, 'b': 2}1{'b': 2}");
  EXPECT_EQ(render("{% set ns = namespace(items=[]) %}{% for x in 'ab' %}{% do ns.items.append(x) %}{% endfor %}"
                   "{{ ns.items|join(',') }}"),
            "a,b");
}

TEST(JinjaStatement, GenerationAndBlockRenderInPlace) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
  EXPECT_EQ(render("a{% block body %}b{% endblock body %}c"), "abc");
}

TEST(JinjaStatement, TrailingNewlineDroppedOnce) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("x\r\n"), "x");
  EXPECT_EQ(render("{{ 'a' }}\n"), "a");
}

TEST(JinjaStatement, LstripOnlyAtLineStart) {
  // The spaces before a block tag go only when nothing else precedes it on its line.
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(render("a\n  {% if true %}x{% endif %}"), "a\nx");
  EXPECT_EQ(render("{% if true %}\n  {% endif %}y"), "y");
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");
}
}  // namespace
}  // namespace strata::jinja
