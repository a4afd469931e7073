// Statements and whitespace control of the Jinja interpreter. The table's expected strings were
// produced by Python Jinja2 3.1 configured as Hugging Face's apply_chat_template configures it
// (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, HF's tojson, strftime_now on 29 Nov 2026).
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

// clang-format off
const RenderCase kCases[] = {
    {"ws_dash_both_sides", "a  {%- if true %} b {% endif -%}  c",
     "{}",
     "a b c"},
    {"ws_trim_and_lstrip_blocks", "a\n  {% if true %}\n  b\n  {% endif %}\nc",
     "{}",
     "a\n  b\nc"},
    {"ws_plus_disables_trim", "a\n  {%+ if true %}\n  b\n  {% endif +%}\nc",
     "{}",
     "a\n    b\n\nc"},
    {"ws_comments", "  {# comment #}\nx\n  {#- c -#}  y",
     "{}",
     "xy"},
    {"ws_print_tags_not_lstripped", "  {{ x }}  {% if 1 %}a{% endif %}",
     "{\"x\": 1}",
     "  1  a"},
    {"ws_print_dash", "{{ 'a' }}\n{{ 'b' -}}\n  {{- 'c' }}\n",
     "{}",
     "a\nbc"},
    {"ws_one_trailing_newline_dropped", "a\n\n",
     "{}",
     "a\n"},
    {"ws_crlf_normalized", "{% if x %}\r\nyes\r\n{% endif %}\r\n",
     "{\"x\": true}",
     "yes\n"},
    {"ws_loop_lines", "line1\n{% for i in range(2) %}\n  item{{ i }}\n{% endfor %}\nend\n",
     "{}",
     "line1\n  item0\n  item1\nend"},
    {"ws_tab_before_tag", "\t{% if 1 %}\t{% endif %}x",
     "{}",
     "\tx"},
    {"ws_tag_mid_line_kept", "x  {% if 1 %}y{% endif %}",
     "{}",
     "x  y"},
    {"raw_block", "{% raw %}{{ x }}{% if %}{% endraw %}",
     "{}",
     "{{ x }}{% if %}"},
    {"raw_with_controls", "  {% raw -%}  \n {{ x }} \n  {%- endraw %}\n|",
     "{}",
     "{{ x }}|"},
    {"if_elif_else", "{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}",
     "{\"c\": 1}",
     "C"},
    {"for_loop_variables", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}",
     "{\"xs\": \"abc\"}",
     "10TrueFalse332,21FalseFalse321,32FalseTrue310,"},
    {"for_prev_next", "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "-2|1-3|2-|"},
    {"for_inline_filter", "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% else %}none{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "212322"},
    {"for_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}",
     "{\"xs\": []}",
     "empty"},
    {"for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2, \"m\": 3}}",
     "z=1;a=2;m=3;zam"},
    {"for_items_filter", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": [1]}}",
     "z=1;a=[1];"},
    {"for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "01345"},
    {"for_nested_loop_shadows", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}",
     "{}",
     "11x21y112x22y2"},
    {"for_cycle", "{% for x in [1,2,3] %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
     "{}",
     "oddevenodd"},
    {"for_changed", "{% for x in [1,1,2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
     "{}",
     "12"},
    {"for_scope_per_iteration", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}",
     "{}",
     "0000"},
    {"for_tuple_target", "{% for (a, b) in [(1,2),(3,4)] %}{{ a + b }}{% endfor %}",
     "{}",
     "37"},
    {"for_undefined_is_empty", "{% for x in undefined_var %}a{% else %}b{% endfor %}",
     "{}",
     "b"},
    {"for_recursive", "{% for item in tree recursive %}[{{ item.n }}{% if item.c %}{{ loop(item.c) }}{% endif %}{{ loop.depth }}]{% endfor %}",
     "{\"tree\": [{\"n\": 1, \"c\": [{\"n\": 2, \"c\": []}]}, {\"n\": 3}]}",
     "[1[22]1][31]"},
    {"for_last_flag", "{% for m in ms %}{% if loop.last %}L{% endif %}{{ m }}{% endfor %}",
     "{\"ms\": [1, 2]}",
     "1L2"},
    {"set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}",
     "{}",
     "12(1, 2)"},
    {"set_namespace", "{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}{{ ns }}",
     "{}",
     "2x<Namespace {'a': 2, 'b': 'x'}>"},
    {"set_namespace_from_loop", "{% set ns = namespace(found=false) %}{% for x in [1,2,3] %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
     "{}",
     "True"},
    {"set_namespace_empty", "{% set ns = namespace() %}{% set ns.index = 0 %}{% for m in [1,2,3] %}{% set ns.index = ns.index + 1 %}{% endfor %}{{ ns.index }}",
     "{}",
     "3"},
    {"set_block", "{% set x %}  block {{ 1 + 1 }} {% endset %}[{{ x }}]{% set y | trim | upper %}  hi  {% endset %}[{{ y }}]",
     "{}",
     "[  block 2 ][HI]"},
    {"set_in_if_leaks", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}",
     "{}",
     "5"},
    {"set_in_for_is_local", "{% for i in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}]",
     "{}",
     "[]"},
    {"set_overrides_context", "{% set messages = messages[1:] %}{{ messages|length }}",
     "{\"messages\": [1, 2, 3]}",
     "2"},
    {"with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "{}",
     "3[]"},
    {"macro_defaults", "{% macro m(a, b='d', c=none) %}{{ a }}|{{ b }}|{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3) }} {{ m(a=5, c=1) }}",
     "{}",
     "1|d|None 1|2|3 5|d|1"},
    {"macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
     "{}",
     "1(2, 3){'x': 4}"},
    {"macro_caller", "{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}inner{% endcall %}",
     "{}",
     "<inner>"},
    {"macro_caller_args", "{% macro m() %}<{{ caller(1, 2) }}>{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %}",
     "{}",
     "<3>"},
    {"macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
     "{}",
     "54321"},
    {"macro_sees_later_globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'global' %}{{ m() }}",
     "{}",
     "global"},
    {"macro_printed", "{% macro m(x) %}{{ x }}{% endmacro %}{{ m }}|{{ m() }}",
     "{}",
     "<Macro 'm'>|"},
    {"macro_missing_param_undefined", "{% macro m(a, b) %}[{{ b }}]{{ b is defined }}{% endmacro %}{{ m(1) }}",
     "{}",
     "[]False"},
    {"filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}{% filter trim|replace('a','b') %}  aaa  {% endfilter %}",
     "{}",
     "HELLO Xbbb"},
    {"comment_everywhere", "a{# {{ not printed }} {% if %} #}b",
     "{}",
     "ab"},
};

// clang-format on

class JinjaStatement : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaStatement, MatchesJinja2) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.source, nlohmann::ordered_json::parse(c.context)), c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, JinjaStatement, ::testing::ValuesIn(kCases), test::case_name);

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
