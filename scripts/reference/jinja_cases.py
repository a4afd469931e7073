#!/usr/bin/env python3
"""Reference renderings for the Jinja and chat-template tests, made with Python Jinja2.

Jinja2 is configured the way Hugging Face transformers' apply_chat_template configures it
(transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension, a `generation` tag that renders its body in place,
a tojson filter that keeps non-ASCII (json.dumps with ensure_ascii=False), and the globals
raise_exception(msg) and strftime_now(fmt); strftime_now is pinned to 2026-11-29 00:00 (the C++
tests inject the same date), and contexts are passed as keyword arguments, as HF does.

The inputs (template, context) are the lists below; the expected outputs are only ever written
by this script:

  tests/jinja/data/render_cases.json     tables "expression", "statement", "error"
                                         (tests/jinja/expression_test.cpp, syntax_test.cpp,
                                         errors_test.cpp)
  tests/chat/data/reference_renders.json real templates of ../shared/chat-templates with tools
                                         (tests/chat/chat_template_test.cpp)

Usage (Debian: apt-get install python3-jinja2; Jinja2 3.1):
  /usr/bin/python3 scripts/reference/jinja_cases.py           print every case and its output
  /usr/bin/python3 scripts/reference/jinja_cases.py --write   (re)write the two data files
  /usr/bin/python3 scripts/reference/jinja_cases.py --check   compare with the committed files
      (and with ../shared/chat-templates/cases.jsonl when present); exit 1 on any difference
"""

import argparse
import datetime
import json
import os
import sys
import traceback

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARED_TEMPLATES = os.path.normpath(os.path.join(ROOT, "..", "shared", "chat-templates"))
RENDER_CASES = os.path.join(ROOT, "tests", "jinja", "data", "render_cases.json")
CHAT_CASES = os.path.join(ROOT, "tests", "chat", "data", "reference_renders.json")

NOW = datetime.datetime(2026, 11, 29)


# ---- Hugging Face's environment ----

class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: HF's AssistantTracker, minus the index tracking."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def case(name, template, context=None):
    return {"name": name, "template": template, "context": context if context is not None else {}}


# ---- inputs ----

# Expressions, values, filters, tests and methods (tests/jinja/expression_test.cpp).
EXPRESSION = [
    case("repr_list_mixed",
         '{{ [1, \'a\', none, true, 1.5, {\'k\': (1, 2)}, "it\'s", \'say "hi"\', \'both \\\' "\'] }}'),
    case("repr_escapes",
         r"{{ ['a\tb\n\x01\u00e9\\', '\u00a0', '\x7f'] }}"),
    case("string_escapes",
         r"{{ 'a\tb' }}|{{ '\u00e9' }}{{ '\U0001F642' }}{{ '\101' }}{{ 'q\d' }}"),
    case("adjacent_strings",
         '{{ \'ab\' \'cd\' }}{{ "x" \'y\' }}'),
    case("number_literals",
         "{{ 1e3 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ 123456789012345678 }} {{ 1_000 }} {{ 0x1F }} {{ 3.0e2 }}"),
    case("float_repr",
         "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 2.0 ** 64 }} {{ 1e22 }} {{ 123456789.123456789 }} {{ -0.0 }}"),
    case("division_and_modulo",
         "{{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 0.5 }} {{ 10 / 4 }} {{ 4 / 2 }}"),
    case("precedence",
         "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 7 // 2 * 2 }} {{ not 1 == 2 }} {{ 1 ~ 2 * 3 }}"),
    case("concat_and_repeat",
         "{{ 'ab' ~ 1 ~ none ~ [1] }}{{ 'x' * 3 }}{{ [1,2] * 2 }}{{ 3 * 'y' }}{{ [1] + [2] }}{{ (1,) + (2,) }}"),
    case("bools_are_ints",
         "{{ true + 1 }} {{ true == 1 }} {{ 1 == 1.0 }} {{ [1] == [1.0] }}"),
    case("and_or_return_operands",
         "{{ true and 'x' }}{{ 0 or 'y' }}{{ none or [] }}{{ not none }}{{ '' and 1 }}"),
    case("comparisons",
         "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' in 'cat' }}{{ 2 not in [1] }}{{ 'k' in {'k':1} }}{{ (1,2) == (1,2) }}{{ 'A' < 'a' }}{{ [1, 2] < [1, 3] }}"),
    case("subscripts_and_slices",
         "{{ 'abc'[1] }}{{ 'abc'[-1] }}{{ 'héllo'[1:3] }}{{ [1,2,3,4][::-1] }}{{ [1,2,3,4][1:] }}{{ [1,2,3,4][::2] }}{{ 'abcdef'[-2:] }}{{ [1,2,3][5:] }}{{ 'abc'[::-2] }}{{ [1,2,3][-5:-1] }}"),
    case("attribute_vs_item",
         "{{ x.a }}{{ x['a'] }}[{{ x.b }}]{{ x.b is defined }}{{ x.0 is defined }}",
         {"x": {"a": 1}}),
    case("dotted_index",
         "{{ x.0 }}{{ y.1.0 }}",
         {"x": [5], "y": [1, [7]]}),
    case("dict_method_wins_over_key",
         "{{ d.items is defined }}{{ d['items'] }}",
         {"d": {"items": 1}}),
    case("ternary",
         "{{ a if b else c }}|{{ a if not b }}|{{ 'yes' if none is none else 'no' }}|{{ 'x' if false }}.",
         {"a": 1, "b": False, "c": 2}),
    case("print_values",
         "{{ none }} {{ true }} {{ false }} {{ {'a': 1, 'b': {'c': [1, 2]}} }} {{ {1: 'x', none: 'y'} }} {{ (1,) }} {{ () }}"),
    case("undefined_lenient_uses",
         "[{{ undefined_var }}]{{ undefined_var|length }}{{ undefined_var|default('d') }}{{ undefined_var is defined }}{{ undefined_var == none }}{{ not undefined_var }}{{ undefined_var ~ 'x' }}"),
    case("undefined_member_tests",
         "{{ x.y is defined }}{{ x['y'] is defined }}{{ messages[5] is defined }}",
         {"x": {}, "messages": []}),
    case("filter_trim_case",
         r"{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|lower }}|{{ 'hello world'|upper }}|{{ 'hello WORLD'|capitalize }}|{{ 'hello-world (foo) o\'neil'|title }}"),
    case("filter_sort",
         "{{ [3,1,2]|sort }}{{ ['b','A','c']|sort }}{{ ['b','A','c']|sort(case_sensitive=true) }}{{ [3,1,2]|sort(reverse=true) }}{{ users|sort(attribute='age')|map(attribute='name')|list }}",
         {"users": [{"name": "a", "age": 3}, {"name": "b", "age": 1}]}),
    case("filter_unique_first_last_length",
         "{{ [1,2,2,'A','a']|unique|list }}{{ [1,2,3]|first }}{{ [1,2,3]|last }}[{{ []|first }}]{{ 'abc'|first }}{{ [1,2,3]|length }}{{ 'héllo'|length }}{{ {'a':1}|count }}"),
    case("filter_join",
         "{{ [1,2,3]|join(', ') }}|{{ users|join(', ', attribute='name') }}|{{ [1,none,'x']|join }}",
         {"users": [{"name": "a"}, {"name": "b"}]}),
    case("filter_default",
         "{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ y|d('z') }}",
         {"y": 0}),
    case("filter_selectattr_rejectattr",
         "{{ users|selectattr('active')|map(attribute='name')|list }}{{ users|rejectattr('active')|map(attribute='name')|list }}{{ users|selectattr('role', 'equalto', 'admin')|list|length }}",
         {"users": [{"name": "a", "active": True, "role": "admin"}, {"name": "b", "active": False, "role": "user"}]}),
    case("filter_select_reject_map",
         "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}{{ [1,0,none,'a']|select|list }}{{ ['a','B']|map('upper')|list }}{{ [1,2,3]|select('greaterthan', 1)|list }}{{ [1,2]|select('in', [2])|list }}{{ [1,2,3]|map('string')|join('-') }}"),
    case("filter_map_attribute_default",
         "{{ users|map(attribute='name', default='?')|list }}",
         {"users": [{"name": "a"}, {}]}),
    case("filter_tojson",
         '{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ \'é"\\n\'|tojson }}|{{ [1.0, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=4) }}|{{ []|tojson(indent=4) }}',
         {"x": {"b": [1, {"c": "ü"}], "a": None}}),
    case("filter_tojson_options",
         "{{ x|tojson(indent=0) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}",
         {"x": {"b": "ü🙂", "a": 1}}),
    case("filter_numbers",
         "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 5|round }} {{ [1,2,3]|sum }} {{ [3,1,2]|min }} {{ [3,1,2]|max }}"),
    case("filter_int_float",
         "{{ '42'|int }}{{ '4.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 4.9|int }}{{ '0x1A'|int(0, 16) }}{{ '3.5'|float }}{{ 'x'|float }}{{ 2|float }}{{ true|int }}"),
    case("filter_string_list",
         "{{ 42|string }}{{ [1]|string }}{{ none|string }}{{ 'abc'|list }}{{ {'a':1,'b':2}|list }}{{ 'abc'|reverse }}{{ [1,2]|reverse|list }}"),
    case("filter_indent",
         r"{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x\ny'|indent('--') }}"),
    case("filter_replace_format_center",
         "{{ 'Hello World'|replace('o', '0') }}{{ 'aaaa'|replace('a', 'b', 2) }}{{ '%s-%05.1f|%d'|format('a', 3.14159, 7) }}{{ 'x'|center(7) }}|"),
    case("filter_batch_slice",
         "{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3,4,5]|batch(2, 0)|list }}{{ [1,2,3,4,5]|slice(2)|list }}{{ users|sum(attribute='n') }}",
         {"users": [{"n": 1}, {"n": 5}]}),
    case("filter_dictsort_escape_striptags",
         "{{ {'b':1,'a':2}|dictsort }}{{ {'b':1,'a':2}|dictsort(by='value', reverse=true) }}{{ '<b>x</b>'|e }}{{ '<b>'|escape|safe }}{{ '<p>hi <i>there</i></p>'|striptags }}"),
    case("filter_truncate_wordcount",
         "{{ 'long text here to cut'|truncate(9) }}|{{ 'long text here to cut, more text is here yes'|truncate(20, true) }}|{{ 'abc'|truncate(3) }}|{{ 'hello world foo'|wordcount }}"),
    case("markup_escapes_what_is_added",
         "{{ 'a'|safe + '<b>' }}{{ '<a>' + 'b'|safe }}{{ ('x'|safe) ~ '<' }}{{ '<'|e + '&' }}"),
    case("filter_items_attr",
         "{{ x|items|list }}{{ y|items|list }}{{ x|attr('a') }}",
         {"x": {"a": 1}}),
    case("tests_numbers_types",
         "{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}",
         {"x": 1}),
    case("tests_containers",
         "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ y is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ true is boolean }}{{ false is false }}{{ true is true }}{{ 1 is true }}"),
    case("tests_comparisons",
         "{{ 'a' is eq 'a' }}{{ 1 is equalto 1 }}{{ 2 is gt 1 }}{{ 1 is lt 2 }}{{ 1 is ne 2 }}{{ 'AB' is upper }}{{ 'ab' is lower }}{{ 1 is in [1] }}{{ x is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ range is callable }}{{ 'x' is not string }}",
         {"x": None}),
    case("str_methods",
         "{{ ' a b '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}"),
    case("str_methods_2",
         "{{ 'hello world'.title() }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'abcabc'.replace('b', 'X') }}|{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}|{{ 'a-b'.capitalize() }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{name}'.format(5, name='n') }}"),
    case("str_methods_3",
         r"{{ 'a\nb\r\nc'.splitlines() }}{{ 'abc'.count('b') }}{{ 'x'.zfill(3) }}{{ '-7'.zfill(4) }}{{ 'ab'.center(6, '*') }}|{{ 'abc'.index('c') }}{{ 'a b'.isspace() }}{{ '12'.isdigit() }}"),
    case("str_split_last_think",
         "{{ c.split('</think>')[-1] }}",
         {"c": "<think>hmm</think>answer"}),
    case("dict_methods",
         "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}",
         {"d": {"a": 1, "b": 2}}),
    case("percent_format",
         "{{ '%s' % 'a' }}{{ '%d items' % 3 }}{{ '%s and %s' % ('x', 'y') }}{{ '%(a)s!' % {'a': 1} }}{{ '%.2f' % 3.14159 }}{{ '%5s|%-5s|' % ('a', 'b') }}"),
    case("globals",
         "{{ range(5) | list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}"),
    case("cycler_joiner",
         "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set j = joiner('|') %}{{ j() }}x{{ j() }}y{{ j() }}"),
    case("strftime_now",
         "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %A') }}"),
    case("key_order_preserved",
         "{% for k in d %}{{ k }}{% endfor %}{{ d|tojson }}{{ d }}",
         {"d": {"zeta": 1, "alpha": 2, "mid": {"y": 1, "b": 2}}}),
    case("unicode_text",
         "{{ s|length }}{{ s[0] }}{{ s|upper }}{{ s[::-1] }}{{ s|tojson }}",
         {"s": "héllo 你好 🙂"}),
]

# Statements and whitespace control (tests/jinja/syntax_test.cpp).
STATEMENT = [
    case("ws_dash_both_sides",
         "a  {%- if true %} b {% endif -%}  c"),
    case("ws_trim_and_lstrip_blocks",
         'a\n  {% if true %}\n  b\n  {% endif %}\nc'),
    case("ws_plus_disables_trim",
         'a\n  {%+ if true %}\n  b\n  {% endif +%}\nc'),
    case("ws_comments",
         '  {# comment #}\nx\n  {#- c -#}  y'),
    case("ws_print_tags_not_lstripped",
         "  {{ x }}  {% if 1 %}a{% endif %}",
         {"x": 1}),
    case("ws_print_dash",
         "{{ 'a' }}\n{{ 'b' -}}\n  {{- 'c' }}\n"),
    case("ws_one_trailing_newline_dropped",
         'a\n\n'),
    case("ws_crlf_normalized",
         '{% if x %}\r\nyes\r\n{% endif %}\r\n',
         {"x": True}),
    case("ws_loop_lines",
         'line1\n{% for i in range(2) %}\n  item{{ i }}\n{% endfor %}\nend\n'),
    case("ws_tab_before_tag",
         '\t{% if 1 %}\t{% endif %}x'),
    case("ws_tag_mid_line_kept",
         "x  {% if 1 %}y{% endif %}"),
    case("raw_block",
         "{% raw %}{{ x }}{% if %}{% endraw %}"),
    case("raw_with_controls",
         '  {% raw -%}  \n {{ x }} \n  {%- endraw %}\n|'),
    case("if_elif_else",
         "{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}",
         {"c": 1}),
    case("for_loop_variables",
         "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}",
         {"xs": "abc"}),
    case("for_prev_next",
         "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
         {"xs": [1, 2, 3]}),
    case("for_inline_filter",
         "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% else %}none{% endfor %}",
         {"xs": [1, 2, 3]}),
    case("for_else",
         "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}",
         {"xs": []}),
    case("for_unpack_items",
         "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
         {"d": {"z": 1, "a": 2, "m": 3}}),
    case("for_items_filter",
         "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}",
         {"d": {"z": 1, "a": [1]}}),
    case("for_break_continue",
         "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    case("for_nested_loop_shadows",
         "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}"),
    case("for_cycle",
         "{% for x in [1,2,3] %}{{ loop.cycle('odd', 'even') }}{% endfor %}"),
    case("for_changed",
         "{% for x in [1,1,2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"),
    case("for_scope_per_iteration",
         "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"),
    case("for_tuple_target",
         "{% for (a, b) in [(1,2),(3,4)] %}{{ a + b }}{% endfor %}"),
    case("for_undefined_is_empty",
         "{% for x in undefined_var %}a{% else %}b{% endfor %}"),
    case("for_recursive",
         "{% for item in tree recursive %}[{{ item.n }}{% if item.c %}{{ loop(item.c) }}{% endif %}{{ loop.depth }}]{% endfor %}",
         {"tree": [{"n": 1, "c": [{"n": 2, "c": []}]}, {"n": 3}]}),
    case("for_last_flag",
         "{% for m in ms %}{% if loop.last %}L{% endif %}{{ m }}{% endfor %}",
         {"ms": [1, 2]}),
    case("set_tuple",
         "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}"),
    case("set_namespace",
         "{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}{{ ns }}"),
    case("set_namespace_from_loop",
         "{% set ns = namespace(found=false) %}{% for x in [1,2,3] %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}"),
    case("set_namespace_empty",
         "{% set ns = namespace() %}{% set ns.index = 0 %}{% for m in [1,2,3] %}{% set ns.index = ns.index + 1 %}{% endfor %}{{ ns.index }}"),
    case("set_block",
         "{% set x %}  block {{ 1 + 1 }} {% endset %}[{{ x }}]{% set y | trim | upper %}  hi  {% endset %}[{{ y }}]"),
    case("set_in_if_leaks",
         "{% if true %}{% set z = 5 %}{% endif %}{{ z }}"),
    case("set_in_for_is_local",
         "{% for i in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}]"),
    case("set_overrides_context",
         "{% set messages = messages[1:] %}{{ messages|length }}",
         {"messages": [1, 2, 3]}),
    case("with_block",
         "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    case("macro_defaults",
         "{% macro m(a, b='d', c=none) %}{{ a }}|{{ b }}|{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3) }} {{ m(a=5, c=1) }}"),
    case("macro_varargs_kwargs",
         "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}"),
    case("macro_caller",
         "{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}inner{% endcall %}"),
    case("macro_caller_args",
         "{% macro m() %}<{{ caller(1, 2) }}>{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %}"),
    case("macro_recursion",
         "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
    case("macro_sees_later_globals",
         "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'global' %}{{ m() }}"),
    case("macro_printed",
         "{% macro m(x) %}{{ x }}{% endmacro %}{{ m }}|{{ m() }}"),
    case("macro_missing_param_undefined",
         "{% macro m(a, b) %}[{{ b }}]{{ b is defined }}{% endmacro %}{{ m(1) }}"),
    case("filter_block",
         "{% filter upper %}hello {{ 'x' }}{% endfilter %}{% filter trim|replace('a','b') %}  aaa  {% endfilter %}"),
    case("comment_everywhere",
         "a{# {{ not printed }} {% if %} #}b"),
]

# Runtime errors whose message is Python's (tests/jinja/errors_test.cpp); the C++ interpreter
# raises TemplateRuntimeError with exactly Jinja2's str(exception).
ERROR = [
    case("undefined_plus", "{{ missing + 1 }}"),
    case("undefined_call", "{{ missing() }}"),
    case("undefined_attribute_of_dict", "{{ x.y.z }}", {"x": {}}),
    case("list_has_no_element", "{{ messages[3].role }}", {"messages": []}),
    case("undefined_tojson", "{{ missing|tojson }}"),
    case("none_has_no_attribute", "{{ none.x.y }}"),
    case("concatenate_str_int", "{{ 'a' + 1 }}"),
    case("division_by_zero", "{{ 1 / 0 }}"),
    case("compare_list_str", "{{ [1] < 'a' }}"),
    case("iterate_none", "{% for x in none %}{% endfor %}"),
    case("unpack_too_few", "{% set a, b = [1] %}"),
    case("set_attribute_on_non_namespace", "{% set x = 1 %}{% set x.a = 2 %}"),
    case("macro_too_many_arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    case("split_empty_separator", "{{ 'abc'.split('') }}"),
]

# Real templates with tool calls, through the chat-template variables (tests/chat/chat_template_test.cpp).
WEATHER_MESSAGES = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call12345", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 20}"},
]
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}]


def chat_case(name, template_file, bos_token, eos_token, messages, add_generation_prompt, extra=None):
    return {"name": name, "template_file": template_file, "bos_token": bos_token, "eos_token": eos_token,
            "messages": messages, "add_generation_prompt": add_generation_prompt, "extra": extra or {}}


CHAT = [
    chat_case("qwen25_tool_call", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>",
              WEATHER_MESSAGES, True, {"tools": WEATHER_TOOLS}),
    # A string content "is iterable", so this template JSON-quotes the tool result.
    chat_case("llama31_tool_call", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
              WEATHER_MESSAGES, False, {"tools": WEATHER_TOOLS, "date_string": "29 Nov 2026"}),
    # The template concatenates `functions` unconditionally: an undefined variable, at line 21.
    chat_case("firefunction_without_functions", "fireworks-ai-llama-3-firefunction-v2.jinja", "<s>", "</s>",
              [{"role": "user", "content": "hi"}], True),
]


# ---- rendering ----

def template_line(exc):
    """The template line an exception was raised at, as Jinja2's rewritten traceback tells it."""
    line = getattr(exc, "lineno", None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "<template>":
            line = frame.lineno
    return line


def render(template, context):
    """{"expected": output} or {"expected_error": message, "error_type": ..., "error_line": ...}."""
    try:
        return {"expected": ENV.from_string(template).render(**context)}
    except Exception as exc:  # noqa: BLE001 - every Jinja2 failure is a reference result
        return {"expected_error": str(exc), "error_type": type(exc).__name__, "error_line": template_line(exc)}


def render_tables():
    tables = {}
    for table, cases in (("expression", EXPRESSION), ("statement", STATEMENT), ("error", ERROR)):
        rows = []
        for c in cases:
            row = dict(c)
            result = render(c["template"], c["context"])
            if table == "error":
                if "expected_error" not in result:
                    raise SystemExit(f"error case {c['name']} rendered without an error: {result['expected']!r}")
                result.pop("error_line")  # Jinja2 knows no line for most runtime errors
            elif "expected_error" in result:
                raise SystemExit(f"{table} case {c['name']} failed in Jinja2: {result['expected_error']}")
            row.update(result)
            rows.append(row)
        tables[table] = rows
    return tables


def render_chat():
    rows = []
    for c in CHAT:
        with open(os.path.join(SHARED_TEMPLATES, c["template_file"]), encoding="utf-8") as f:
            source = f.read()
        context = dict(c["extra"])
        context.update(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                       bos_token=c["bos_token"], eos_token=c["eos_token"])
        row = dict(c)
        row.update(render(source, context))
        rows.append(row)
    return rows


def document(payload):
    return {"generated_by": "scripts/reference/jinja_cases.py --write (do not edit by hand)",
            "jinja2_version": jinja2.__version__, **payload}


def dump(doc):
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def check_shared_cases():
    """Re-renders ../shared/chat-templates/cases.jsonl (its expected values came from outside)."""
    path = os.path.join(SHARED_TEMPLATES, "cases.jsonl")
    if not os.path.exists(path):
        print(f"skipped: {path} not found")
        return 0
    bad = 0
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    for c in lines:
        with open(os.path.join(SHARED_TEMPLATES, c["template"]), encoding="utf-8") as t:
            source = t.read()
        context = {k: v for k, v in c.items() if k not in ("template", "case", "expected", "expected_error")}
        got = render(source, context)
        want = {k: c[k] for k in ("expected", "expected_error") if k in c}
        got = {k: got[k] for k in ("expected", "expected_error") if k in got}
        if got != want:
            bad += 1
            print(f"DIFFERS {c['template']}/{c['case']}:\n  file:   {want}\n  jinja2: {got}")
    print(f"{len(lines) - bad}/{len(lines)} cases of {path} match Jinja2 {jinja2.__version__}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the data files")
    mode.add_argument("--check", action="store_true", help="compare with the committed data files")
    args = ap.parse_args()
    if not jinja2.__version__.startswith("3.1."):
        print(f"warning: Jinja2 {jinja2.__version__}; the tables were made with 3.1", file=sys.stderr)

    files = {RENDER_CASES: dump(document(render_tables())), CHAT_CASES: dump(document({"cases": render_chat()}))}
    if args.write:
        for path, text in files.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")
        return 0
    if args.check:
        bad = 0
        for path, text in files.items():
            old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if old is None:
                print(f"MISSING {os.path.relpath(path, ROOT)}")
                bad += 1
                continue
            old_doc, new_doc = json.loads(old), json.loads(text)
            old_doc.pop("jinja2_version"), new_doc.pop("jinja2_version")
            if old_doc != new_doc:
                bad += 1
                print(f"DIFFERS {os.path.relpath(path, ROOT)} (run with --write and look at git diff)")
                for table, rows in new_doc.items():
                    old_rows = {r["name"]: r for r in old_doc.get(table, [])} if isinstance(rows, list) else {}
                    for r in rows if isinstance(rows, list) else []:
                        if old_rows.get(r["name"]) != r:
                            print(f"  {table}/{r['name']}: file {old_rows.get(r['name'])!r}\n    jinja2 {r!r}")
            else:
                print(f"ok {os.path.relpath(path, ROOT)}")
        bad += check_shared_cases()
        return 1 if bad else 0
    for path, text in files.items():
        doc = json.loads(text)
        for table, rows in doc.items():
            if not isinstance(rows, list):
                continue
            for r in rows:
                result = r.get("expected", "ERROR " + str(r.get("expected_error")))
                print(f"{table}/{r['name']}: {result!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
