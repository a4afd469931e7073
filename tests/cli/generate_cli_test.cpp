// Black-box tests of `strata generate`: a single prompt (streamed text, --json), a JSONL file of
// prompts run concurrently (--prompts-file), against the shared llama.cpp greedy references of
// stories260K; the JSON fields scripts read; exit codes and messages on bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::Json;
using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kModel = shared_path("models/stories260K.gguf");

// `extra` may name its own --model.
std::vector<std::string> generate_argv(std::vector<std::string> extra) {
  std::vector<std::string> argv = {strata_bin(), "generate", "-t", "1"};
  if (std::find(extra.begin(), extra.end(), "--model") == extra.end()) argv.insert(argv.end(), {"--model", kModel});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<Json> json_lines(const std::string& out) {
  std::vector<Json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(Json::parse(line));
  }
  return lines;
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("strata-generate"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    test::write_file(path, text);
    return path;
  }
  std::string dir_;
};

TEST_F(GenerateCli, PromptsFileReproducesTheGreedyReferencesInInputOrder) {
  const auto refs = test::greedy_references();
  ASSERT_EQ(refs.size(), 3u);
  // The first line carries its own sampling fields; the others take the command line's.
  std::string file;
  for (size_t i = 0; i < refs.size(); ++i) {
    Json line = {{"prompt", refs[i].prompt}};
    if (i == 0) line.update({{"temperature", 0}, {"max_tokens", refs[i].tokens.size()}, {"tenant", "a"}, {"priority", 3}});
    file += line.dump() + "\n";
    if (i == 0) file += "\n";  // blank lines are skipped
  }
  const std::string path = write("prompts.jsonl", file);
  // Line 1's own temperature 0 and max_tokens win over the command line's.
  auto r = run_command(generate_argv({"--prompts-file", path, "--temperature", "0.9", "-n", "3", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), refs.size()) << r.out;
  EXPECT_EQ(lines[0]["tokens"].get<std::vector<int>>(), refs[0].tokens);
  EXPECT_EQ(lines[1]["tokens"].size(), 3u);
  EXPECT_EQ(lines[2]["tokens"].size(), 3u);

  r = run_command(generate_argv({"--prompts-file", path, "--temperature", "0", "-n", "64", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), refs.size()) << r.out;
  for (size_t i = 0; i < refs.size(); ++i) {
    SCOPED_TRACE(refs[i].prompt);
    const Json& j = lines[i];
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["prompt_tokens"].get<std::vector<int>>(), refs[i].prompt_tokens);
    EXPECT_EQ(j["tokens"].get<std::vector<int>>(), refs[i].tokens);
    EXPECT_EQ(j["text"], refs[i].content);
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_TRUE(j["cached_tokens"].is_number_integer());
    EXPECT_GE(j["cached_tokens"].get<int>(), 0);
    EXPECT_LT(j["cached_tokens"].get<size_t>(), refs[i].prompt_tokens.size());
    EXPECT_EQ(j["preemptions"], 0);
    const Json& t = j["timings"];
    for (const char* k : {"prompt_ms", "gen_ms", "prompt_tok_s", "gen_tok_s"}) {
      ASSERT_TRUE(t.contains(k)) << k;
      EXPECT_TRUE(t[k].is_number()) << k;
      EXPECT_GE(t[k].get<double>(), 0) << k;
    }
  }
  EXPECT_NE(r.err.find("3 prompts: " + std::to_string(refs[0].prompt_tokens.size() + refs[1].prompt_tokens.size() +
                                                        refs[2].prompt_tokens.size()) +
                       " prompt + 192 generated tokens"),
            std::string::npos)
      << r.err;
}

TEST_F(GenerateCli, PromptsFileLinesTakeTheirOwnLimitsAndStops) {
  const auto refs = test::greedy_references();
  const auto& ref = refs[0];  // ", there was a little girl named Lily. She ..."
  const size_t dot = ref.content.find('.');
  ASSERT_NE(dot, std::string::npos);
  std::string file = Json{{"prompt", ref.prompt}, {"max_tokens", 5}}.dump() + "\n" +
                     Json{{"prompt", ref.prompt}, {"stop", "."}}.dump() + "\n" +
                     Json{{"prompt", ref.prompt}, {"stop", {"zzz", "Lily"}}, {"max_tokens", 64}}.dump() + "\n";
  auto r = run_command(generate_argv({"--prompts-file", write("p.jsonl", file), "--temperature", "0", "-n", "64", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  // max_tokens 5: the first 5 reference tokens.
  EXPECT_EQ(lines[0]["tokens"].get<std::vector<int>>(), std::vector<int>(ref.tokens.begin(), ref.tokens.begin() + 5));
  EXPECT_EQ(lines[0]["finish_reason"], "length");
  EXPECT_TRUE(ref.content.starts_with(lines[0]["text"].get<std::string>()));
  // A stop string ends the text before the match.
  EXPECT_EQ(lines[1]["text"], ref.content.substr(0, dot));
  EXPECT_EQ(lines[1]["finish_reason"], "stop");
  EXPECT_EQ(lines[2]["text"], ref.content.substr(0, ref.content.find("Lily")));
  EXPECT_EQ(lines[2]["finish_reason"], "stop");

  // Without --json: one block of text per prompt, in order.
  r = run_command(generate_argv({"--prompts-file", write("q.jsonl", file), "--temperature", "0", "-n", "64"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected = "--- prompt 1 ---\n" + lines[0]["text"].get<std::string>() + "\n--- prompt 2 ---\n" +
                               ref.content.substr(0, dot) + "\n--- prompt 3 ---\n" +
                               lines[2]["text"].get<std::string>() + "\n";
  EXPECT_EQ(r.out, expected);
}

TEST_F(GenerateCli, SinglePromptStreamsTheReferenceText) {
  for (const auto& ref : test::greedy_references()) {
    SCOPED_TRACE(ref.prompt);
    auto r = run_command(generate_argv({"-p", ref.prompt, "--temperature", "0", "-n", std::to_string(ref.tokens.size())}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, ref.content + "\n");
    EXPECT_NE(r.err.find("prompt: " + std::to_string(ref.prompt_tokens.size()) + " tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("generated: " + std::to_string(ref.tokens.size()) + " tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("finish: length"), std::string::npos) << r.err;
  }
  const auto ref = test::greedy_references()[2];
  auto r = run_command(generate_argv({"-p", ref.prompt, "--temperature", "0", "-n", "64", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["prompt_tokens"].get<std::vector<int>>(), ref.prompt_tokens);
  EXPECT_EQ(lines[0]["tokens"].get<std::vector<int>>(), ref.tokens);
  EXPECT_EQ(lines[0]["text"], ref.content);
}

// --mmap-weights: the CPU backend multiplies from the file's mapping instead of its copy in huge
// pages; the same bytes, so the same reference tokens (and the default run above took the copy).
TEST_F(GenerateCli, MmapWeightsGivesTheReferenceTokens) {
  const auto ref = test::greedy_references()[1];
  auto r = run_command(generate_argv({"-p", ref.prompt, "--temperature", "0", "-n", std::to_string(ref.tokens.size()),
                                      "--json", "--mmap-weights", "--device", "cpu"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["tokens"].get<std::vector<int>>(), ref.tokens);
}

TEST_F(GenerateCli, SeededSamplingIsReproducibleAndDiffersFromGreedy) {
  auto run = [&](const std::string& seed) {
    auto r = run_command(generate_argv({"-p", "Once upon a time", "--temperature", "1", "--top-k", "0", "--top-p", "1",
                                        "--min-p", "0", "-n", "32", "--ignore-eos", "--seed", seed, "--json"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto lines = json_lines(r.out);
    return lines.empty() ? Json() : lines[0];
  };
  const Json a = run("7"), b = run("7"), c = run("8");
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["tokens"].size(), 32u);
  EXPECT_NE(a["tokens"], c["tokens"]);
  EXPECT_NE(a["tokens"].get<std::vector<int>>(), test::greedy_references()[0].tokens);
}

struct BadInput {
  std::string name;
  std::string file;                 // contents of the prompts file ("" = use `args` only)
  std::vector<std::string> args;    // extra arguments
  std::string message;              // expected in stderr; "PATH" is replaced by the file's path
};

TEST_F(GenerateCli, BadInputExitsTwoWithAMessage) {
  const std::vector<BadInput> cases = {
      {"both prompt and file", "{\"prompt\": \"a\"}\n", {"-p", "x"}, "give exactly one of --prompt and --prompts-file"},
      {"neither prompt nor file", "", {}, "give exactly one of --prompt and --prompts-file"},
      {"missing file", "", {"--prompts-file", "/nonexistent/prompts.jsonl"}, "cannot read '/nonexistent/prompts.jsonl'"},
      {"empty file", "\n\n", {}, "holds no prompts"},
      {"invalid JSON", "{\"prompt\": \"a\"}\n{\"prompt\": \n", {}, "PATH:2: invalid JSON"},
      {"not an object", "[1, 2]\n", {}, "PATH:1: not a JSON object"},
      {"no prompt", "{\"max_tokens\": 3}\n", {}, "PATH:1: needs a string field 'prompt'"},
      {"prompt not a string", "{\"prompt\": 5}\n", {}, "PATH:1: needs a string field 'prompt'"},
      {"unknown field", "{\"prompt\": \"a\"}\n{\"prompt\": \"a\", \"maxtokens\": 3}\n", {}, "PATH:2: unknown field 'maxtokens'"},
      {"wrong type", "{\"prompt\": \"a\", \"max_tokens\": \"many\"}\n", {}, "PATH:1: field 'max_tokens' has the wrong type"},
      {"invalid sampling", "{\"prompt\": \"a\", \"temperature\": -1}\n", {}, "PATH:1: "},
      {"negative max tokens flag", "", {"-p", "x", "-n", "-3"}, "--max-tokens must be >= 1, got -3"},
      {"zero max tokens flag", "", {"-p", "x", "-n", "0"}, "--max-tokens must be >= 1, got 0"},
      {"zero max tokens line", "{\"prompt\": \"a\", \"max_tokens\": 0}\n", {}, "PATH:1: max_tokens must be >= 1, got 0"},
      {"negative temperature flag", "", {"-p", "x", "--temperature", "-1"}, "invalid sampling flag"},
      {"missing model", "", {"-p", "x", "--model", "/nonexistent.gguf"}, "cannot open '/nonexistent.gguf'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> argv = generate_argv(c.args);
    std::string path;
    if (!c.file.empty()) {
      path = write("bad.jsonl", c.file);
      argv.push_back("--prompts-file");
      argv.push_back(path);
    }
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    std::string message = c.message;
    if (const size_t p = message.find("PATH"); p != std::string::npos) message.replace(p, 4, path);
    EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << "expected '" << message << "' in: " << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(GenerateCli, APromptAsLongAsTheContextIsRefused) {
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "Once upon a time ";
  auto r = run_command(generate_argv({"-p", long_prompt, "-n", "4", "--ctx", "64"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("strata: error: the prompt has "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("but the context is 64 tokens"), std::string::npos) << r.err;
  // The same prompt file line by line: the line's prompt is refused the same way.
  test::write_file(dir_ + "/long.jsonl", Json{{"prompt", long_prompt}}.dump() + "\n");
  r = run_command(generate_argv({"--prompts-file", dir_ + "/long.jsonl", "-n", "4", "--ctx", "64"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("but the context is 64 tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
