// Expressions, values, filters, tests and methods of the Jinja interpreter. The table's expected
// strings were produced by Python Jinja2 3.1 configured as Hugging Face's apply_chat_template
// configures it (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, HF's tojson).
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
    {"repr_list_mixed", "{{ [1, 'a', none, true, 1.5, {'k': (1, 2)}, \"it's\", 'say \"hi\"', 'both \\' \"'] }}",
     "{}",
     "[1, 'a', None, True, 1.5, {'k': (1, 2)}, \"it's\", 'say \"hi\"', 'both \\' \"']"},
    {"repr_escapes", "{{ ['a\\tb\\n\\x01\\u00e9\\\\', '\\u00a0', '\\x7f'] }}",
     "{}",
     "['a\\tb\\n\\x01é\\\\', '\\xa0', '\\x7f']"},
    {"string_escapes", "{{ 'a\\tb' }}|{{ '\\u00e9' }}{{ '\\U0001F642' }}{{ '\\101' }}{{ 'q\\d' }}",
     "{}",
     "a\tb|é🙂Aq\\d"},
    {"adjacent_strings", "{{ 'ab' 'cd' }}{{ \"x\" 'y' }}",
     "{}",
     "abcdxy"},
    {"number_literals", "{{ 1e3 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ 123456789012345678 }} {{ 1_000 }} {{ 0x1F }} {{ 3.0e2 }}",
     "{}",
     "1000.0 1.0 0.30000000000000004 1e-07 123456789012345678 1000 31 300.0"},
    {"float_repr", "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 2.0 ** 64 }} {{ 1e22 }} {{ 123456789.123456789 }} {{ -0.0 }}",
     "{}",
     "1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 1.8446744073709552e+19 1e+22 123456789.12345679 -0.0"},
    {"division_and_modulo", "{{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 0.5 }} {{ 10 / 4 }} {{ 4 / 2 }}",
     "{}",
     "3.5 -4 2 -2 3.0 0.5 1.4142135623730951 2.5 2.0"},
    {"precedence", "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 7 // 2 * 2 }} {{ not 1 == 2 }} {{ 1 ~ 2 * 3 }}",
     "{}",
     "4 64 5 14 20 6 True 16"},
    {"concat_and_repeat", "{{ 'ab' ~ 1 ~ none ~ [1] }}{{ 'x' * 3 }}{{ [1,2] * 2 }}{{ 3 * 'y' }}{{ [1] + [2] }}{{ (1,) + (2,) }}",
     "{}",
     "ab1None[1]xxx[1, 2, 1, 2]yyy[1, 2](1, 2)"},
    {"bools_are_ints", "{{ true + 1 }} {{ true == 1 }} {{ 1 == 1.0 }} {{ [1] == [1.0] }}",
     "{}",
     "2 True True True"},
    {"and_or_return_operands", "{{ true and 'x' }}{{ 0 or 'y' }}{{ none or [] }}{{ not none }}{{ '' and 1 }}",
     "{}",
     "xy[]True"},
    {"comparisons", "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' in 'cat' }}{{ 2 not in [1] }}{{ 'k' in {'k':1} }}{{ (1,2) == (1,2) }}{{ 'A' < 'a' }}{{ [1, 2] < [1, 3] }}",
     "{}",
     "TrueFalseTrueTrueTrueTrueTrueTrue"},
    {"subscripts_and_slices", "{{ 'abc'[1] }}{{ 'abc'[-1] }}{{ 'héllo'[1:3] }}{{ [1,2,3,4][::-1] }}{{ [1,2,3,4][1:] }}{{ [1,2,3,4][::2] }}{{ 'abcdef'[-2:] }}{{ [1,2,3][5:] }}{{ 'abc'[::-2] }}{{ [1,2,3][-5:-1] }}",
     "{}",
     "bcél[4, 3, 2, 1][2, 3, 4][1, 3]ef[]ca[1, 2]"},
    {"attribute_vs_item", "{{ x.a }}{{ x['a'] }}[{{ x.b }}]{{ x.b is defined }}{{ x.0 is defined }}",
     "{\"x\": {\"a\": 1}}",
     "11[]FalseFalse"},
    {"dotted_index", "{{ x.0 }}{{ y.1.0 }}",
     "{\"x\": [5], \"y\": [1, [7]]}",
     "57"},
    {"dict_method_wins_over_key", "{{ d.items is defined }}{{ d['items'] }}",
     "{\"d\": {\"items\": 1}}",
     "True1"},
    {"ternary", "{{ a if b else c }}|{{ a if not b }}|{{ 'yes' if none is none else 'no' }}|{{ 'x' if false }}.",
     "{\"a\": 1, \"b\": false, \"c\": 2}",
     "2|1|yes|."},
    {"print_values", "{{ none }} {{ true }} {{ false }} {{ {'a': 1, 'b': {'c': [1, 2]}} }} {{ {1: 'x', none: 'y'} }} {{ (1,) }} {{ () }}",
     "{}",
     "None True False {'a': 1, 'b': {'c': [1, 2]}} {1: 'x', None: 'y'} (1,) ()"},
    {"undefined_lenient_uses", "[{{ undefined_var }}]{{ undefined_var|length }}{{ undefined_var|default('d') }}{{ undefined_var is defined }}{{ undefined_var == none }}{{ not undefined_var }}{{ undefined_var ~ 'x' }}",
     "{}",
     "[]0dFalseFalseTruex"},
    {"undefined_member_tests", "{{ x.y is defined }}{{ x['y'] is defined }}{{ messages[5] is defined }}",
     "{\"x\": {}, \"messages\": []}",
     "FalseFalseFalse"},
    {"filter_trim_case", "{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|lower }}|{{ 'hello world'|upper }}|{{ 'hello WORLD'|capitalize }}|{{ 'hello-world (foo) o\\'neil'|title }}",
     "{}",
     "x|hi|hello world|HELLO WORLD|Hello world|Hello-World (Foo) O'neil"},
    {"filter_sort", "{{ [3,1,2]|sort }}{{ ['b','A','c']|sort }}{{ ['b','A','c']|sort(case_sensitive=true) }}{{ [3,1,2]|sort(reverse=true) }}{{ users|sort(attribute='age')|map(attribute='name')|list }}",
     "{\"users\": [{\"name\": \"a\", \"age\": 3}, {\"name\": \"b\", \"age\": 1}]}",
     "[1, 2, 3]['A', 'b', 'c']['A', 'b', 'c'][3, 2, 1]['b', 'a']"},
    {"filter_unique_first_last_length", "{{ [1,2,2,'A','a']|unique|list }}{{ [1,2,3]|first }}{{ [1,2,3]|last }}[{{ []|first }}]{{ 'abc'|first }}{{ [1,2,3]|length }}{{ 'héllo'|length }}{{ {'a':1}|count }}",
     "{}",
     "[1, 2, 'A']13[]a351"},
    {"filter_join", "{{ [1,2,3]|join(', ') }}|{{ users|join(', ', attribute='name') }}|{{ [1,none,'x']|join }}",
     "{\"users\": [{\"name\": \"a\"}, {\"name\": \"b\"}]}",
     "1, 2, 3|a, b|1Nonex"},
    {"filter_default", "{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ y|d('z') }}",
     "{\"y\": 0}",
     "d|None|d|0"},
    {"filter_selectattr_rejectattr", "{{ users|selectattr('active')|map(attribute='name')|list }}{{ users|rejectattr('active')|map(attribute='name')|list }}{{ users|selectattr('role', 'equalto', 'admin')|list|length }}",
     "{\"users\": [{\"name\": \"a\", \"active\": true, \"role\": \"admin\"}, {\"name\": \"b\", \"active\": false, \"role\": \"user\"}]}",
     "['a']['b']1"},
    {"filter_select_reject_map", "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}{{ [1,0,none,'a']|select|list }}{{ ['a','B']|map('upper')|list }}{{ [1,2,3]|select('greaterthan', 1)|list }}{{ [1,2]|select('in', [2])|list }}{{ [1,2,3]|map('string')|join('-') }}",
     "{}",
     "[1, 3][1, 3][1, 'a']['A', 'B'][2, 3][2]1-2-3"},
    {"filter_map_attribute_default", "{{ users|map(attribute='name', default='?')|list }}",
     "{\"users\": [{\"name\": \"a\"}, {}]}",
     "['a', '?']"},
    {"filter_tojson", "{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1.0, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=4) }}|{{ []|tojson(indent=4) }}",
     "{\"x\": {\"b\": [1, {\"c\": \"ü\"}], \"a\": null}}",
     "{\"b\": [1, {\"c\": \"ü\"}], \"a\": null}|{\n  \"b\": [\n    1,\n    {\n      \"c\": \"ü\"\n    }\n  ],\n  \"a\": null\n}|\"é\\\"\\n\"|[1.0, 2.5, null, true]|{}|[]"},
    {"filter_tojson_options", "{{ x|tojson(indent=0) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}",
     "{\"x\": {\"b\": \"ü🙂\", \"a\": 1}}",
     "{\n\"b\": \"ü🙂\",\n\"a\": 1\n}|{\"a\": 1, \"b\": \"ü🙂\"}|{\"b\":\"ü🙂\",\"a\":1}|{\"b\": \"\\u00fc\\ud83d\\ude42\", \"a\": 1}"},
    {"filter_numbers", "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 5|round }} {{ [1,2,3]|sum }} {{ [3,1,2]|min }} {{ [3,1,2]|max }}",
     "{}",
     "3 2.0 4.0 2.67 3.0 5 6 1 3"},
    {"filter_int_float", "{{ '42'|int }}{{ '4.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 4.9|int }}{{ '0x1A'|int(0, 16) }}{{ '3.5'|float }}{{ 'x'|float }}{{ 2|float }}{{ true|int }}",
     "{}",
     "424074263.50.02.01"},
    {"filter_string_list", "{{ 42|string }}{{ [1]|string }}{{ none|string }}{{ 'abc'|list }}{{ {'a':1,'b':2}|list }}{{ 'abc'|reverse }}{{ [1,2]|reverse|list }}",
     "{}",
     "42[1]None['a', 'b', 'c']['a', 'b']cba[2, 1]"},
    {"filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('--') }}",
     "{}",
     "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n--y"},
    {"filter_replace_format_center", "{{ 'Hello World'|replace('o', '0') }}{{ 'aaaa'|replace('a', 'b', 2) }}{{ '%s-%05.1f|%d'|format('a', 3.14159, 7) }}{{ 'x'|center(7) }}|",
     "{}",
     "Hell0 W0rldbbaaa-003.1|7   x   |"},
    {"filter_batch_slice", "{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3,4,5]|batch(2, 0)|list }}{{ [1,2,3,4,5]|slice(2)|list }}{{ users|sum(attribute='n') }}",
     "{\"users\": [{\"n\": 1}, {\"n\": 5}]}",
     "[[1, 2], [3, 4], [5]][[1, 2], [3, 4], [5, 0]][[1, 2, 3], [4, 5]]6"},
    {"filter_dictsort_escape_striptags", "{{ {'b':1,'a':2}|dictsort }}{{ {'b':1,'a':2}|dictsort(by='value', reverse=true) }}{{ '<b>x</b>'|e }}{{ '<b>'|escape|safe }}{{ '<p>hi <i>there</i></p>'|striptags }}",
     "{}",
     "[('a', 2), ('b', 1)][('a', 2), ('b', 1)]&lt;b&gt;x&lt;/b&gt;&lt;b&gt;hi there"},
    {"filter_truncate_wordcount", "{{ 'long text here to cut'|truncate(9) }}|{{ 'long text here to cut, more text is here yes'|truncate(20, true) }}|{{ 'abc'|truncate(3) }}|{{ 'hello world foo'|wordcount }}",
     "{}",
     "long...|long text here to...|abc|3"},
    {"markup_escapes_what_is_added", "{{ 'a'|safe + '<b>' }}{{ '<a>' + 'b'|safe }}{{ ('x'|safe) ~ '<' }}{{ '<'|e + '&' }}",
     "{}",
     "a&lt;b&gt;&lt;a&gt;bx<&lt;&amp;"},
    {"filter_items_attr", "{{ x|items|list }}{{ y|items|list }}{{ x|attr('a') }}",
     "{\"x\": {\"a\": 1}}",
     "[('a', 1)][]"},
    {"tests_numbers_types", "{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}",
     "{\"x\": 1}",
     "TrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrue"},
    {"tests_containers", "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ y is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ true is boolean }}{{ false is false }}{{ true is true }}{{ 1 is true }}",
     "{}",
     "TrueTrueTrueFalseTrueTrueTrueTrueTrueTrueFalse"},
    {"tests_comparisons", "{{ 'a' is eq 'a' }}{{ 1 is equalto 1 }}{{ 2 is gt 1 }}{{ 1 is lt 2 }}{{ 1 is ne 2 }}{{ 'AB' is upper }}{{ 'ab' is lower }}{{ 1 is in [1] }}{{ x is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ range is callable }}{{ 'x' is not string }}",
     "{\"x\": null}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"str_methods", "{{ ' a b '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}",
     "{}",
     "a b|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a,b', 'c']|TrueTrue"},
    {"str_methods_2", "{{ 'hello world'.title() }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'abcabc'.replace('b', 'X') }}|{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}|{{ 'a-b'.capitalize() }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{name}'.format(5, name='n') }}",
     "{}",
     "Hello World|HELLOhello|aXcaXc|2-1|A-b|1 and x|5n"},
    {"str_methods_3", "{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'abc'.count('b') }}{{ 'x'.zfill(3) }}{{ '-7'.zfill(4) }}{{ 'ab'.center(6, '*') }}|{{ 'abc'.index('c') }}{{ 'a b'.isspace() }}{{ '12'.isdigit() }}",
     "{}",
     "['a', 'b', 'c']100x-007**ab**|2FalseTrue"},
    {"str_split_last_think", "{{ c.split('</think>')[-1] }}",
     "{\"c\": \"<think>hmm</think>answer\"}",
     "answer"},
    {"dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "1None5['a', 'b'][1, 2][('a', 1), ('b', 2)]"},
    {"percent_format", "{{ '%s' % 'a' }}{{ '%d items' % 3 }}{{ '%s and %s' % ('x', 'y') }}{{ '%(a)s!' % {'a': 1} }}{{ '%.2f' % 3.14159 }}{{ '%5s|%-5s|' % ('a', 'b') }}",
     "{}",
     "a3 itemsx and y1!3.14    a|b    |"},
    {"globals", "{{ range(5) | list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}",
     "{}",
     "[0, 1, 2, 3, 4][1, 4, 7][5, 3, 1]{'a': 1, 'b': 2}1"},
    {"cycler_joiner", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set j = joiner('|') %}{{ j() }}x{{ j() }}y{{ j() }}",
     "{}",
     "ababx|y|"},
    {"strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %A') }}",
     "{}",
     "29 Nov 2026|2026-11-29 Sunday"},
    {"key_order_preserved", "{% for k in d %}{{ k }}{% endfor %}{{ d|tojson }}{{ d }}",
     "{\"d\": {\"zeta\": 1, \"alpha\": 2, \"mid\": {\"y\": 1, \"b\": 2}}}",
     "zetaalphamid{\"zeta\": 1, \"alpha\": 2, \"mid\": {\"y\": 1, \"b\": 2}}{'zeta': 1, 'alpha': 2, 'mid': {'y': 1, 'b': 2}}"},
    {"unicode_text", "{{ s|length }}{{ s[0] }}{{ s|upper }}{{ s[::-1] }}{{ s|tojson }}",
     "{\"s\": \"héllo 你好 🙂\"}",
     "10hHÉLLO 你好 🙂🙂 好你 olléh\"héllo 你好 🙂\""},
};

// clang-format on

class JinjaExpression : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaExpression, MatchesJinja2) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.source, nlohmann::ordered_json::parse(c.context)), c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, JinjaExpression, ::testing::ValuesIn(kCases), test::case_name);

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
