// Picks the next token of one sequence from the logits of a forward pass.
//
// Order of operations on the logits (the row is modified in place by steps 1-2):
//   1. logit_bias: added; -100 bans (sets -inf); +100 restricts sampling to the +100 tokens.
//   2. penalties: repetition (prompt + generated, last penalty_last_n), then presence/frequency
//      (generated only); see penalties.h for the formulas.
//   3. temperature < kGreedyTemperature (1e-5): the argmax, lowest id on ties; otherwise logits are
//      divided by the temperature, truncated by top_k, then top_p (over the top-k distribution,
//      renormalized), then min_p (relative to the most likely token), and one token is drawn from
//      the softmax of what remains with the sampler's own RNG.
//
// Logprobs are the log-softmax of the logits after step 2: they include bias and penalties but
// not temperature or truncation, so they describe the model's (biased) distribution and do not
// change with the sampling knobs. A banned token has logprob -inf.
//
// Determinism: one RNG draw per non-greedy token from a seeded xoshiro256** (rng.h), the portable
// exp of logit_kernels.h, and every sum grouped the same way, so the same seed, parameters and
// logits give the same tokens on any x86-64 CPU for a given build (the AVX-512, AVX2 and SSE2
// versions of the vocabulary loops agree bit for bit). Across compilers and C libraries too,
// except that min_p's threshold uses std::log, whose last bit may differ.
//
// Cost per token for a vocabulary of V: greedy O(V), one vectorized pass. top_k: the same pass
// plus a scan that skips most blocks, and a sort of k. top_p: two vectorized passes (max, exp-sum),
// a threshold scan, and a radix select over the tokens near the top: O(V), no sort. min_p: the
// max pass and a threshold scan. Penalties: O(distinct tokens in the window), their counts kept
// incrementally (penalties.h).
//
// Thread-safety: none; one Sampler per sequence, called by one thread at a time (the engine
// thread). Samplers share nothing, so different ones may run on different threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/types.h"
#include "sample/penalties.h"
#include "sample/rng.h"
#include "sample/sampling_params.h"
#include "sample/truncation.h"

namespace strata {

struct TokenLogprob {
  TokenId token = kNoToken;
  float logprob = 0.0f;
};

struct SampleResult {
  TokenId token = kNoToken;
  std::optional<float> logprob;            // the chosen token's, when params.logprobs
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs most likely, best first (ties: lower id)
};

class Sampler {
 public:
  // Preconditions: params.validate(vocab_size) returned no error; vocab_size > 0.
  // `stream` separates the n samples of one request: sample i uses stream i of the same seed.
  // Without params.seed a random seed is drawn here (see seed()).
  Sampler(SamplingParams params, int32_t vocab_size, uint64_t stream = 0);

  // Chooses the next token. `logits` has one value per vocabulary entry and is modified in place.
  // `prompt_tokens` and `generated_tokens` are the sequence so far (for the penalties): the prompt
  // must be the same on every call and the generated tokens only grow (the caller appends the
  // returned token before the next call). Each call counts only the tokens new since the last.
  // Aborts (STRATA_CHECK) if no logit is finite after bias and penalties (a model fault: validate
  // rejects biases that ban every token).
  SampleResult sample(std::span<float> logits, std::span<const TokenId> prompt_tokens,
                      std::span<const TokenId> generated_tokens);

  // Whether sample() is the plain greedy pick of the logits as given: greedy, no logit bias, no
  // penalties, no logprobs. Then a caller may take Model::forward_pick's token instead (the same
  // max_logit + argmax_index, on the device), -1 being what sample() refuses.
  bool picks_greedily() const {
    return params_.is_greedy() && bias_.empty() && !use_repetition_ && !use_presence_frequency_ && !params_.logprobs;
  }

  // The seed in use: params.seed, or the random one drawn at construction (to report back, so a
  // request can be replayed).
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  void apply_bias(std::span<float> logits) const;
  // `unit_temp_total` receives the temperature-1 exp-sum when the draw computed it anyway.
  TokenId draw(std::span<const float> logits, float max, std::optional<double>& unit_temp_total);
  TokenId draw_from_candidates();
  TokenId draw_from_all(std::span<const float> logits, float max, float inv_temp, double total);
  void fill_weights(float max, float inv_temp);
  void add_logprobs(std::span<const float> logits, float max, std::optional<double> unit_temp_total,
                    SampleResult& result);

  SamplingParams params_;
  int32_t vocab_size_;
  uint64_t seed_;
  Rng rng_;

  std::vector<std::pair<TokenId, float>> bias_;  // additive biases, bans as -inf
  std::vector<TokenId> forced_;                  // tokens with bias +100, if any
  bool use_repetition_;
  bool use_presence_frequency_;
  PenaltyTracker penalties_;

  // Scratch reused across calls: per-block values (V / 64 entries) and the candidate list.
  std::vector<float> block_max_;
  std::vector<double> block_sum_;
  std::vector<Candidate> cands_;
  std::vector<Candidate> scratch_;
};

}  // namespace strata
