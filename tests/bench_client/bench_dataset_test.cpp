// Benchmark prompts: the asked lengths (in words, or exactly in tokens with a real tokenizer), a
// prefix that really is shared, multi-turn splitting, determinism by seed, and JSONL files.
#include "bench_client/bench_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace strata::bench {
namespace {

DatasetOptions options(DatasetKind kind, int32_t n, int32_t in, int32_t out) {
  DatasetOptions o;
  o.kind = kind;
  o.num_prompts = n;
  o.input_len = in;
  o.output_len = out;
  o.seed = 42;
  return o;
}

std::vector<std::string> prompts(const Dataset& d) {
  std::vector<std::string> v;
  for (const auto& c : d.conversations)
    for (const auto& t : c.turns) v.push_back(t.prompt);
  return v;
}

TEST(BenchDataset, CountWordsSplitsOnAnyWhitespace) {
  EXPECT_EQ(count_words(""), 0);
  EXPECT_EQ(count_words("  \n\t "), 0);
  EXPECT_EQ(count_words("one"), 1);
  EXPECT_EQ(count_words(" one  two\nthree\t"), 3);
}

TEST(BenchDataset, RandomPromptsHaveTheWordLengthAndMaxTokens) {
  const Dataset d = make_dataset(options(DatasetKind::kRandom, 20, 37, 11));
  ASSERT_EQ(d.conversations.size(), 20u);
  EXPECT_EQ(d.num_requests(), 20u);
  std::set<std::string> distinct;
  for (const auto& c : d.conversations) {
    ASSERT_EQ(c.turns.size(), 1u);
    EXPECT_EQ(count_words(c.turns[0].prompt), 37);
    EXPECT_EQ(c.turns[0].prompt_len, 37);
    EXPECT_EQ(c.turns[0].max_tokens, 11);
    EXPECT_TRUE(c.turns[0].messages.empty());
    distinct.insert(c.turns[0].prompt);
  }
  EXPECT_EQ(distinct.size(), 20u);
}

TEST(BenchDataset, SameSeedSamePromptsOtherSeedOthers) {
  auto o = options(DatasetKind::kSharedPrefix, 8, 30, 4);
  o.shared_prefix_len = 10;
  const auto a = prompts(make_dataset(o));
  EXPECT_EQ(a, prompts(make_dataset(o)));
  o.seed = 43;
  EXPECT_NE(a, prompts(make_dataset(o)));
}

TEST(BenchDataset, SharedPrefixIsSharedAndTheRestDiffers) {
  auto o = options(DatasetKind::kSharedPrefix, 16, 50, 8);
  o.shared_prefix_len = 32;
  const std::string prefix = shared_prefix_text(o);
  EXPECT_EQ(count_words(prefix), 32);
  const Dataset d = make_dataset(o);
  std::set<std::string> suffixes;
  for (const auto& p : prompts(d)) {
    ASSERT_EQ(p.compare(0, prefix.size() + 1, prefix + " "), 0) << p;
    EXPECT_EQ(count_words(p), 50);
    suffixes.insert(p.substr(prefix.size()));
  }
  EXPECT_EQ(suffixes.size(), 16u);
}

TEST(BenchDataset, PrefixAsLongAsThePromptMakesIdenticalPrompts) {
  auto o = options(DatasetKind::kSharedPrefix, 3, 12, 8);
  o.shared_prefix_len = 12;
  const auto p = prompts(make_dataset(o));
  EXPECT_EQ(p[0], p[1]);
  EXPECT_EQ(p[1], p[2]);
}

TEST(BenchDataset, MultiTurnSplitsRequestsIntoConversations) {
  auto o = options(DatasetKind::kMultiTurn, 8, 20, 5);
  o.turns = 3;
  const Dataset d = make_dataset(o);
  ASSERT_EQ(d.conversations.size(), 3u);
  EXPECT_EQ(d.conversations[0].turns.size(), 3u);
  EXPECT_EQ(d.conversations[1].turns.size(), 3u);
  EXPECT_EQ(d.conversations[2].turns.size(), 2u);
  EXPECT_EQ(d.num_requests(), 8u);
  for (const auto& c : d.conversations)
    for (const auto& t : c.turns) EXPECT_EQ(count_words(t.prompt), 20);
}

TEST(BenchDataset, InvalidOptionsAreRejectedWithTheFlagName) {
  auto o = options(DatasetKind::kSharedPrefix, 4, 10, 4);
  o.shared_prefix_len = 11;
  try {
    make_dataset(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shared-prefix-len"), std::string::npos) << e.what();
  }
  o.shared_prefix_len = 0;
  EXPECT_THROW(make_dataset(o), Error);
  EXPECT_THROW(make_dataset(options(DatasetKind::kRandom, 0, 10, 4)), Error);
  EXPECT_THROW(make_dataset(options(DatasetKind::kRandom, 4, 0, 4)), Error);
  EXPECT_THROW(make_dataset(options(DatasetKind::kRandom, 4, 10, 0)), Error);
}

TEST(BenchDataset, ParsesDatasetNames) {
  EXPECT_EQ(parse_dataset_kind("random"), DatasetKind::kRandom);
  EXPECT_EQ(parse_dataset_kind("shared-prefix"), DatasetKind::kSharedPrefix);
  EXPECT_EQ(parse_dataset_kind("multi-turn"), DatasetKind::kMultiTurn);
  EXPECT_EQ(parse_dataset_kind("prompts.jsonl"), DatasetKind::kFile);
}

// With a real tokenizer the lengths are exact token counts, and the shared prefix is a shared
// prefix of token ids too (what a prefix cache keys on), not only of bytes.
class BenchDatasetTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = Tokenizer::from_gguf(*GgufFile::open(test::shared_path("models/stories260K.gguf")));
  }
  TokenCounter counter() const {
    return [t = tok_.get()](std::string_view s) { return static_cast<int32_t>(t->encode(s, false, false).size()); };
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(BenchDatasetTokens, RandomPromptsHaveExactTokenLengths) {
  auto o = options(DatasetKind::kRandom, 12, 0, 8);
  o.counter = counter();
  for (int32_t len : {1, 2, 7, 64, 300}) {
    o.input_len = len;
    for (const auto& c : make_dataset(o).conversations) {
      EXPECT_EQ(tok_->encode(c.turns[0].prompt, false, false).size(), static_cast<size_t>(len)) << c.turns[0].prompt;
      EXPECT_EQ(c.turns[0].prompt_len, len);
    }
  }
}

TEST_F(BenchDatasetTokens, SharedPrefixTokensAreIdentical) {
  auto o = options(DatasetKind::kSharedPrefix, 10, 96, 8);
  o.shared_prefix_len = 64;
  o.counter = counter();
  const auto prefix_ids = tok_->encode(shared_prefix_text(o), false, false);
  ASSERT_EQ(prefix_ids.size(), 64u);
  for (const auto& p : prompts(make_dataset(o))) {
    const auto ids = tok_->encode(p, false, false);
    ASSERT_EQ(ids.size(), 96u) << p;
    EXPECT_TRUE(std::equal(prefix_ids.begin(), prefix_ids.end(), ids.begin())) << p;
  }
}

class BenchDatasetFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("strata-bench-dataset"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text) {
    const std::string path = dir_ + "/d.jsonl";
    test::write_file(path, text);
    return path;
  }
  std::string error_of(const std::string& text) {
    auto o = options(DatasetKind::kFile, 100, 10, 7);
    o.path = write(text);
    try {
      make_dataset(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(BenchDatasetFile, ReadsPromptsMessagesAndMaxTokens) {
  auto o = options(DatasetKind::kFile, 100, 10, 7);
  o.path = write(
      "{\"prompt\": \"Once upon a time\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi there\"}],"
      " \"max_tokens\": 3}\n"
      "{\"prompt\": \"x\", \"max_tokens\": 1}\n");
  const Dataset d = make_dataset(o);
  ASSERT_EQ(d.conversations.size(), 3u);
  EXPECT_EQ(d.conversations[0].turns[0].prompt, "Once upon a time");
  EXPECT_EQ(d.conversations[0].turns[0].max_tokens, 7);
  EXPECT_EQ(d.conversations[0].turns[0].prompt_len, 4);
  const Turn& chat = d.conversations[1].turns[0];
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[0].role, "system");
  EXPECT_EQ(chat.messages[1].content, "Hi there");
  EXPECT_EQ(chat.max_tokens, 3);
  EXPECT_EQ(chat.prompt_len, 4);
  EXPECT_EQ(d.conversations[2].turns[0].max_tokens, 1);

  o.num_prompts = 2;
  EXPECT_EQ(make_dataset(o).conversations.size(), 2u) << "--num-prompts caps the file";
}

TEST_F(BenchDatasetFile, ErrorsNameTheLine) {
  EXPECT_NE(error_of("{\"prompt\": \"a\"}\n{not json\n").find(":2: invalid JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"text\": \"a\"}\n").find(":1: needs a string \"prompt\""), std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"a\", \"max_tokens\": 0}\n").find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [{\"role\": \"user\"}]}\n").find("\"content\""), std::string::npos);
  EXPECT_NE(error_of("\n\n").find("holds no requests"), std::string::npos);
  auto o = options(DatasetKind::kFile, 1, 10, 7);
  o.path = dir_ + "/missing.jsonl";
  EXPECT_THROW(make_dataset(o), Error);
}

}  // namespace
}  // namespace strata::bench
