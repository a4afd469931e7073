// UTF-8 helpers: the lenient decoder that mirrors llama.cpp and the strict one used for output.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace strata {
namespace {

TEST(Utf8, LenientDecodingFollowsLlamaCpp) {
  std::string s = "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99";
  EXPECT_EQ(utf8::decode_all(s), (std::vector<uint32_t>{0x41, 0xE9, 0x20AC, 0x1F999}));
  EXPECT_EQ(utf8::decode_all("\xFF" "a"), (std::vector<uint32_t>{0xFFFD, 0x61}));
  EXPECT_EQ(utf8::decode_all("\xC3"), (std::vector<uint32_t>{0xFFFD}));
  EXPECT_EQ(utf8::decode_all("\xC1\x81"), (std::vector<uint32_t>{0x41})) << "overlong forms are accepted";
}

TEST(Utf8, SanitizeMakesWellFormedText) {
  std::string out;
  utf8::sanitize("a\xFF" "b\xE2\x82", out);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
  utf8::sanitize("\xED\xA0\x80", out);
  EXPECT_EQ(out, "\xEF\xBF\xBD") << "a surrogate";
  EXPECT_TRUE(utf8::is_valid(out));
  utf8::sanitize("plain", out);
  EXPECT_EQ(out, "plain");
}

TEST(Utf8, StrictSteps) {
  using utf8::Step;
  EXPECT_EQ(utf8::next_strict("a").step, Step::kComplete);
  EXPECT_EQ(utf8::next_strict("\xE2\x82").step, Step::kIncomplete);
  EXPECT_EQ(utf8::next_strict("\xE2\x82\xAC").length, 3u);
  EXPECT_EQ(utf8::next_strict("\xE2(").step, Step::kInvalid);
  EXPECT_EQ(utf8::next_strict("\xE2(").length, 1u);
  EXPECT_EQ(utf8::next_strict("\xE0\x80").step, Step::kInvalid) << "overlong";
  EXPECT_EQ(utf8::next_strict("\xED\xA0\x80").step, Step::kInvalid) << "surrogate";
  EXPECT_EQ(utf8::next_strict("\xF4\x90\x80\x80").step, Step::kInvalid) << "above U+10FFFF";
  EXPECT_EQ(utf8::next_strict("\xC0\x80").step, Step::kInvalid);
  EXPECT_FALSE(utf8::is_valid("abc\x80"));
  EXPECT_TRUE(utf8::is_valid("0123456789abcdef\xC3\xA9"));
}

TEST(ByteLevel, AlphabetRoundTrips) {
  EXPECT_EQ(byte_level::encode_byte(' '), "\xC4\xA0");  // U+0120
  EXPECT_EQ(byte_level::encode_byte('a'), "a");
  EXPECT_EQ(byte_level::encode_byte('\n'), "\xC4\x8A");  // U+010A
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string spelled;
  byte_level::encode(all, spelled);
  EXPECT_TRUE(utf8::is_valid(spelled));
  std::string back;
  ASSERT_TRUE(byte_level::decode(spelled, back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level::decode("\xE4\xB8\x80", back)) << "U+4E00 is not in the alphabet";
}

}  // namespace
}  // namespace strata
