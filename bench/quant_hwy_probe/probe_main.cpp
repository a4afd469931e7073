// Runtime probe: the Highway quant kernels on every x86 target clang compiles (EMU128, SSSE3, SSE4,
// AVX2, AVX3, AVX3_DL) against a double reference from the reference dequantizer.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <string>
#include "core/fp16.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"
#include "gguf/tensor_type.h"
#include "hwy/targets.h"
extern "C" int64_t probe_targets();
extern "C" void probe_run(int64_t, int, const uint8_t*, int64_t, int64_t, uint64_t, int8_t*, float*, int16_t*, int,
                          int64_t, float*);
using namespace strata;
static void put_half(uint8_t* p, float v) { uint16_t h = f32_to_fp16(v); std::memcpy(p, &h, 2); }
int main() {
  std::mt19937 rng(11);
  int failures = 0, checks = 0;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const int block = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ? 32 : 256;
    for (int64_t rows : {1, 3, 5, 37}) {
      const int64_t cols = block == 32 ? 160 : 512;
      const uint64_t row_bytes = ggml_row_size(type, static_cast<uint64_t>(cols));
      std::vector<uint8_t> w(row_bytes * rows);
      for (auto& b : w) b = static_cast<uint8_t>(rng());
      const uint64_t bs = ggml_type_traits(type).type_size;
      std::uniform_real_distribution<float> sc(0.002f, 0.02f);
      for (uint64_t o = 0; o < w.size(); o += bs) {
        if (type == GgmlType::kQ8_0) put_half(&w[o], sc(rng) / 4);
        if (type == GgmlType::kQ4_0) put_half(&w[o], sc(rng) * 8);
        if (type == GgmlType::kQ4_K) { put_half(&w[o + offsetof(BlockQ4_K, d)], sc(rng)); put_half(&w[o + offsetof(BlockQ4_K, dmin)], sc(rng)); }
        if (type == GgmlType::kQ6_K) put_half(&w[o + offsetof(BlockQ6_K, d)], sc(rng) / 8);
      }
      for (int64_t n = 1; n <= 9; ++n) {
        std::vector<int8_t> qs(n * cols);
        std::vector<float> d(n * cols / block);
        std::vector<int16_t> sums(n * cols / 16);
        for (auto& q : qs) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        for (auto& v : d) v = std::uniform_real_distribution<float>(0.001f, 0.01f)(rng);
        for (int64_t i = 0; i < n * cols / 16; ++i) { int s = 0; for (int k = 0; k < 16; ++k) s += qs[16 * i + k]; sums[i] = static_cast<int16_t>(s); }
        std::vector<double> ref(n * rows);
        std::vector<float> wd(cols);
        double rms = 0;
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, w.data() + r * row_bytes, wd.data(), cols);
          for (int64_t t = 0; t < n; ++t) {
            double acc = 0;
            for (int64_t k = 0; k < cols; ++k) acc += double(wd[k]) * d[t * (cols / block) + k / block] * qs[t * cols + k];
            ref[t * rows + r] = acc;
            rms += acc * acc;
          }
        }
        rms = std::sqrt(rms / ref.size());
        for (int64_t tg = probe_targets(); tg != 0; tg &= tg - 1) {
          const int64_t target = tg & -tg;
          std::vector<float> y(n * rows, NAN);
          probe_run(target, static_cast<int>(type), w.data(), rows, cols, row_bytes, qs.data(), d.data(), sums.data(), block, n, y.data());
          double err = 0;
          for (size_t i = 0; i < y.size(); ++i) err = std::fmax(err, std::fabs(y[i] - ref[i]));
          ++checks;
          if (!(err <= 2e-5 * rms)) { ++failures; std::printf("FAIL %s %s rows %lld n %lld: max err %g (rms %g)\n", std::string(ggml_type_name(type)).c_str(), hwy::TargetName(target), (long long)rows, (long long)n, err, rms); }
        }
      }
    }
  }
  std::printf("targets:");
  for (int64_t tg = probe_targets(); tg != 0; tg &= tg - 1) std::printf(" %s", hwy::TargetName(tg & -tg));
  std::printf("\n%d checks, %d failures\n", checks, failures);
  return failures != 0;
}
