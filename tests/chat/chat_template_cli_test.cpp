// Black-box tests of `strata template render`: every case of ../shared/chat-templates/cases.jsonl
// through the binary (stdout byte-exact, raise_exception -> exit 1 with the message on stderr),
// and the error exits of bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::run_command;
using test::shared_path;
using test::strata_bin;

// run_command takes no environment, so the fixed date goes through env(1).
test::CommandResult render(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/env", "STRATA_TEMPLATE_NOW=2026-11-29", strata_bin(), "template", "render"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

struct CaseLine {
  std::string name;  // test name: template and case
  std::string json;  // the line, passed verbatim to --case
};

void PrintTo(const CaseLine& c, std::ostream* os) { *os << c.name; }

// Read when the tests are registered, so new lines of the file become new tests.
std::vector<CaseLine> case_lines() {
  std::vector<CaseLine> lines;
  std::ifstream in(shared_path("chat-templates/cases.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json c = nlohmann::json::parse(line);
    std::string name = c.value("template", "") + "_" + c.value("case", "") + "_" + std::to_string(lines.size());
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    lines.push_back({name, line});
  }
  return lines;
}

class TemplateCli : public ::testing::TestWithParam<CaseLine> {};

TEST_P(TemplateCli, RendersTheCase) {
  const nlohmann::json c = nlohmann::json::parse(GetParam().json);
  auto r = render({"--template", shared_path("chat-templates/" + c["template"].get<std::string>()), "--case",
                   GetParam().json});
  if (c.contains("expected")) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c["expected"].get<std::string>());
  } else {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(c["expected_error"].get<std::string>()), std::string::npos) << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, TemplateCli, ::testing::ValuesIn(case_lines()),
                         [](const ::testing::TestParamInfo<CaseLine>& info) { return info.param.name; });

TEST(TemplateCliErrors, CaseFileAndModel) {
  const std::string dir = test::make_temp_dir("strata-template");
  test::write_file(dir + "/case.json", R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})");
  // --case-file reads the same object; stories260K has no chat template, so ChatML is used.
  auto r = render({"--model", shared_path("models/stories260K.gguf"), "--case-file", dir + "/case.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  GgufWriter w;
  w.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"<unk>", "<B>", "<E>"}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.chat_template", GgufValue::str("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"));
  w.write_file(dir + "/m.gguf");
  r = render({"--model", dir + "/m.gguf", "--case-file", dir + "/case.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<B>Hi<E>");
  // The case's own variables win over the model's tokens.
  r = render({"--model", dir + "/m.gguf", "--case", R"({"messages": [{"content": "x"}], "bos_token": "[b]"})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[b]x<E>");
  std::filesystem::remove_all(dir);
}

TEST(TemplateCliErrors, StrftimeNowFollowsTheEnvironment) {
  const std::string dir = test::make_temp_dir("strata-template");
  test::write_file(dir + "/t.jinja", "{{ strftime_now('%d %b %Y') }}");
  auto r = render({"--template", dir + "/t.jinja", "--case", "{}"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "29 Nov 2026");
  r = run_command({"/usr/bin/env", "STRATA_TEMPLATE_NOW=29.11.2026", strata_bin(), "template", "render", "--template",
                   dir + "/t.jinja", "--case", "{}"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("STRATA_TEMPLATE_NOW"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(TemplateCliErrors, BadInputExitsTwo) {
  const std::string dir = test::make_temp_dir("strata-template");
  test::write_file(dir + "/bad.jinja", "line one\n{% for m in messages %}\n{{ m.content }");
  test::write_file(dir + "/ok.jinja", "{{ messages|length }}");

  auto r = render({"--template", dir + "/ok.jinja", "--case", "{not json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;

  r = render({"--template", dir + "/ok.jinja", "--case", "[1, 2]"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("JSON object"), std::string::npos) << r.err;

  r = render({"--template", dir + "/missing.jinja", "--case", "{}"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.jinja"), std::string::npos) << r.err;

  r = render({"--template", dir + "/ok.jinja", "--case-file", dir + "/missing.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;

  r = render({"--template", dir + "/bad.jinja", "--case", "{}"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("template syntax error at line 3"), std::string::npos) << r.err;

  r = render({"--case", "{}"});
  EXPECT_EQ(r.exit_code, 2) << "a template source is required";
  r = render({"--template", dir + "/ok.jinja"});
  EXPECT_EQ(r.exit_code, 2) << "a case is required";
  r = render({"--template", dir + "/ok.jinja", "--model", "x.gguf", "--case", "{}"});
  EXPECT_EQ(r.exit_code, 2) << "--template and --model exclude each other";
  std::filesystem::remove_all(dir);
}

TEST(TemplateCliErrors, RuntimeErrorExitsOne) {
  const std::string dir = test::make_temp_dir("strata-template");
  test::write_file(dir + "/t.jinja", "ok\n{{ messages[0].content.upper() + 1 }}");
  auto r = render({"--template", dir + "/t.jinja", "--case", R"({"messages": [{"content": "a"}]})"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("can only concatenate str (not \"int\") to str"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(TemplateCliErrors, EveryFlagHasHelp) {
  auto r = run_command({strata_bin(), "template", "render", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--template", "--model", "--case", "--case-file"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(r.out.find("without an added newline"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata
