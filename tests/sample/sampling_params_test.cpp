// SamplingParams::validate: what the server answers for out-of-range request fields.
#include "sample/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "sample/finish_reason.h"

namespace strata {
namespace {

constexpr int32_t kVocab = 32000;

std::string error_of(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams p;
  edit(p);
  return p.validate(kVocab).value_or("");
}

TEST(SamplingParams, DefaultsAreValidAndMeanPlainSampling) {
  const SamplingParams p;
  EXPECT_EQ(p.validate(kVocab), std::nullopt);
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_FALSE(p.is_greedy());
  EXPECT_EQ(p.n, 1);
}

TEST(SamplingParams, BoundaryValuesAreAccepted) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 100.0f;
  p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}};
  p.logprobs = true;
  p.top_logprobs = 20;
  p.stop = std::vector<std::string>(16, "x");
  p.stop_token_ids = {0, kVocab - 1};
  p.max_tokens = 1;
  p.n = 128;
  EXPECT_EQ(p.validate(kVocab), std::nullopt);
  EXPECT_TRUE(p.is_greedy());
}

TEST(SamplingParams, EachOutOfRangeFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    std::function<void(SamplingParams&)> edit;
    std::string message;
  } cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature must be in [0, 100], got -0.1"},
      {[](SamplingParams& p) { p.temperature = 101.0f; }, "temperature must be in [0, 100], got 101"},
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature must be in [0, 100], got nan"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k must be >= 0 (0 = off), got -1"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[&](SamplingParams& p) { p.top_p = nan; }, "top_p must be in (0, 1], got nan"},
      {[](SamplingParams& p) { p.min_p = -0.5f; }, "min_p must be in [0, 1], got -0.5"},
      {[](SamplingParams& p) { p.min_p = 2.0f; }, "min_p must be in [0, 1], got 2"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty must be in (0, 100], got 0"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty must be in (0, 100], got -1"},
      {[](SamplingParams& p) { p.penalty_last_n = -1; }, "penalty_last_n must be >= 0 (0 = whole context), got -1"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty must be in [-2, 2], got -3"},
      {[&](SamplingParams& p) { p.frequency_penalty = nan; }, "frequency_penalty must be in [-2, 2], got nan"},
      {[](SamplingParams& p) { p.logit_bias[kVocab] = 1.0f; },
       "logit_bias: token 32000 is outside the vocabulary (0..31999)"},
      {[](SamplingParams& p) { p.logit_bias[-1] = 1.0f; }, "logit_bias: token -1 is outside the vocabulary (0..31999)"},
      {[](SamplingParams& p) { p.logit_bias[7] = 150.0f; }, "logit_bias: bias of token 7 must be in [-100, 100], got 150"},
      {[](SamplingParams& p) { p.logit_bias[7] = -std::numeric_limits<float>::infinity(); },
       "logit_bias: bias of token 7 must be in [-100, 100], got -inf"},
      {[](SamplingParams& p) { p.top_logprobs = 21; p.logprobs = true; }, "top_logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.top_logprobs = -1; }, "top_logprobs must be in [0, 20], got -1"},
      {[](SamplingParams& p) { p.top_logprobs = 3; }, "top_logprobs requires logprobs to be true"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); }, "stop: at most 16 stop strings, got 17"},
      {[](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop[1] is empty"},
      {[](SamplingParams& p) { p.stop = {std::string(1025, 'x')}; }, "stop[0] is longer than 1024 bytes"},
      {[](SamplingParams& p) { p.stop_token_ids = {5, kVocab}; },
       "stop_token_ids: token 32000 is outside the vocabulary (0..31999)"},
      {[](SamplingParams& p) { p.n = 0; }, "n must be in [1, 128], got 0"},
      {[](SamplingParams& p) { p.n = 129; }, "n must be in [1, 128], got 129"},
  };
  for (const auto& c : cases) EXPECT_EQ(error_of(c.edit), c.message);
}

TEST(SamplingParams, BanningEveryTokenIsRejected) {
  SamplingParams p;
  for (TokenId t = 0; t < 10; ++t) p.logit_bias[t] = -100.0f;
  EXPECT_EQ(p.validate(10).value_or(""), "logit_bias bans every token");
  p.logit_bias[3] = -99.0f;
  EXPECT_EQ(p.validate(10), std::nullopt);
}

TEST(FinishReason, NamesAreOpenAIs) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace strata
