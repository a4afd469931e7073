// read_jsonl: blank lines skipped with the numbering kept, early stop, errors naming file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/jsonl.h"
#include "support/test_support.h"

namespace strata {
namespace {

class Jsonl : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("strata-jsonl"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& text) {
    const std::string path = dir_ + "/f.jsonl";
    test::write_file(path, text);
    return path;
  }
  std::string dir_;
};

TEST_F(Jsonl, VisitsNonBlankLinesWithTheirNumbers) {
  std::vector<std::pair<int, size_t>> seen;
  read_jsonl(file("{\"a\": 1}\n\n  \t\r\n{\"a\": 2}\r\n[3]"), [&](const nlohmann::json& j, size_t line) {
    seen.emplace_back(j.is_object() ? j["a"].get<int>() : j[0].get<int>(), line);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<std::pair<int, size_t>>{{1, 1}, {2, 4}, {3, 5}}));
}

TEST_F(Jsonl, StopsWhenTheCallbackSaysSo) {
  int calls = 0;
  // The broken third line is never read.
  read_jsonl(file("1\n2\n{broken\n"), [&](const nlohmann::json&, size_t) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
}

TEST_F(Jsonl, ErrorsNameTheFileAndLine) {
  const std::string path = file("{\"ok\": true}\n\n{\"a\": \n");
  try {
    read_jsonl(path, [](const nlohmann::json&, size_t) { return true; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3: invalid JSON"), std::string::npos) << e.what();
  }
  try {
    read_jsonl(dir_ + "/missing.jsonl", [](const nlohmann::json&, size_t) { return true; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read '" + dir_ + "/missing.jsonl'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
