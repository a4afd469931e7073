// Chat templates against references from outside the project: every case of
// ../shared/chat-templates/cases.jsonl (rendered by Python Jinja2 the way Hugging Face does) must
// come out byte for byte, through jinja::Template and through ChatTemplate; so must the cases of
// tests/chat/data/reference_renders.json (tool calls; scripts/reference/jinja_cases.py renders them
// with Jinja2); every real template in that folder must render a plain conversation; templates and
// special tokens load from GGUF.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "jinja/template.h"
#include "support/test_support.h"

namespace strata {
namespace {

using nlohmann::ordered_json;

struct Case {
  std::string name;  // "<template>/<case>" for messages and test names
  ordered_json data;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Reads the cases file at test-registration time, so new lines become new tests.
std::vector<Case> load_cases() {
  std::vector<Case> cases;
  std::ifstream in(test::shared_path("chat-templates/cases.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ordered_json j = ordered_json::parse(line);
    cases.push_back({j.value("template", std::string("?")) + "/" + j.value("case", std::string("?")), std::move(j)});
  }
  return cases;
}

std::vector<std::string> template_files() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(test::shared_path("chat-templates")))
    if (e.path().extension() == ".jinja") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_template(const std::string& file) { return test::read_file(test::shared_path("chat-templates/" + file)); }

std::string test_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

jinja::RenderOptions fixed_now() {
  jinja::RenderOptions o;
  o.now = jinja::parse_date("2026-11-29");
  return o;
}

ordered_json variables_of(const ordered_json& c) {
  ordered_json vars = ordered_json::object();
  for (const auto& [k, v] : c.items())
    if (k != "template" && k != "case" && k != "expected" && k != "expected_error") vars[k] = v;
  return vars;
}

TEST(ChatTemplateCases, FileHasCasesOfBothKinds) {
  std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 32u);
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const Case& c) { return c.data.contains("expected_error"); }));
}

class ChatTemplateCase : public ::testing::TestWithParam<Case> {};

TEST_P(ChatTemplateCase, TemplateRendersExactly) {
  const ordered_json& c = GetParam().data;
  jinja::Template t = jinja::Template::parse(read_template(c["template"]));
  if (c.contains("expected")) {
    EXPECT_EQ(t.render(variables_of(c), fixed_now()), c["expected"].get<std::string>());
  } else {
    try {
      t.render(variables_of(c), fixed_now());
      ADD_FAILURE() << "expected raise_exception(" << c["expected_error"] << ")";
    } catch (const jinja::RaiseException& e) {
      EXPECT_EQ(std::string(e.what()), c["expected_error"].get<std::string>());
      EXPECT_EQ(e.message(), c["expected_error"].get<std::string>());
    }
  }
}

TEST_P(ChatTemplateCase, ChatTemplateAppliesExactly) {
  const ordered_json& c = GetParam().data;
  ChatTemplate chat(read_template(c["template"]), c.value("bos_token", ""), c.value("eos_token", ""));
  ordered_json extra = variables_of(c);
  for (const char* k : {"messages", "add_generation_prompt", "bos_token", "eos_token"}) extra.erase(k);
  auto apply = [&] { return chat.apply(c["messages"], c.value("add_generation_prompt", false), extra, fixed_now()); };
  if (c.contains("expected")) {
    EXPECT_EQ(apply(), c["expected"].get<std::string>());
  } else {
    EXPECT_THROW(
        {
          try {
            apply();
          } catch (const jinja::RaiseException& e) {
            EXPECT_EQ(std::string(e.what()), c["expected_error"].get<std::string>());
            throw;
          }
        },
        jinja::RaiseException);
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, ChatTemplateCase, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return test_name(info.param.name) + "_" + std::to_string(info.index);
                         });

// ---- every real template renders a plain conversation ----

class RealTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTemplate, RendersABasicConversation) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": "What is a KV cache?"},
    {"role": "assistant", "content": "A cache of attention keys and values."},
    {"role": "user", "content": "Why page it?"}])");
  ordered_json extra = ordered_json::object();
  // The firefunction template concatenates these unconditionally (its model card passes them);
  // Python Jinja2 fails without them exactly as we do (reference_renders.json,
  // firefunction_without_functions).
  if (GetParam().find("firefunction") != std::string::npos) {
    extra["functions"] = "[]";
    extra["datetime"] = "2026-11-29";
  }
  ChatTemplate chat(read_template(GetParam()), "<s>", "</s>");
  for (bool gen : {true, false}) {
    std::string out = chat.apply(messages, gen, extra, fixed_now());
    EXPECT_NE(out.find("What is a KV cache?"), std::string::npos) << out;
    EXPECT_NE(out.find("Why page it?"), std::string::npos) << out;
    EXPECT_NE(out.find("A cache of attention keys and values."), std::string::npos) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, RealTemplate, ::testing::ValuesIn(template_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return test_name(info.param); });

TEST(RealTemplates, AllTwelveArePresent) { EXPECT_GE(template_files().size(), 12u); }

// ---- real templates with tools, against Python Jinja2 ----

// The cases of tests/chat/data/reference_renders.json: a template of ../shared/chat-templates,
// special tokens, messages, extra variables, and Python Jinja2's output or error (written by
// scripts/reference/jinja_cases.py, which runs Jinja2 3.1 as Hugging Face's apply_chat_template
// does). Empty when the file cannot be read (TableIsComplete then fails with the reason).
std::vector<Case> load_reference_renders(std::string* error = nullptr) {
  std::vector<Case> cases;
  try {
    const auto doc = ordered_json::parse(test::read_file(STRATA_SOURCE_DIR "/tests/chat/data/reference_renders.json"));
    for (const auto& c : doc.at("cases")) cases.push_back({c.at("name").get<std::string>(), c});
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    cases.clear();
  }
  return cases;
}

class ReferenceRender : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceRender, AppliesLikeJinja2) {
  const ordered_json& c = GetParam().data;
  ChatTemplate chat(read_template(c.at("template_file")), c.at("bos_token"), c.at("eos_token"));
  auto apply = [&] { return chat.apply(c.at("messages"), c.at("add_generation_prompt").get<bool>(), c.at("extra")); };
  if (c.contains("expected")) {
    EXPECT_EQ(apply(), c["expected"].get<std::string>());
  } else {
    try {
      apply();
      ADD_FAILURE() << "expected an error";
    } catch (const jinja::TemplateRuntimeError& e) {
      EXPECT_EQ(e.message(), c.at("expected_error").get<std::string>());
      EXPECT_EQ(e.line(), c.at("error_line").get<uint32_t>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja2Reference, ReferenceRender, ::testing::ValuesIn(load_reference_renders()),
                         [](const ::testing::TestParamInfo<Case>& info) { return test_name(info.param.name); });

TEST(ReferenceRender, TableIsComplete) {
  std::string error;
  EXPECT_GE(load_reference_renders(&error).size(), 3u) << error;
}

// ---- ChatTemplate API ----

TEST(ChatTemplate, ChatMlDefault) {
  ChatTemplate chat(ChatTemplate::chatml(), "", "");
  const ordered_json messages = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                        {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(chat.apply(messages, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.apply(messages, false), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, ExtraVariablesAndTokens) {
  ChatTemplate chat("{{ bos_token }}{{ greeting }}{% if add_generation_prompt %}!{% endif %}{{ messages|length }}{{ eos_token }}",
                    "<s>", "</s>");
  EXPECT_EQ(chat.apply(ordered_json::array(), true, {{"greeting", "hey"}}), "<s>hey!0</s>");
  // Extra variables may override the tokens but not the explicit arguments.
  EXPECT_EQ(chat.apply(ordered_json::array({1, 2}), false,
                       {{"bos_token", "B"}, {"messages", ordered_json::array()}, {"add_generation_prompt", true}}),
            "B2</s>");
}

TEST(ChatTemplate, SyntaxErrorAtConstruction) {
  EXPECT_THROW(ChatTemplate("{% for m in messages %}", "", ""), jinja::TemplateSyntaxError);
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedDate) {
  ChatTemplate chat(read_template("meta-llama-Llama-3.2-3B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>");
  std::string out = chat.apply(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), true, {}, fixed_now());
  EXPECT_NE(out.find("Today Date: 29 Nov 2026\n"), std::string::npos) << out;
}

TEST(ChatTemplate, ApplyIsSafeFromManyThreads) {
  ChatTemplate chat(read_template("Qwen-Qwen2.5-7B-Instruct.jinja"), "", "");
  const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  const std::string want = chat.apply(messages, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (chat.apply(messages, true) != want) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- loading from GGUF ----

std::string write_gguf(const std::string& dir, bool with_template, uint32_t bos, uint32_t eos) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"<unk>", "<bos>", "<eos>", "hello"}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(bos));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(eos));
  if (with_template)
    w.set("tokenizer.chat_template",
          GgufValue::str("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"));
  std::string path = dir + (with_template ? "/with.gguf" : "/without.gguf");
  w.write_file(path);
  return path;
}

TEST(ChatTemplateGguf, LoadsTemplateAndSpecialTokens) {
  const std::string dir = test::make_temp_dir("strata-chat");
  auto f = GgufFile::open(write_gguf(dir, true, 1, 2));
  ChatTemplate chat = ChatTemplate::from_gguf(*f);
  EXPECT_EQ(chat.bos_token(), "<bos>");
  EXPECT_EQ(chat.eos_token(), "<eos>");
  EXPECT_EQ(chat.apply(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), true), "<bos><user>hi<eos>");

  auto g = GgufFile::open(write_gguf(dir, false, 1, 2));
  ChatTemplate fallback = ChatTemplate::from_gguf(*g);
  EXPECT_EQ(fallback.source(), ChatTemplate::chatml());

  auto bad = GgufFile::open(write_gguf(dir, true, 1, 99));
  EXPECT_THROW(ChatTemplate::from_gguf(*bad), Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateGguf, SharedModelWithoutTemplateUsesChatMl) {
  auto f = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  ChatTemplate chat = ChatTemplate::from_gguf(*f);
  EXPECT_EQ(chat.bos_token(), "<s>");
  EXPECT_EQ(chat.eos_token(), "</s>");
  EXPECT_EQ(chat.apply(ordered_json::parse(R"([{"role": "user", "content": "Once"}])"), true),
            "<|im_start|>user\nOnce<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace strata
