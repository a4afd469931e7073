// Cost of choosing one token (Sampler::sample) for real vocabulary sizes: 32000 (Llama 2,
// Mistral), 128256 (Llama 3), 152064 (Qwen2.5). Time per iteration = time per sampled token.
//
// Logit shapes: "llm" is a bulk N(0, 2) with 30 tokens at 10..19, roughly what a language model
// emits mid-sentence (top-p 0.9 keeps a handful of tokens); "flat" is uniform in [-1, 1], the
// worst case for top-p (0.9 of the mass needs 90% of the vocabulary, all of which gets sorted).
// No bias or penalties are set, so the logits are not modified and need no copy per iteration.
//
// Run: build/bin/sampler_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "sample/sampler.h"

namespace strata {
namespace {

enum Mode : int64_t { kGreedy, kGreedyLogprobs, kTemperature, kTopK40, kTopP09, kTopK40TopP09, kMinP005 };
enum Shape : int64_t { kLlm, kFlat };

std::vector<float> make_logits(size_t n, Shape shape) {
  std::mt19937 gen(1234);
  std::vector<float> v(n);
  if (shape == kFlat) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : v) x = dist(gen);
    return v;
  }
  std::normal_distribution<float> bulk(0.0f, 2.0f);
  for (float& x : v) x = bulk(gen);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  for (int i = 0; i < 30; ++i) v[pick(gen)] = 10.0f + static_cast<float>(i % 10);
  return v;
}

SamplingParams make_params(Mode mode) {
  SamplingParams p;
  p.seed = 7;
  p.temperature = 0.8f;
  switch (mode) {
    case kGreedy:
      p.temperature = 0.0f;
      break;
    case kGreedyLogprobs:
      p.temperature = 0.0f;
      p.logprobs = true;
      p.top_logprobs = 5;
      break;
    case kTemperature:
      break;
    case kTopK40:
      p.top_k = 40;
      break;
    case kTopP09:
      p.top_p = 0.9f;
      break;
    case kTopK40TopP09:
      p.top_k = 40;
      p.top_p = 0.9f;
      break;
    case kMinP005:
      p.min_p = 0.05f;
      break;
  }
  return p;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case kGreedy: return "greedy";
    case kGreedyLogprobs: return "greedy+logprobs5";
    case kTemperature: return "temperature";
    case kTopK40: return "top_k40";
    case kTopP09: return "top_p0.9";
    case kTopK40TopP09: return "top_k40+top_p0.9";
    case kMinP005: return "min_p0.05";
  }
  return "?";
}

void BM_Sample(benchmark::State& state) {
  const auto vocab = static_cast<size_t>(state.range(0));
  const auto mode = static_cast<Mode>(state.range(1));
  const auto shape = static_cast<Shape>(state.range(2));
  std::vector<float> logits = make_logits(vocab, shape);
  Sampler sampler(make_params(mode), static_cast<int32_t>(vocab));
  for (auto _ : state) {
    const SampleResult r = sampler.sample(logits, {}, {});
    benchmark::DoNotOptimize(r.token);
  }
  state.SetLabel(std::string(mode_name(mode)) + (shape == kFlat ? " flat" : " llm"));
}

void sample_args(benchmark::internal::Benchmark* b) {
  for (int64_t vocab : {32000, 128256, 152064}) {
    for (int64_t mode : {kGreedy, kGreedyLogprobs, kTemperature, kTopK40, kTopP09, kTopK40TopP09, kMinP005})
      b->Args({vocab, mode, kLlm});
    for (int64_t mode : {kTemperature, kTopK40, kTopP09}) b->Args({vocab, mode, kFlat});
  }
}

BENCHMARK(BM_Sample)->Apply(sample_args)->Unit(benchmark::kMicrosecond);

// The penalty bookkeeping per token on a long sequence: 4096 prompt tokens, then one new token
// per call, with repetition + presence + frequency penalties over the whole context.
void BM_SampleWithPenalties(benchmark::State& state) {
  const auto vocab = static_cast<size_t>(state.range(0));
  std::vector<float> base = make_logits(vocab, kLlm);
  std::vector<float> logits = base;
  SamplingParams p = make_params(kTopK40);
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.5f;
  std::mt19937 gen(5);
  std::uniform_int_distribution<TokenId> token(0, static_cast<TokenId>(vocab) - 1);
  std::vector<TokenId> prompt(4096);
  for (TokenId& t : prompt) t = token(gen);
  std::vector<TokenId> generated;
  generated.reserve(1 << 20);
  Sampler sampler(p, static_cast<int32_t>(vocab));
  for (auto _ : state) {
    std::copy(base.begin(), base.end(), logits.begin());  // penalties modify the row
    const SampleResult r = sampler.sample(logits, prompt, generated);
    generated.push_back(r.token);
  }
}
BENCHMARK(BM_SampleWithPenalties)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
