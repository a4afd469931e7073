// StopMatcher: what a streaming client receives, piece by piece, for stop strings.
#include "sample/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace {

struct Streamed {
  std::string emitted;                   // everything sent to the client, flush included
  std::vector<std::string> per_piece;    // what each feed() returned
  std::optional<size_t> matched;
};

Streamed stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Streamed r;
  for (const std::string& p : pieces) {
    StopMatcher::Step step = m.feed(p);
    r.per_piece.push_back(step.text);
    r.emitted += step.text;
    if (step.matched) {
      EXPECT_FALSE(r.matched) << "matched twice";
      r.matched = step.matched;
    }
  }
  r.emitted += m.flush();
  EXPECT_EQ(m.stopped(), r.matched.has_value());
  return r;
}

TEST(StopMatcher, StopSplitOverThreePieces) {
  const Streamed r = stream({"STOP"}, {"Hello S", "T", "OP world"});
  EXPECT_EQ(r.emitted, "Hello ");
  EXPECT_EQ(r.matched, 0u);
  // The "S" that might begin the stop string is held back, not sent early.
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"Hello ", "", ""}));
}

TEST(StopMatcher, HeldBackTextIsReleasedWhenItTurnsOutNotToBeAStop) {
  const Streamed r = stream({"STOP"}, {"Hello S", "T", "ART"});
  EXPECT_EQ(r.emitted, "Hello START");
  EXPECT_FALSE(r.matched);
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"Hello ", "", "START"}));
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "aab" inside "aaab": the first "a" can no longer start the stop once the third arrives.
  Streamed r = stream({"aab"}, {"a", "a", "a", "b", "c"});
  EXPECT_EQ(r.emitted, "a");
  EXPECT_EQ(r.matched, 0u);
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"", "", "a", "", ""}));
  r = stream({"aab"}, {"aaab"});
  EXPECT_EQ(r.emitted, "a");
  // Stop "abac" over "ab|ab|ad": only the tail that can still start "abac" ("ab") is held.
  r = stream({"abac"}, {"ab", "ab", "ad"});
  EXPECT_EQ(r.emitted, "ababad");
  EXPECT_FALSE(r.matched);
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"", "ab", "abad"}));
  // ...and over "ab|ab|ac" the stop starts inside the held tail.
  r = stream({"abac"}, {"ab", "ab", "ac", "x"});
  EXPECT_EQ(r.emitted, "ab");
  EXPECT_EQ(r.matched, 0u);
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"", "ab", "", ""}));
}

TEST(StopMatcher, NoStopStringsPassEverythingThrough) {
  const Streamed r = stream({}, {"a", "bc", ""});
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_FALSE(r.matched);
}

TEST(StopMatcher, TextWithoutStopIsEmittedWholeAfterFlush) {
  const Streamed r = stream({"\n\n", "END"}, {"one\n", "two E", "N"});
  EXPECT_EQ(r.emitted, "one\ntwo EN");
  EXPECT_FALSE(r.matched);
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"one", "\ntwo ", ""}));
}

TEST(StopMatcher, MultipleStopStringsTheFirstToCompleteWins) {
  // "cd" completes (at byte 4) before "bcde" would (byte 5): the text is cut before "cd".
  Streamed r = stream({"bcde", "cd"}, {"abcdef"});
  EXPECT_EQ(r.emitted, "ab");
  EXPECT_EQ(r.matched, 1u);
  // Same byte stream, different pieces: same result.
  r = stream({"bcde", "cd"}, {"a", "b", "c", "d", "e", "f"});
  EXPECT_EQ(r.emitted, "ab");
  EXPECT_EQ(r.matched, 1u);
  // Two that complete at the same byte: the longer one (earlier start) wins.
  r = stream({"d", "cd"}, {"abcd"});
  EXPECT_EQ(r.emitted, "ab");
  EXPECT_EQ(r.matched, 1u);
  // Only the second of two is present.
  r = stream({"xyz", "</s>"}, {"answer</", "s>more"});
  EXPECT_EQ(r.emitted, "answer");
  EXPECT_EQ(r.matched, 1u);
}

TEST(StopMatcher, StopAtTheVeryStart) {
  Streamed r = stream({"Q:"}, {"Q:", " what"});
  EXPECT_EQ(r.emitted, "");
  EXPECT_EQ(r.matched, 0u);
  r = stream({"Q:"}, {"Q", ": what"});
  EXPECT_EQ(r.emitted, "");
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"", "", }));
}

TEST(StopMatcher, NothingAfterTheStopIsEverEmitted) {
  StopMatcher m({"."});
  EXPECT_EQ(m.feed("one. two").text, "one");
  EXPECT_TRUE(m.stopped());
  const StopMatcher::Step later = m.feed("three");
  EXPECT_EQ(later.text, "");
  EXPECT_FALSE(later.matched);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, MultiByteUtf8StaysWhole) {
  // Stop "日本" (6 bytes): "日" is held back alone, and released whole when "語" follows.
  Streamed r = stream({"日本"}, {"こんにちは日", "語"});
  EXPECT_EQ(r.emitted, "こんにちは日語");
  EXPECT_EQ(r.per_piece, (std::vector<std::string>{"こんにちは", "日語"}));
  r = stream({"日本"}, {"こんにちは日", "本語"});
  EXPECT_EQ(r.emitted, "こんにちは");
  EXPECT_EQ(r.matched, 0u);
}

TEST(StopMatcher, EveryWayOfCuttingTheTextGivesTheSameOutput) {
  const std::string text = "the cat sat on the mat, the end. THE END";
  const std::vector<std::string> stops = {"the end", "mat,", "at on x"};
  // Expected: the first stop to complete is "mat," (ends at byte 23).
  const std::string expected = "the cat sat on the ";
  for (size_t cut1 = 0; cut1 <= text.size(); cut1 += 3) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 5) {
      const Streamed r = stream(stops, {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)});
      ASSERT_EQ(r.emitted, expected) << cut1 << " " << cut2;
      ASSERT_EQ(r.matched, 1u);
    }
  }
}

}  // namespace
}  // namespace strata
