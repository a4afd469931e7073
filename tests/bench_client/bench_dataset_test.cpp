// Benchmark prompts: the asked lengths (in words, or exactly in tokens with a real tokenizer), a
// prefix that really is shared, multi-turn splitting, determinism by seed, and JSONL files.
#include "bench_client/bench_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(BenchDataset, RangeRatioSpreadsPromptAndOutputLengthsWithinTheRange) {
  auto o = options(DatasetKind::kRandom, 200, 40, 20);
  o.range_ratio = 0.5;  // prompts 20..60 words, max_tokens 10..30
  const Dataset d = make_dataset(o);
  std::set<int32_t> in_lens, out_lens;
  for (const auto& c : d.conversations) {
    const Turn& t = c.turns.at(0);
    EXPECT_EQ(count_words(t.prompt), t.prompt_len);
    EXPECT_GE(t.prompt_len, 20);
    EXPECT_LE(t.prompt_len, 60);
    EXPECT_GE(t.max_tokens, 10);
    EXPECT_LE(t.max_tokens, 30);
    in_lens.insert(t.prompt_len);
    out_lens.insert(t.max_tokens);
  }
  // 200 uniform draws over 41 and 21 values: nearly all of them appear, ends included.
  EXPECT_GT(in_lens.size(), 30u);
  EXPECT_GT(out_lens.size(), 15u);
  EXPECT_EQ(prompts(make_dataset(o)), prompts(d)) << "the same seed gives the same lengths";
  // Ratio 0 is the exact length, and a ratio draws from its own generator: no other prompt changes.
  o.range_ratio = 0;
  for (const auto& c : make_dataset(o).conversations) EXPECT_EQ(c.turns[0].prompt_len, 40);
}

TEST(BenchDataset, RangeRatioKeepsSharedPrefixPromptsAtLeastThePrefix) {
  auto o = options(DatasetKind::kSharedPrefix, 50, 12, 4);
  o.shared_prefix_len = 10;
  o.range_ratio = 0.9;  // 1..23 asked, but never below the prefix
  const std::string prefix = shared_prefix_text(o);
  for (const auto& c : make_dataset(o).conversations) {
    EXPECT_GE(c.turns[0].prompt_len, 10);
    EXPECT_EQ(c.turns[0].prompt.rfind(prefix, 0), 0u);
  }
}

TEST(BenchDataset, RangeRatioOutsideZeroToOneNamesTheFlag) {
  for (double r : {-0.1, 1.0, 2.0}) {
    auto o = options(DatasetKind::kRandom, 4, 10, 4);
    o.range_ratio = r;
    try {
      make_dataset(o);
      FAIL() << "expected an error for " << r;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--random-range-ratio"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchDataset, QosMixParsesNamesAndWeights) {
  const auto mix = parse_qos_mix("interactive=0.3,batch=0.7");
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].name, "interactive");
  EXPECT_DOUBLE_EQ(mix[0].weight, 0.3);
  EXPECT_EQ(mix[1].name, "batch");
  EXPECT_DOUBLE_EQ(mix[1].weight, 0.7);
  EXPECT_EQ(parse_qos_mix("batch=2").size(), 1u);
  for (const char* bad : {"", "interactive", "=1", "a=0", "a=-1", "a=x", "a=1,", "a=1,a=2", "a b=1", "a=inf", "a=1;b=2"}) {
    try {
      parse_qos_mix(bad);
      FAIL() << "expected an error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--qos-mix"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchDataset, AssignQosGivesEachClassItsShareShuffledBySeed) {
  Dataset d = make_dataset(options(DatasetKind::kRandom, 10, 5, 2));
  assign_qos(d, parse_qos_mix("interactive=0.3,batch=0.7"), 1);
  std::vector<std::string> a;
  for (const auto& c : d.conversations) a.push_back(c.qos);
  EXPECT_EQ(std::count(a.begin(), a.end(), "interactive"), 3);
  EXPECT_EQ(std::count(a.begin(), a.end(), "batch"), 7);
  Dataset e = d;
  assign_qos(e, parse_qos_mix("interactive=0.3,batch=0.7"), 1);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(e.conversations[i].qos, a[i]) << "same seed, same classes";
  // Another seed places them elsewhere (for some seed among a few: 10 choose 3 = 120 placements).
  bool moved = false;
  for (uint64_t seed = 2; seed < 6 && !moved; ++seed) {
    assign_qos(e, parse_qos_mix("interactive=0.3,batch=0.7"), seed);
    for (size_t i = 0; i < a.size(); ++i) moved |= e.conversations[i].qos != a[i];
  }
  EXPECT_TRUE(moved);
  // Largest remainders: 1/3 each of 10 gives 4, 3, 3 and the counts always sum to n.
  assign_qos(d, parse_qos_mix("a=1,b=1,c=1"), 3);
  std::vector<std::string> abc;
  for (const auto& c : d.conversations) abc.push_back(c.qos);
  EXPECT_EQ(std::count(abc.begin(), abc.end(), "a"), 4);
  EXPECT_EQ(std::count(abc.begin(), abc.end(), "b"), 3);
  EXPECT_EQ(std::count(abc.begin(), abc.end(), "c"), 3);
  assign_qos(d, {}, 3);
  for (const auto& c : d.conversations) EXPECT_EQ(c.qos, "");
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
