// The SSE parser must give the same events however the socket splits the bytes, with every line
// ending and the liberties real OpenAI-compatible servers take.
#include "bench_client/sse_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::bench {
namespace {

struct Ev {
  std::string event, data, id, error;
  bool operator==(const Ev&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "{event=" << e.event << " data=" << e.data << " id=" << e.id << " error=" << e.error << "}";
}

std::vector<Ev> collect(const std::vector<SseEvent>& in, std::vector<Ev> out = {}) {
  for (const auto& e : in) out.push_back({e.event, e.data, e.id, e.error});
  return out;
}

std::vector<Ev> parse_pieces(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<Ev> out;
  for (const auto& piece : pieces) out = collect(p.feed(piece), std::move(out));
  return collect(p.finish(), std::move(out));
}

// A stream with everything at once: comments, CRLF and lone CR, `data:` without the space,
// an event spread over two data lines, an id, a named event, and the final [DONE].
const std::string kTricky =
    ": keep-alive\r\n\r\n"
    "data: {\"choices\":[{\"text\":\"Once\"}]}\r\n\r\n"
    "data:{\"choices\":[{\"text\":\" upon\"}]}\n\n"
    "id: 7\r"
    "data: first line\r\n"
    "data: second line\r\n"
    "\r\n"
    ":comment without space\n"
    "event: ping\n"
    "data: \n\n"
    "data: [DONE]\n\n";

const std::vector<Ev> kTrickyEvents = {
    {"", "{\"choices\":[{\"text\":\"Once\"}]}", "", ""},
    {"", "{\"choices\":[{\"text\":\" upon\"}]}", "", ""},
    {"", "first line\nsecond line", "7", ""},
    {"ping", "", "", ""},
    {"", "[DONE]", "", ""},
};

TEST(SseParser, ParsesAStreamWithCommentsMixedLineEndsAndDone) {
  EXPECT_EQ(parse_pieces({kTricky}), kTrickyEvents);
}

TEST(SseParser, SameEventsForEverySplitIntoTwoReads) {
  for (size_t cut = 0; cut <= kTricky.size(); ++cut) {
    EXPECT_EQ(parse_pieces({kTricky.substr(0, cut), kTricky.substr(cut)}), kTrickyEvents) << "cut at " << cut;
  }
}

TEST(SseParser, SameEventsWhenFedOneByteAtATime) {
  std::vector<std::string> bytes;
  for (char c : kTricky) bytes.emplace_back(1, c);
  EXPECT_EQ(parse_pieces(bytes), kTrickyEvents);
}

TEST(SseParser, CrLfSplitBetweenReadsIsOneLineEnd) {
  // If the LF after a CR that ended one read counted as an empty line, the two data lines would
  // be dispatched as two events.
  EXPECT_EQ(parse_pieces({"data: a\r", "\ndata: b\r", "\n\r", "\n"}), (std::vector<Ev>{{"", "a\nb", "", ""}}));
}

TEST(SseParser, CommentsAndBlankLinesAloneGiveNoEvents) {
  SseParser p;
  EXPECT_TRUE(p.feed(": ping\n\n: ping\r\n\r\n\n\n").empty());
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.comments(), 2u);
}

TEST(SseParser, StripsOnlyOneLeadingSpaceOfAValue) {
  EXPECT_EQ(parse_pieces({"data:  two spaces\n\n"}), (std::vector<Ev>{{"", " two spaces", "", ""}}));
}

TEST(SseParser, FinishDeliversALastEventWithoutItsBlankLine) {
  EXPECT_EQ(parse_pieces({"data: [DONE]"}), (std::vector<Ev>{{"", "[DONE]", "", ""}}));
  EXPECT_EQ(parse_pieces({"data: x\n"}), (std::vector<Ev>{{"", "x", "", ""}}));
}

TEST(SseParser, UnknownFieldsAreIgnoredAndLlamaCppErrorLinesKept) {
  EXPECT_EQ(parse_pieces({"retry: 100\nfoo: bar\ndata: x\n\n"}), (std::vector<Ev>{{"", "x", "", ""}}));
  EXPECT_EQ(parse_pieces({"error: {\"message\":\"boom\"}\n\n"}), (std::vector<Ev>{{"", "", "", "{\"message\":\"boom\"}"}}));
}

TEST(SseParser, EventFieldsDoNotLeakIntoTheNextEvent) {
  EXPECT_EQ(parse_pieces({"event: a\nid: 1\ndata: x\n\ndata: y\n\n"}),
            (std::vector<Ev>{{"a", "x", "1", ""}, {"", "y", "", ""}}));
}

}  // namespace
}  // namespace strata::bench
