// The regex pre-tokenizer: how a list of regexes splits text, with llama.cpp's semantics.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/pre_type.h"
#include "tokenizer/pretokenizer.h"

namespace strata {
namespace {

using Words = std::vector<std::string>;

Words split(const std::vector<std::string_view>& regexes, std::string_view text) {
  PreTokenizer p(regexes);
  std::vector<std::string_view> views;
  p.split(text, views);
  return Words(views.begin(), views.end());
}

Words split_type(std::string_view pre, std::string_view text) {
  const PreTokenizerType* t = find_pre_tokenizer_type(pre);
  EXPECT_NE(t, nullptr) << pre;
  return t == nullptr ? Words{} : split(t->regexes, text);
}

TEST(PreTokenizer, TextBetweenMatchesIsKept) {
  EXPECT_EQ(split({"[0-9]+"}, "ab12cd3"), (Words{"ab", "12", "cd", "3"}));
  EXPECT_EQ(split({"x"}, "abc"), (Words{"abc"}));
  EXPECT_EQ(split({"x"}, ""), Words{});
}

TEST(PreTokenizer, Gpt2Words) {
  EXPECT_EQ(split_type("gpt-2", "Hello world  it's 42!\n"),
            (Words{"Hello", " world", " ", " it", "'s", " 42", "!", "\n"}));
}

TEST(PreTokenizer, Llama3Words) {
  EXPECT_EQ(split_type("llama-bpe", "Hello world123456 \n\n  x I'M"),
            (Words{"Hello", " world", "123", "456", " \n\n", " ", " x", " I", "'M"}));
}

TEST(PreTokenizer, LaterRegexesSeeOnlyThePiecesOfEarlierOnes) {
  // The lookahead of \s+(?!\S) stops at the end of the piece "a  " that the first regex left, so
  // both spaces go together (on the whole text the second space would stay with "x").
  EXPECT_EQ(split({"x", R"(\s+(?!\S))"}, "a  xb"), (Words{"a", "  ", "x", "b"}));
}

TEST(PreTokenizer, DollarMatchesOnlyAtTheEnd) {
  // ECMAScript semantics, as llama.cpp's std::regex: no match before a final newline.
  EXPECT_EQ(split({"a$"}, "a\n"), (Words{"a\n"}));
  EXPECT_EQ(split({"a$"}, "ba"), (Words{"b", "a"}));
}

TEST(PreTokenizer, NonAsciiWhitespaceIsWhitespaceOnly) {
  const std::string ideographic_space = "\xE3\x80\x80";  // U+3000
  EXPECT_EQ(split({R"(\s+)"}, "a" + ideographic_space + "b"), (Words{"a", ideographic_space, "b"}));
  EXPECT_EQ(split({R"(\s)"}, "a\xC2\x85" "b"), (Words{"a", "\xC2\x85", "b"})) << "U+0085 is whitespace";
  // llama.cpp hides such characters from its regexes behind U+000B, so a class naming U+3000 never
  // matches it (deepseek-llm's punctuation regex relies on this).
  EXPECT_EQ(split({R"([\x{3000}-\x{3002}]+)"}, "a" + ideographic_space + "\xE3\x80\x82"),
            (Words{"a" + ideographic_space, "\xE3\x80\x82"}));
}

TEST(PreTokenizer, EmptyMatchesAreSplitPoints) {
  EXPECT_EQ(split_type("superbpe", "x1234567"), (Words{"x", "1", "234", "567"}));
}

TEST(PreTokenizer, LettersKeepTheirCombiningMarks) {
  // The gpt-4o pattern counts marks (\p{M}) as part of a word; Hindi words stay whole.
  EXPECT_EQ(split_type("gpt-4o", "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 hi"),
            (Words{"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", " hi"}));
  EXPECT_EQ(split_type("gpt-4o", "HelloWorld ABCdef"), (Words{"Hello", "World", " ABCdef"}));
}

TEST(PreTokenizer, BadRegexIsAnError) {
  try {
    PreTokenizer p(std::vector<std::string_view>{"(unclosed"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

TEST(PreTokenizer, TypeNames) {
  EXPECT_NE(find_pre_tokenizer_type(""), nullptr) << "absent key means default";
  EXPECT_EQ(find_pre_tokenizer_type("llama3"), find_pre_tokenizer_type("llama-bpe"));
  EXPECT_EQ(find_pre_tokenizer_type("nope"), nullptr);
  EXPECT_TRUE(is_unsupported_pre_tokenizer_type("kimi-k2"));
  EXPECT_TRUE(find_pre_tokenizer_type("llama3")->ignore_merges);
  EXPECT_FALSE(find_pre_tokenizer_type("qwen2")->clean_spaces);
}

}  // namespace
}  // namespace strata
