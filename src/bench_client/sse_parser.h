// Incremental parser of a Server-Sent Events stream (the WHATWG "text/event-stream" format), as
// OpenAI-compatible servers send streamed completions: `data: {...}` lines, a blank line ending
// each event, `: comment` keep-alives, and a final `data: [DONE]`. Bytes arrive in arbitrary
// pieces from the socket, so a line (or a CR LF pair) may be split across feed() calls.
//
// Tolerated on purpose, because real servers differ: LF, CR LF or lone CR line ends; `data:` with
// or without the space; comment lines; unknown fields (ignored); a last event that the server
// closed without its blank line (finish() delivers it); llama.cpp's `error: {...}` lines.
//
// Thread-safety: a plain object; one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::bench {

struct SseEvent {
  std::string event;  // the `event:` field; "" means the default type "message"
  std::string data;   // the `data:` lines joined by "\n"
  std::string id;     // the last `id:` field seen in this event, "" when none
  // A non-standard `error:` field, which llama.cpp's server uses for errors mid-stream; an event
  // with only this field is delivered too.
  std::string error;
};

class SseParser {
 public:
  // Consumes the next bytes of the stream and returns the events they complete, in order.
  std::vector<SseEvent> feed(std::string_view bytes);

  // The stream ended: returns the pending event, if a data line was read since the last blank
  // line (the spec would drop it; servers that omit the final blank line are common enough).
  std::vector<SseEvent> finish();

  // Comment lines (starting with ':') seen so far, for tests and diagnostics.
  size_t comments() const { return comments_; }

 private:
  void process_line(std::string_view line, std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);

  std::string line_;          // bytes of the current, unterminated line
  bool after_cr_ = false;     // the previous byte was CR: a following LF belongs to it
  bool has_data_ = false;     // a data field was seen in the current event
  bool has_error_ = false;    // an error field was seen in the current event
  SseEvent pending_;
  size_t comments_ = 0;
};

}  // namespace strata::bench
