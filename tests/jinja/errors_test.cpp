// Failure behaviour of the Jinja interpreter: syntax and runtime errors with positions, Jinja2's
// undefined semantics, raise_exception as its own error type, the resource limits, and
// robustness against malformed templates and hostile contexts (no crash, no hang).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "jinja/render_cases.h"
#include "jinja/template.h"
#include "support/test_support.h"

namespace strata::jinja {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const RenderOptions& options = {}) {
  return Template::parse(source).render(context, options);
}

TemplateSyntaxError syntax_error(const std::string& source) {
  try {
    Template::parse(source);
  } catch (const TemplateSyntaxError& e) {
    return e;
  }
  ADD_FAILURE() << "no syntax error for: " << source;
  return TemplateSyntaxError("", 0, 0);
}

TemplateRuntimeError runtime_error(const std::string& source, const ordered_json& context = ordered_json::object(),
                                   const RenderOptions& options = {}) {
  try {
    render(source, context, options);
  } catch (const TemplateRuntimeError& e) {
    return e;
  }
  ADD_FAILURE() << "no runtime error for: " << source;
  return TemplateRuntimeError("", 0, 0);
}

// ---- syntax errors ----

TEST(JinjaSyntaxError, ReportsLineAndColumn) {
  TemplateSyntaxError e = syntax_error("line one\n{% for m in messages %}\n  {{ m.content");
  EXPECT_EQ(e.line(), 3u);
  EXPECT_EQ(e.column(), 3u);
  EXPECT_EQ(std::string(e.what()),
            "template syntax error at line 3, column 3: unexpected end of template: the tag opened here is missing its '}}'");

  e = syntax_error("line one\n{% for m in messages %}\n  {{ m.content }");
  EXPECT_EQ(e.line(), 3u);
  EXPECT_EQ(e.column(), 16u);
  EXPECT_EQ(e.message(), "unexpected '}'");

  e = syntax_error("{% if x %}\nyes\n");
  EXPECT_EQ(e.message(), "unexpected end of template, expected 'elif' or 'else' or 'endif'");

  e = syntax_error("ok\n{{ 1 + }}");
  EXPECT_EQ(e.line(), 2u);
  EXPECT_EQ(e.column(), 8u);
  EXPECT_EQ(e.message(), "unexpected 'end of print statement'");

  e = syntax_error("{% for x in y %}{% endif %}");
  EXPECT_EQ(e.message(), "encountered unknown tag 'endif'; expected 'endfor' or 'else'");
}

TEST(JinjaSyntaxError, MalformedPieces) {
  EXPECT_EQ(syntax_error("{{ 'abc }}").message(), "unterminated string literal");
  EXPECT_EQ(syntax_error("{# open").message(), "missing end of comment tag");
  EXPECT_EQ(syntax_error("{% raw %}x").message(), "missing end of raw directive ({% endraw %})");
  EXPECT_EQ(syntax_error("{{ (1, 2 }}").message(), "unexpected '}', expected ')'");
  EXPECT_EQ(syntax_error("{{ x ? y }}").message(), "unexpected character '?'");
  EXPECT_EQ(syntax_error("{% break %}").message(), "'break' outside of a loop");
  EXPECT_EQ(syntax_error("{% macro m(a=1, b) %}{% endmacro %}").message(), "non-default argument follows default argument");
  EXPECT_EQ(syntax_error("{% set none = 1 %}").message(), "can't assign to constant 'none'");
  EXPECT_EQ(syntax_error("{% include 'other.jinja' %}").message(),
            "the 'include' tag is not supported: chat templates must be self-contained");
  EXPECT_EQ(syntax_error("{% frobnicate %}").message(), "encountered unknown tag 'frobnicate'");
  EXPECT_EQ(syntax_error("{{ 99999999999999999999 }}").message(), "integer literal too large");
}

TEST(JinjaSyntaxError, IsAStrataError) {
  // Boundaries that only want a clear message can catch strata::Error.
  EXPECT_THROW(Template::parse("{% if %}"), strata::Error);
}

// ---- runtime errors and undefined values ----

TEST(JinjaRuntimeError, UndefinedIsStrictOnlyWhenUsed) {
  EXPECT_EQ(render("[{{ missing }}]{{ missing is defined }}{{ missing|default('d') }}{{ missing|length }}"),
            "[]Falsed0");
  TemplateRuntimeError e = runtime_error("a\n{{ missing.attr }}");
  EXPECT_EQ(e.message(), "'missing' is undefined");
  EXPECT_EQ(e.line(), 2u);
}

// Undefined values used strictly and Python's type errors: the message is Jinja2's own (table
// "error" of tests/jinja/data/render_cases.json, written by scripts/reference/jinja_cases.py).
class JinjaRuntimeErrorCase : public ::testing::TestWithParam<test::RenderCase> {};

TEST_P(JinjaRuntimeErrorCase, MessageMatchesJinja2) {
  const test::RenderCase& c = GetParam();
  EXPECT_EQ(runtime_error(c.source, c.context).message(), c.expected_error) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, JinjaRuntimeErrorCase, ::testing::ValuesIn(test::load_cases("error")),
                         test::case_name);

TEST(JinjaRuntimeErrorCase, TableIsComplete) {
  std::string error;
  EXPECT_GE(test::load_cases("error", &error).size(), 14u) << error;
}

TEST(JinjaRuntimeError, OwnMessagesWherePythonHasNone) {
  // Jinja2 rejects unknown filters and tests when compiling ("No filter named 'nosuchfilter'."),
  // we when they are used; Python integers do not overflow.
  EXPECT_EQ(runtime_error("{{ x|nosuchfilter }}").message(), "no filter named 'nosuchfilter'");
  EXPECT_EQ(runtime_error("{{ x is nosuchtest }}").message(), "no test named 'nosuchtest'");
  EXPECT_EQ(runtime_error("{{ 9223372036854775807 + 1 }}").message(),
            "integer overflow (values beyond 64 bits are not supported)");
}

TEST(JinjaRuntimeError, RenderContextMustBeAnObject) {
  EXPECT_THROW(render("x", ordered_json::array()), TemplateRuntimeError);
}

// ---- raise_exception ----

TEST(JinjaRaiseException, IsItsOwnErrorWithTheExactMessage) {
  const std::string src = "{% if messages[0].role == 'system' %}\n  {{ raise_exception('System role not supported') }}\n{% endif %}ok";
  const ordered_json ctx = ordered_json::parse(R"({"messages": [{"role": "system"}]})");
  try {
    render(src, ctx);
    ADD_FAILURE() << "expected RaiseException";
  } catch (const TemplateRuntimeError&) {
    ADD_FAILURE() << "raise_exception must not look like a runtime error";
  } catch (const RaiseException& e) {
    EXPECT_EQ(std::string(e.what()), "System role not supported");
    EXPECT_EQ(e.message(), "System role not supported");
    EXPECT_EQ(e.line(), 2u);
  }
  EXPECT_EQ(render(src, ordered_json::parse(R"({"messages": [{"role": "user"}]})")), "ok");
  // The message is whatever the template computes.
  try {
    render("{{ raise_exception('Invalid role ' ~ r ~ '!') }}", {{"r", "bot"}});
    ADD_FAILURE();
  } catch (const RaiseException& e) {
    EXPECT_EQ(e.message(), "Invalid role bot!");
  }
}

// ---- limits ----

TEST(JinjaLimits, OutputSize) {
  RenderOptions o;
  o.max_output_bytes = 1000;
  EXPECT_EQ(render("{% for i in range(99) %}x{% endfor %}", {}, o).size(), 99u);
  TemplateRuntimeError e = runtime_error("{% for i in range(2000) %}x{% endfor %}", {}, o);
  EXPECT_EQ(e.message(), "output exceeds the limit of 1000 bytes");
  e = runtime_error("{{ 'x' * 5000 }}", {}, o);
  EXPECT_NE(e.message().find("exceeds the limit of 1000"), std::string::npos) << e.message();
  // Doubling a string in a loop stops at the limit instead of exhausting memory.
  e = runtime_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}, o);
  EXPECT_NE(e.message().find("exceeds the limit"), std::string::npos) << e.message();
}

TEST(JinjaLimits, LoopIterations) {
  RenderOptions o;
  o.max_loop_iterations = 1000;
  EXPECT_EQ(render("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}ok", {}, o), "ok");
  TemplateRuntimeError e = runtime_error("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, o);
  EXPECT_EQ(e.message(), "loop iteration limit of 1000 exceeded");
  // The default limit stops a nested 10^10 loop quickly.
  e = runtime_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_EQ(e.message(), "loop iteration limit of 1000000 exceeded");
  EXPECT_EQ(runtime_error("{{ range(1000000)|length }}").message(), "range too big (at most 100000 items)");
}

TEST(JinjaLimits, RecursionDepth) {
  TemplateRuntimeError e = runtime_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(e.message(), "maximum recursion depth exceeded (100 nested macro calls)");
  RenderOptions o;
  o.max_call_depth = 5;
  EXPECT_EQ(render("{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}", {}, o), "4321");
  EXPECT_THROW(render("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(9) }}", {}, o),
               TemplateRuntimeError);
}

TEST(JinjaLimits, EvaluationSteps) {
  RenderOptions o;
  o.max_steps = 10000;
  TemplateRuntimeError e = runtime_error("{% for i in range(100000) %}{{ i }}{% endfor %}", {}, o);
  EXPECT_NE(e.message().find("evaluation budget of 10000 steps"), std::string::npos) << e.message();
}

TEST(JinjaLimits, NestingInTheTemplateAndTheData) {
  EXPECT_EQ(render("{{ " + std::string(60, '(') + "1" + std::string(60, ')') + " }}"), "1");
  TemplateSyntaxError s = syntax_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  EXPECT_EQ(s.message(), "template nested too deeply (more than 100 levels)");
  std::string deep_ifs;
  for (int i = 0; i < 3000; ++i) deep_ifs += "{% if 1 %}";
  EXPECT_THROW(Template::parse(deep_ifs), TemplateSyntaxError);
  std::string sum = "{{ 1";
  for (int i = 0; i < 300; ++i) sum += " + 1";
  EXPECT_EQ(render(sum + " }}"), "301");  // as long as Python Jinja2 manages
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  EXPECT_EQ(syntax_error(sum + " }}").message(), "expression too long (more than 500 chained operations)");

  // A context nested deeper than any real conversation is refused, not recursed into.
  // (Built by parsing: nlohmann's parser and destructor are iterative, its copy is not.)
  const ordered_json ctx = ordered_json::parse("{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  TemplateRuntimeError e = runtime_error("{{ x|tojson }}", ctx);
  EXPECT_NE(e.message().find("nested too deeply"), std::string::npos) << e.message();
}

TEST(JinjaLimits, DeepNestingInsideRecursionFailsCleanly) {
  // Block nesting within macro recursion: the overall nesting limit stops it before the native
  // stack runs out (also under the sanitizers, whose frames are larger).
  std::string body;
  for (int i = 0; i < 60; ++i) body += "{% if true %}";
  body += "{{ f(n + 1) }}";
  for (int i = 0; i < 60; ++i) body += "{% endif %}";
  TemplateRuntimeError e = runtime_error("{% macro f(n) %}" + body + "{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.message().find("nesting too deep"), std::string::npos) << e.message();
}

TEST(JinjaLimits, SelfReferencingValues) {
  EXPECT_NE(runtime_error("{% set l = [] %}{% do l.append(l) %}{{ l }}").message().find("self-referencing"),
            std::string::npos);
  EXPECT_NE(runtime_error("{% set l = [] %}{% do l.append(l) %}{{ l|tojson }}").message().find("self-referencing"),
            std::string::npos);
  EXPECT_NE(runtime_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns == ns }}").message().find("self-referencing"),
            std::string::npos);
  // Cycles are broken when the render ends (the sanitizer build checks nothing leaks).
  EXPECT_EQ(render("{% set l = [] %}{% do l.append(l) %}{% set d = {} %}{% do d.update({'d': d}) %}{{ l|length }}"), "1");
}

// ---- robustness: mangled real templates never crash or hang ----

std::vector<std::string> real_templates() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(strata::test::shared_path("chat-templates")))
    if (e.path().extension() == ".jinja") out.push_back(strata::test::read_file(e.path().string()));
  return out;
}

// Renders whatever parses; every failure must be one of the template error types.
void parse_and_render(const std::string& source, const ordered_json& ctx) {
  RenderOptions o;
  o.max_steps = 2'000'000;
  try {
    Template t = Template::parse(source);
    t.render(ctx, o);
  } catch (const TemplateError&) {
  }
}

const ordered_json& fuzz_context() {
  static const ordered_json ctx = ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefghi", "type": "function",
                  "function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "tool_call_id": "abcdefghi", "content": "r"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "x"}},
                              "required": ["a"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "functions": "[]", "datetime": "now"})");
  return ctx;
}

TEST(JinjaRobustness, EveryPrefixOfTheRealTemplates) {
  for (const std::string& src : real_templates())
    for (size_t n = 0; n <= src.size(); n += 5) parse_and_render(src.substr(0, n), fuzz_context());
}

TEST(JinjaRobustness, RandomByteEdits) {
  std::mt19937 rng(1234);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~*/ \n\tabcxyz019_=<>!\xc3\xa9\xff";
  for (const std::string& src : real_templates()) {
    for (int round = 0; round < 60; ++round) {
      std::string s = src;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0: s[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: s.erase(at, 1 + rng() % 8); break;
          default: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        }
      }
      parse_and_render(s, fuzz_context());
    }
  }
}

TEST(JinjaRobustness, HostileContextValues) {
  // Invalid UTF-8 and odd types pass through string operations without crashing.
  const ordered_json ctx = {{"s", std::string("a\xff\xfe b\xc3")}, {"n", nullptr}, {"f", 1e308}};
  EXPECT_EQ(render("{{ s|length }}{{ s|upper }}{{ s[1:] }}{{ s.split() }}{{ s|trim }}", ctx).substr(0, 1), "6");
  EXPECT_EQ(render("{{ f * 10 }} {{ -f * 10 }} {{ (f * 10) - (f * 10) }}", ctx), "inf -inf nan");
  EXPECT_NO_THROW(render("{{ s|tojson }}{{ s|title }}{{ s[::-1] }}{{ s|wordcount }}", ctx));
}

}  // namespace
}  // namespace strata::jinja
