#include "sample/penalties.h"

#include "core/check.h"

namespace strata {
namespace {

void add(TokenCounts& counts, TokenId token) { ++counts[token]; }

void remove(TokenCounts& counts, TokenId token) {
  auto it = counts.find(token);
  STRATA_DCHECK(it != counts.end() && it->second > 0);
  if (--it->second == 0) counts.erase(it);  // applying walks the map: keep only live ids in it
}

void check_token(std::span<float> logits, TokenId token) {
  STRATA_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "token {} outside vocabulary of {}",
               token, logits.size());
}

}  // namespace

PenaltyTracker::PenaltyTracker(int32_t window, bool track_window, bool track_generated)
    : window_(window > 0 ? static_cast<size_t>(window) : 0),
      track_window_(track_window),
      track_generated_(track_generated) {}

void PenaltyTracker::update(std::span<const TokenId> prompt, std::span<const TokenId> generated) {
  const size_t old_total = started_ ? prompt_size_ + generated_seen_ : 0;
  if (started_) {
    STRATA_CHECK(prompt.size() == prompt_size_, "prompt changed from {} to {} tokens", prompt_size_,
                 prompt.size());
    STRATA_CHECK(generated.size() >= generated_seen_, "generated tokens shrank from {} to {}", generated_seen_,
                 generated.size());
  }
  const size_t total = prompt.size() + generated.size();
  const auto token_at = [&](size_t pos) { return pos < prompt.size() ? prompt[pos] : generated[pos - prompt.size()]; };

  if (track_window_) {
    // On the first call only the last `window_` tokens enter; afterwards each new token pushes out
    // the one `window_` positions before it.
    size_t first = old_total;
    if (!started_ && window_ > 0 && total > window_) first = total - window_;
    for (size_t pos = first; pos < total; ++pos) {
      add(window_counts_, token_at(pos));
      if (started_ && window_ > 0 && pos >= window_) remove(window_counts_, token_at(pos - window_));
    }
  }
  if (track_generated_) {
    for (size_t i = started_ ? generated_seen_ : 0; i < generated.size(); ++i) add(generated_counts_, generated[i]);
  }
  started_ = true;
  prompt_size_ = prompt.size();
  generated_seen_ = generated.size();
}

void apply_repetition_penalty(std::span<float> logits, const TokenCounts& counts, float penalty) {
  for (const auto& [token, count] : counts) {
    check_token(logits, token);
    float& x = logits[static_cast<size_t>(token)];
    x = x > 0.0f ? x / penalty : x * penalty;
  }
}

void apply_presence_frequency_penalties(std::span<float> logits, const TokenCounts& counts, float presence,
                                        float frequency) {
  for (const auto& [token, count] : counts) {
    check_token(logits, token);
    logits[static_cast<size_t>(token)] -= presence + frequency * static_cast<float>(count);
  }
}

}  // namespace strata
