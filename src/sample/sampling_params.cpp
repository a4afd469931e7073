#include "sample/sampling_params.h"

#include <fmt/format.h>


namespace strata {
namespace {

// Every comparison is written so that NaN fails it: `!(lo <= x && x <= hi)` is true for NaN.
bool in_closed(float x, float lo, float hi) { return lo <= x && x <= hi; }

}  // namespace

std::optional<std::string> SamplingParams::validate(int32_t vocab_size) const {
  if (!in_closed(temperature, 0.0f, kMaxTemperature))
    return fmt::format("temperature must be in [0, {}], got {}", kMaxTemperature, temperature);
  if (top_k < 0) return fmt::format("top_k must be >= 0 (0 = off), got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return fmt::format("top_p must be in (0, 1], got {}", top_p);
  if (!in_closed(min_p, 0.0f, 1.0f)) return fmt::format("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f && repetition_penalty <= kMaxRepetitionPenalty))
    return fmt::format("repetition_penalty must be in (0, {}], got {}", kMaxRepetitionPenalty,
                       repetition_penalty);
  if (penalty_last_n < 0)
    return fmt::format("penalty_last_n must be >= 0 (0 = whole context), got {}", penalty_last_n);
  if (!in_closed(presence_penalty, -kMaxPresenceFrequencyPenalty, kMaxPresenceFrequencyPenalty))
    return fmt::format("presence_penalty must be in [-{0}, {0}], got {1}", kMaxPresenceFrequencyPenalty,
                       presence_penalty);
  if (!in_closed(frequency_penalty, -kMaxPresenceFrequencyPenalty, kMaxPresenceFrequencyPenalty))
    return fmt::format("frequency_penalty must be in [-{0}, {0}], got {1}", kMaxPresenceFrequencyPenalty,
                       frequency_penalty);

  size_t banned = 0;
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size)
      return fmt::format("logit_bias: token {} is outside the vocabulary (0..{})", token, vocab_size - 1);
    if (!in_closed(bias, -kLogitBiasLimit, kLogitBiasLimit))
      return fmt::format("logit_bias: bias of token {} must be in [-{}, {}], got {}", token, kLogitBiasLimit,
                         kLogitBiasLimit, bias);
    if (bias <= -kLogitBiasLimit) ++banned;
  }
  // Keys are distinct, so this many bans cover the whole vocabulary and nothing could be sampled.
  if (banned == static_cast<size_t>(vocab_size)) return std::string("logit_bias bans every token");

  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    return fmt::format("top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs, top_logprobs);
  if (top_logprobs > 0 && !logprobs) return std::string("top_logprobs requires logprobs to be true");

  if (max_tokens && *max_tokens < 1) return fmt::format("max_tokens must be >= 1, got {}", *max_tokens);
  if (stop.size() > kMaxStopStrings)
    return fmt::format("stop: at most {} stop strings, got {}", kMaxStopStrings, stop.size());
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return fmt::format("stop[{}] is empty", i);
    if (stop[i].size() > kMaxStopStringBytes)
      return fmt::format("stop[{}] is longer than {} bytes", i, kMaxStopStringBytes);
  }
  if (stop_token_ids.size() > kMaxStopTokenIds)
    return fmt::format("stop_token_ids: at most {} ids, got {}", kMaxStopTokenIds, stop_token_ids.size());
  for (TokenId token : stop_token_ids) {
    if (token < 0 || token >= vocab_size)
      return fmt::format("stop_token_ids: token {} is outside the vocabulary (0..{})", token, vocab_size - 1);
  }
  if (n < 1 || n > kMaxN) return fmt::format("n must be in [1, {}], got {}", kMaxN, n);
  return std::nullopt;
}

}  // namespace strata
