#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "sample/logit_kernels.h"

namespace strata {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A flat distribution can make the candidate list as long as the vocabulary; do not keep that
// much memory per sequence for the rare request that needs it.
constexpr size_t kKeptCandidateCapacity = size_t{1} << 14;

// top_p without top_k first looks only at tokens within this many temperature units of the max
// (weight >= e^-c of the max's), widening until they hold enough mass. The last round reaches
// past kExpMinArg, so it holds every token of nonzero weight.
constexpr float kTopPRounds[] = {8.0f, 16.0f, 32.0f, 90.0f};

}  // namespace

Sampler::Sampler(SamplingParams params, int32_t vocab_size, uint64_t stream)
    : params_(std::move(params)),
      vocab_size_(vocab_size),
      seed_(params_.seed ? *params_.seed : random_seed()),
      rng_(seed_, stream),
      use_repetition_(params_.repetition_penalty != 1.0f),
      use_presence_frequency_(params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f),
      penalties_(params_.penalty_last_n, use_repetition_, use_presence_frequency_),
      block_max_(logit_blocks(static_cast<size_t>(vocab_size))),
      block_sum_(logit_blocks(static_cast<size_t>(vocab_size))) {
  STRATA_CHECK(vocab_size > 0);
  for (const auto& [token, bias] : params_.logit_bias) {
    STRATA_CHECK(token >= 0 && token < vocab_size, "logit_bias token {} outside vocabulary of {}", token,
                 vocab_size);
    if (bias >= kLogitBiasLimit) forced_.push_back(token);
    bias_.emplace_back(token, bias <= -kLogitBiasLimit ? kNegInf : bias);
  }
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const TokenId> prompt_tokens,
                             std::span<const TokenId> generated_tokens) {
  STRATA_CHECK(logits.size() == static_cast<size_t>(vocab_size_), "{} logits for a vocabulary of {}",
               logits.size(), vocab_size_);
  apply_bias(logits);
  if (use_repetition_ || use_presence_frequency_) penalties_.update(prompt_tokens, generated_tokens);
  if (use_repetition_) apply_repetition_penalty(logits, penalties_.window_counts(), params_.repetition_penalty);
  if (use_presence_frequency_) {
    apply_presence_frequency_penalties(logits, penalties_.generated_counts(), params_.presence_penalty,
                                       params_.frequency_penalty);
  }

  const float max = max_logit(logits, block_max_);
  STRATA_CHECK(std::isfinite(max), "no token can be sampled: the largest logit is {}", max);

  SampleResult result;
  std::optional<double> unit_temp_total;
  result.token = params_.is_greedy() ? argmax_index(logits, block_max_, max) : draw(logits, max, unit_temp_total);
  if (params_.logprobs) add_logprobs(logits, max, unit_temp_total, result);
  if (cands_.capacity() > kKeptCandidateCapacity) std::vector<Candidate>().swap(cands_);
  if (scratch_.capacity() > kKeptCandidateCapacity) std::vector<Candidate>().swap(scratch_);
  return result;
}

void Sampler::apply_bias(std::span<float> logits) const {
  if (!forced_.empty()) {
    // Exclusive selection: only the +100 tokens stay; the loop below then adds their bias.
    std::vector<float> kept(forced_.size());
    for (size_t i = 0; i < forced_.size(); ++i) kept[i] = logits[static_cast<size_t>(forced_[i])];
    std::fill(logits.begin(), logits.end(), kNegInf);
    for (size_t i = 0; i < forced_.size(); ++i) logits[static_cast<size_t>(forced_[i])] = kept[i];
  }
  for (const auto& [token, bias] : bias_) {
    float& x = logits[static_cast<size_t>(token)];
    x = bias == kNegInf ? kNegInf : x + bias;
  }
}

TokenId Sampler::draw(std::span<const float> logits, float max, std::optional<double>& unit_temp_total) {
  const float temp = params_.temperature;
  const float inv_temp = 1.0f / temp;
  const size_t k = static_cast<size_t>(params_.top_k);
  const bool use_top_k = k > 0 && k < logits.size();
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  // p >= min_p * p_max  <=>  (x - max) / temp >= ln(min_p).
  const float min_p_threshold =
      use_min_p ? static_cast<float>(max + static_cast<double>(temp) * std::log(static_cast<double>(params_.min_p)))
                : kNegInf;
  const auto cut_min_p = [&] {
    std::erase_if(cands_, [&](const Candidate& c) { return c.logit < min_p_threshold; });
  };

  if (use_top_k) {
    select_top_k(logits, block_max_, k, cands_);
    fill_weights(max, inv_temp);
    if (use_top_p) {
      double total = 0.0;
      for (const Candidate& c : cands_) total += c.weight;
      keep_top_p(cands_, params_.top_p * total, scratch_);
    }
    if (use_min_p) cut_min_p();
    return draw_from_candidates();
  }

  if (use_top_p) {
    const double total = exp_sum(logits, max, inv_temp, block_sum_);
    if (temp == 1.0f) unit_temp_total = total;
    const double target = params_.top_p * total;
    for (float c : kTopPRounds) {
      select_at_least(logits, block_max_, max - c * temp, cands_);
      fill_weights(max, inv_temp);
      double mass = 0.0;
      for (const Candidate& cand : cands_) mass += cand.weight;
      if (mass >= target) break;
    }
    keep_top_p(cands_, target, scratch_);
    if (use_min_p) cut_min_p();
    return draw_from_candidates();
  }

  if (use_min_p) {
    select_at_least(logits, block_max_, min_p_threshold, cands_);
    fill_weights(max, inv_temp);
    return draw_from_candidates();
  }

  const double total = exp_sum(logits, max, inv_temp, block_sum_);
  if (temp == 1.0f) unit_temp_total = total;
  return draw_from_all(logits, max, inv_temp, total);
}

void Sampler::fill_weights(float max, float inv_temp) {
  for (Candidate& c : cands_) c.weight = exp_weight(c.logit, max, inv_temp);
}

TokenId Sampler::draw_from_candidates() {
  // The most likely token survives every truncation and has weight 1, so total >= 1.
  STRATA_DCHECK(!cands_.empty());
  double total = 0.0;
  for (const Candidate& c : cands_) total += c.weight;
  const double target = rng_.next_double() * total;
  double cum = 0.0;
  TokenId last = cands_.front().token;
  for (const Candidate& c : cands_) {
    if (c.weight <= 0.0f) continue;
    cum += c.weight;
    last = c.token;
    if (target < cum) return c.token;
  }
  return last;  // rounding left target just above the sum: the last token of nonzero weight
}

TokenId Sampler::draw_from_all(std::span<const float> logits, float max, float inv_temp, double total) {
  double target = rng_.next_double() * total;
  // Find the block holding the target from the per-block sums, then walk only that block.
  size_t chosen = block_sum_.size();
  size_t last_nonzero = 0;
  double before = 0.0;
  for (size_t b = 0; b < block_sum_.size(); ++b) {
    if (block_sum_[b] > 0.0) {
      if (target < before + block_sum_[b]) {
        chosen = b;
        break;
      }
      last_nonzero = b;
    }
    before += block_sum_[b];
  }
  if (chosen == block_sum_.size()) {  // rounding: take the last token of nonzero weight
    chosen = last_nonzero;
    target = std::numeric_limits<double>::infinity();
  }
  double cum = before;
  TokenId last = kNoToken;
  const size_t end = std::min(logits.size(), (chosen + 1) * kLogitBlock);
  for (size_t i = chosen * kLogitBlock; i < end; ++i) {
    const float w = exp_weight(logits[i], max, inv_temp);
    if (w <= 0.0f) continue;
    cum += w;
    last = static_cast<TokenId>(i);
    if (target < cum) return last;
  }
  STRATA_CHECK(last != kNoToken, "block {} has a nonzero sum but no token of nonzero weight", chosen);
  return last;
}

void Sampler::add_logprobs(std::span<const float> logits, float max, std::optional<double> unit_temp_total,
                           SampleResult& result) {
  const double total = unit_temp_total ? *unit_temp_total : exp_sum(logits, max, 1.0f, block_sum_);
  const double log_total = std::log(total);
  const auto logprob = [&](float x) {
    return static_cast<float>(static_cast<double>(x) - static_cast<double>(max) - log_total);
  };
  result.logprob = logprob(logits[static_cast<size_t>(result.token)]);
  if (params_.top_logprobs > 0) {
    select_top_k(logits, block_max_, static_cast<size_t>(params_.top_logprobs), cands_);
    result.top_logprobs.reserve(cands_.size());
    for (const Candidate& c : cands_) result.top_logprobs.push_back({c.token, logprob(c.logit)});
  }
}

}  // namespace strata
