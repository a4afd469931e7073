// Repetition, presence and frequency penalties: token counts kept incrementally over a sequence,
// and the functions that apply them to logits.
// Counts are sparse maps because a history touches few ids of a 32k-152k vocabulary, and a sampler
// lives per sequence: dense per-vocabulary arrays would cost megabytes per running request.
// Thread-safety: PenaltyTracker is a plain value, one per sequence; the functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>

#include "core/types.h"

namespace strata {

using TokenCounts = std::unordered_map<TokenId, int32_t>;  // id -> occurrences (> 0 only)

class PenaltyTracker {
 public:
  // `window`: the repetition-penalty window in tokens of prompt + generated (0 = all of them).
  // Only the counts asked for are kept.
  PenaltyTracker(int32_t window, bool track_window, bool track_generated);

  // Brings the counts up to date with the sequence. The first call counts the prompt (and any
  // generated tokens); later calls count only the tokens generated since, so the cost per decoded
  // token is O(1), not O(history).
  // Preconditions: `prompt` is the same on every call; `generated` only ever grows (its first
  // tokens are those of the previous call). Both are checked by length only.
  void update(std::span<const TokenId> prompt, std::span<const TokenId> generated);

  // Occurrences in the last `window` tokens of prompt + generated.
  const TokenCounts& window_counts() const { return window_counts_; }
  // Occurrences in the generated tokens.
  const TokenCounts& generated_counts() const { return generated_counts_; }

 private:
  size_t window_;
  bool track_window_;
  bool track_generated_;
  bool started_ = false;
  size_t prompt_size_ = 0;
  size_t generated_seen_ = 0;
  TokenCounts window_counts_;
  TokenCounts generated_counts_;
};

// CTRL / llama.cpp: for every counted token, logit / penalty if the logit is > 0, else
// logit * penalty. Precondition: penalty > 0; every counted id indexes `logits`.
void apply_repetition_penalty(std::span<float> logits, const TokenCounts& counts, float penalty);

// OpenAI: logit -= presence * (count > 0) + frequency * count for every counted token.
// Precondition: every counted id indexes `logits`.
void apply_presence_frequency_penalties(std::span<float> logits, const TokenCounts& counts, float presence,
                                        float frequency);

}  // namespace strata
