// Black-box tests of `strata tokenize` and `strata detokenize`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_writer.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kSpm = shared_path("tokenizer/ggml-vocab-llama-spm.gguf");
const std::string kStories = shared_path("models/stories260K.gguf");

TEST(TokenizeCli, PrintsIdsOnOneLine) {
  auto r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15043 3186\n");
  r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", " this is \xF0\x9F\xA6\x99.cpp"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "29871 445 338 29871 243 162 169 156 29889 8223\n");
  r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", ""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
}

TEST(TokenizeCli, AddSpecialOnStories260K) {
  auto r = run_command({strata_bin(), "tokenize", "--model", kStories, "--text", "Once upon a time", "--add-special"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 403 407 261 378\n");
  r = run_command({strata_bin(), "tokenize", "--model", kStories, "--text", "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "403 407 261 378\n");
}

TEST(TokenizeCli, ParseSpecial) {
  auto r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", "<s>Hello", "--parse-special"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 15043\n");
  r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", "<s>Hello"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("1 ", 0), std::string::npos) << r.out;
}

TEST(TokenizeCli, FileIsTokenizedByteForByte) {
  const std::string dir = test::make_temp_dir("strata-tokenize");
  test::write_file(dir + "/in.txt", "Hello world\n");
  auto r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--file", dir + "/in.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15043 3186 13\n") << "the final newline is part of the text";
  r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--file", dir + "/missing.txt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(TokenizeCli, JsonHasTokensAndPieces) {
  auto r = run_command({strata_bin(), "tokenize", "--model", kStories, "--text", "Once upon", "--add-special", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], nlohmann::json::parse("[1, 403, 407]"));
  EXPECT_EQ(j["pieces"], nlohmann::json::parse(R"(["<s>", " Once", " upon"])"));
  EXPECT_EQ(j["n_tokens"], 3);
}

TEST(TokenizeCli, Detokenize) {
  auto r = run_command({strata_bin(), "detokenize", "--model", kStories, "--ids", "1 403 407 261 378"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time\n");
  r = run_command({strata_bin(), "detokenize", "--model", kStories, "--ids", "1 403 407 261 378", "--render-special"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s> Once upon a time\n");
  r = run_command({strata_bin(), "detokenize", "--model", kSpm, "--ids", "29871 445 338 29871 243 162 169 156 29889 8223"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, " this is \xF0\x9F\xA6\x99.cpp\n");
}

TEST(TokenizeCli, BadInputExitsTwoWithAMessage) {
  auto r = run_command({strata_bin(), "detokenize", "--model", kStories, "--ids", "1 512 3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("512"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "detokenize", "--model", kStories, "--ids", "1 x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'x'"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "detokenize", "--model", kStories});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--ids"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "tokenize", "--text", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "tokenize", "--model", kSpm});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--text or --file"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "tokenize", "--model", kSpm, "--text", "a", "--file", kSpm});
  EXPECT_EQ(r.exit_code, 2);
  r = run_command({strata_bin(), "tokenize", "--model", "/nonexistent.gguf", "--text", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;

  const std::string dir = test::make_temp_dir("strata-tokenize");
  test::write_file(dir + "/text.gguf", "hello, this is not a model\n");
  r = run_command({strata_bin(), "tokenize", "--model", dir + "/text.gguf", "--text", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("text.gguf"), std::string::npos) << r.err;
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.write_file(dir + "/no_vocab.gguf");
  r = run_command({strata_bin(), "tokenize", "--model", dir + "/no_vocab.gguf", "--text", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

// The help block of an option: its line and the continuation lines below it, up to the next option.
std::string help_block(const std::string& help, const std::string& flag) {
  size_t at = help.find("  " + flag + " ");
  if (at == std::string::npos) at = help.find("," + flag + " ");
  if (at == std::string::npos) return {};
  const size_t next = help.find("\n  -", at);
  return help.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(TokenizeCli, EveryFlagHasHelp) {
  for (const auto& [command, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"tokenize", {"--model", "--text", "--file", "--add-special", "--parse-special", "--json"}},
           {"detokenize", {"--model", "--ids", "--render-special"}}}) {
    auto r = run_command({strata_bin(), command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const std::string& flag : flags) {
      const std::string block = help_block(r.out, flag);
      ASSERT_FALSE(block.empty()) << command << " " << flag << ":\n" << r.out;
      // After the option's own spelling (name, type, REQUIRED/Excludes notes), which CLI11 ends with
      // a run of spaces or a line break, comes the description.
      size_t gap = block.find("  ", 2);
      const size_t eol = block.find('\n');
      if (eol != std::string::npos && (gap == std::string::npos || eol < gap)) gap = eol;
      ASSERT_NE(gap, std::string::npos) << block;
      const size_t start = block.find_first_not_of(" \n", gap);
      const std::string description = start == std::string::npos ? std::string() : block.substr(start);
      EXPECT_GE(std::count(description.begin(), description.end(), ' '), 3) << command << " " << flag << ": " << block;
    }
  }
}

}  // namespace
}  // namespace strata
