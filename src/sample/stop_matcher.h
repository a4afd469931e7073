// Stop strings over streamed text. Decoded pieces go in as they come; out comes the text that can
// be sent to the client now. A tail that might still grow into a stop string is held back until
// the next piece settles it, so a stop string is never half-sent. When a stop string completes,
// the output ends just before it (the stop string and everything after it are dropped, as OpenAI
// does) and the matcher stays stopped.
//
// Matching is on bytes and does not depend on how the text is cut into pieces: the stop that
// completes first (earliest end in the text) wins; if several complete at the same byte, the one
// that starts earliest. Output is valid UTF-8 when the pieces and stop strings are complete UTF-8
// (the incremental detokenizer guarantees the former), since a held-back tail always starts where
// a stop string starts, at a character boundary.
// Thread-safety: none; one matcher per sequence, used by one thread at a time.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class StopMatcher {
 public:
  struct Step {
    std::string text;               // safe to emit now
    std::optional<size_t> matched;  // index into the stop strings when one completed in this step
  };

  // Precondition: no stop string is empty (SamplingParams::validate ensures it). No stop strings
  // is fine: every piece then passes straight through.
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a piece of decoded text. After a match, further pieces are ignored (empty Step).
  Step feed(std::string_view piece);

  // End of generation: returns the held-back text (empty after a match).
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string held_;  // text received but not yet emitted; never contains a whole stop string
  bool stopped_ = false;
};

}  // namespace strata
