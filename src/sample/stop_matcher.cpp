#include "sample/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    STRATA_CHECK(!s.empty(), "empty stop string");
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
}

StopMatcher::Step StopMatcher::feed(std::string_view piece) {
  Step step;
  if (stopped_) return step;
  held_.append(piece);

  // held_ had no whole stop string before this piece, so any occurrence now is new and ends in
  // the piece; the first occurrence of each stop string is also its earliest end.
  size_t best_end = std::string::npos;
  size_t best_start = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t start = held_.find(stops_[i]);
    if (start == std::string::npos) continue;
    const size_t end = start + stops_[i].size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_end = end;
      best_start = start;
      step.matched = i;
    }
  }
  if (step.matched) {
    stopped_ = true;
    step.text = held_.substr(0, best_start);
    held_.clear();
    return step;
  }

  // Hold back the longest tail that is a proper prefix of some stop string. Only the last
  // max_stop_len_ - 1 bytes can be one, so this is cheap however long the text grows.
  size_t keep = 0;
  const size_t longest = std::min(held_.size(), max_stop_len_ > 0 ? max_stop_len_ - 1 : 0);
  for (size_t len = longest; len > 0 && keep == 0; --len) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - len);
    for (const std::string& s : stops_) {
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        keep = len;
        break;
      }
    }
  }
  step.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return step;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace strata
