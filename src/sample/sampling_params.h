// What a request asks of token selection and of stopping: the OpenAI fields (temperature, top_p,
// penalties, logit_bias, seed, logprobs, stop, n, max_tokens) plus the common extensions of vLLM
// and llama.cpp (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids).
// The server fills one from request JSON and calls validate() before anything else sees it; every
// other user (Sampler, StopMatcher, the engine) may then assume the values are in range.
// Thread-safety: a plain value; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace strata {

// Below this temperature sampling is greedy: dividing logits by a smaller value only overflows,
// and the distribution is a point mass for all practical purposes (vLLM uses the same cut).
inline constexpr float kGreedyTemperature = 1e-5f;

inline constexpr float kMaxTemperature = 100.0f;
inline constexpr float kMaxPresenceFrequencyPenalty = 2.0f;  // OpenAI's range is [-2, 2]
inline constexpr float kMaxRepetitionPenalty = 100.0f;       // keeps penalized logits finite
inline constexpr float kLogitBiasLimit = 100.0f;             // OpenAI's range is [-100, 100]
inline constexpr int32_t kMaxTopLogprobs = 20;               // OpenAI's limit
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;  // the stream holds back up to this much text
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr int32_t kMaxN = 128;  // OpenAI's limit on choices per request

struct SamplingParams {
  // --- token selection, applied in this order by Sampler ---

  // Additive bias per token id, applied to the logits first. A bias of -100 (the lower limit) bans
  // the token outright; a bias of +100 (the upper limit) restricts sampling to the tokens carrying
  // +100, as OpenAI documents ("-100 or 100 should result in a ban or exclusive selection").
  std::map<TokenId, float> logit_bias;

  // CTRL / llama.cpp repetition penalty over the last `penalty_last_n` tokens of prompt +
  // generated (0 = all of them): a positive logit is divided by it, a negative one multiplied.
  // 1 = off. Range (0, 100].
  float repetition_penalty = 1.0f;
  int32_t penalty_last_n = 0;

  // OpenAI penalties over the generated tokens only:
  // logit -= presence_penalty * (count > 0) + frequency_penalty * count. Range [-2, 2]; 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;

  // Logits are divided by the temperature; below kGreedyTemperature (so also 0) selection is greedy
  // (argmax, lowest id on ties) and top_k/top_p/min_p have no effect. Range [0, 100].
  float temperature = 1.0f;
  int32_t top_k = 0;     // keep the k most likely tokens; 0 = off. Range >= 0.
  float top_p = 1.0f;    // keep the smallest most-likely set with this much probability; range (0, 1]
  float min_p = 0.0f;    // keep tokens with p >= min_p * p(most likely token); range [0, 1]; 0 = off

  // Same seed, same parameters and same logits => same tokens. Unset: the Sampler draws a random
  // seed once (see Sampler::seed()).
  std::optional<uint64_t> seed;

  // Chat-completions style: `logprobs` returns the chosen token's log-probability, `top_logprobs`
  // additionally the n most likely tokens (0..20; needs `logprobs`).
  bool logprobs = false;
  int32_t top_logprobs = 0;

  // --- stopping (used by the engine and StopMatcher, not by Sampler) ---

  std::optional<int32_t> max_tokens;  // generated tokens at most; unset = until the context is full
  std::vector<std::string> stop;      // stop strings, not included in the output
  std::vector<TokenId> stop_token_ids;  // extra tokens that end generation (besides EOS)
  bool ignore_eos = false;              // keep generating after EOS
  int32_t n = 1;                        // independent samples per request

  // True when selection is greedy (see `temperature`).
  bool is_greedy() const { return !(temperature >= kGreedyTemperature); }

  // nullopt when every field is in range, else a message naming the first offending field by its
  // OpenAI name, e.g. "top_p must be in (0, 1], got 1.5". `vocab_size` (> 0) bounds the token ids
  // of logit_bias and stop_token_ids.
  std::optional<std::string> validate(int32_t vocab_size) const;
};

}  // namespace strata
