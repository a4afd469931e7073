#include "bench_client/sse_parser.h"

namespace strata::bench {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CR LF pair whose CR ended the line already
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      process_line(line_, out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

std::vector<SseEvent> SseParser::finish() {
  std::vector<SseEvent> out;
  if (!line_.empty()) {
    process_line(line_, out);
    line_.clear();
  }
  after_cr_ = false;
  dispatch(out);
  return out;
}

void SseParser::process_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    dispatch(out);
    return;
  }
  if (line.front() == ':') {
    ++comments_;
    return;
  }
  std::string_view field = line, value;
  if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
  } else if (field == "error") {
    pending_.error.assign(value);
    has_error_ = true;
  } else if (field == "id") {
    pending_.id.assign(value);
  }
  // "retry" and unknown fields do not matter to a client that never reconnects.
}

void SseParser::dispatch(std::vector<SseEvent>& out) {
  // Per the spec an event without data is not delivered (a lone `event:` line is a no-op).
  // pending_.data is empty when only an `error:` field came.
  if (has_data_ || has_error_) out.push_back(std::move(pending_));
  pending_ = SseEvent{};
  has_data_ = false;
  has_error_ = false;
}

}  // namespace strata::bench
