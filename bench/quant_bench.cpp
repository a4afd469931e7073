// Throughput of the reference (scalar) conversions of gguf/quant.h, per type: dequantize_row on a
// 1 Mi-element row (bytes/s counts the f32 written) and quantize_row on a 64 Ki-element row (the
// K-quant scale searches make it ~100x slower than decoding; this is what converting a model costs).
// These are the baselines the SIMD kernels are compared with.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gguf/quant.h"
#include "gguf/tensor_type.h"

namespace strata {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                               GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ8_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
                               GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K};

std::vector<float> gaussian_row(int64_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

void BM_Dequantize(benchmark::State& state) {
  const auto type = kTypes[state.range(0)];
  constexpr int64_t n = 1 << 20;
  const auto x = gaussian_row(n);
  std::vector<uint8_t> q(ggml_row_size(type, n));
  quantize_row(type, x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) {
    dequantize_row(type, q.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(ggml_type_name(type)));
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

void BM_Quantize(benchmark::State& state) {
  const auto type = kTypes[state.range(0)];
  constexpr int64_t n = 1 << 16;
  const auto x = gaussian_row(n);
  std::vector<uint8_t> q(ggml_row_size(type, n));
  for (auto _ : state) {
    quantize_row(type, x.data(), q.data(), n);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(ggml_type_name(type)));
  state.SetItemsProcessed(state.iterations() * n);
}

BENCHMARK(BM_Dequantize)->DenseRange(0, std::size(kTypes) - 1);
BENCHMARK(BM_Quantize)->DenseRange(0, std::size(kTypes) - 1);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
