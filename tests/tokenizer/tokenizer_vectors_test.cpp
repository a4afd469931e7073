// llama.cpp's tokenizer test vectors: every ../shared/tokenizer/ggml-vocab-*.gguf that has .inp/.out
// files, each test string tokenized with add_special = false and parse_special = false must give
// exactly the ids of its .out line. The vocabularies are found by listing the directory, so new ones
// are tested as soon as they are added.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

// The .inp file holds the strings separated by "\n__ggml_vocab_test__\n" (the newline before the
// marker belongs to the separator, not to the string); the .out file has one line of ids per string.
// This is how llama.cpp's test-tokenizer-0 reads them.
std::vector<Case> read_cases(const std::string& vocab_path) {
  const std::string raw = test::read_file(vocab_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(test::read_file(vocab_path + ".out"));
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    Case c;
    c.text = i < inputs.size() ? inputs[i] : std::string();
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(inputs.size(), cases.size()) << vocab_path << ": .inp and .out disagree on the number of tests";
  return cases;
}

std::vector<std::string> vocabs_with_vectors() {
  std::vector<std::string> names;
  const std::filesystem::path dir = test::shared_path("tokenizer");
  if (!std::filesystem::is_directory(dir)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) != 0 || entry.path().extension() != ".gguf") continue;
    if (std::filesystem::exists(entry.path().string() + ".inp") && std::filesystem::exists(entry.path().string() + ".out")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ids_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

TEST(TokenizerVectors, SharedDirectoryHasVocabulariesWithVectors) {
  // Guards the parameterized suite below against silently testing nothing.
  EXPECT_GE(vocabs_with_vectors().size(), 10u);
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EveryStringTokenizesToTheReferenceIds) {
  const std::string path = test::shared_path("tokenizer/" + GetParam());
  const auto file = GgufFile::open(path);
  const auto tok = Tokenizer::from_gguf(*file);
  const std::vector<Case> cases = read_cases(path);
  ASSERT_FALSE(cases.empty());
  size_t passed = 0;
  for (const Case& c : cases) {
    const std::vector<TokenId> got = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids_string(got), ids_string(c.ids)) << GetParam() << ": \"" << printable(c.text) << "\"";
    if (got == c.ids) ++passed;
  }
  RecordProperty("passed", std::to_string(passed) + "/" + std::to_string(cases.size()));
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(std::string("ggml-vocab-").size());
  name = name.substr(0, name.size() - std::string(".gguf").size());
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabVectors, ::testing::ValuesIn(vocabs_with_vectors()), param_name);

}  // namespace
}  // namespace strata
