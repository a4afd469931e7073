// Helpers for the backend kernel tests: random weight matrices of every type (random block bytes
// with sane scales, so every bit pattern of the quants is exercised), error measures, running
// a test once per SIMD target this CPU supports, and random paged KV for the attention tests. Thread-safety: test-thread only.
#pragma once

#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_ref.h"
#include "core/fp16.h"
#include "gguf/quant_blocks.h"
#include "gguf/tensor_type.h"

namespace strata::cpu::test {

// The compiled SIMD targets this CPU can run, best first (HWY_* bits).
inline std::vector<int64_t> targets_to_test() {
  std::vector<int64_t> out;
  for (int64_t t = hwy::SupportedTargets() & simd_compiled_targets(); t != 0; t &= t - 1) out.push_back(t & -t);
  return out;
}

inline std::string target_param_name(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

// Makes the kernels dispatch to one target while alive.
class TargetScope {
 public:
  explicit TargetScope(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

inline void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// A weight matrix of `rows` x `cols` with its own storage.
struct TestMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Random weights of any matmul type: floats uniform in [-1, 1]; quantized blocks of random bytes
// whose f16 scales (and mins) are overwritten with values of a realistic size.
inline TestMatrix random_matrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  TestMatrix m;
  const uint64_t row_bytes = ggml_row_size(type, static_cast<uint64_t>(cols));
  m.bytes.resize(row_bytes * static_cast<uint64_t>(rows) + 64);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  uint8_t* data = m.bytes.data() + 1;  // deliberately odd-aligned only for byte-aligned types below
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) data = m.bytes.data();
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data + static_cast<uint64_t>(r) * row_bytes;
    if (type == GgmlType::kF32) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = u(rng);
        std::memcpy(row + 4 * c, &v, 4);
      }
      continue;
    }
    if (type == GgmlType::kF16 || type == GgmlType::kBF16) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = u(rng);
        const uint16_t h = type == GgmlType::kF16 ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(row + 2 * c, &h, 2);
      }
      continue;
    }
    for (uint64_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(byte(rng));
    const auto traits = ggml_type_traits(type);
    const int64_t nb = cols / traits.block_size;
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + static_cast<uint64_t>(b) * traits.type_size;
      switch (type) {
        case GgmlType::kQ4_0: put_half(blk + offsetof(BlockQ4_0, d), scale(rng) * 8); break;
        case GgmlType::kQ5_0: put_half(blk + offsetof(BlockQ5_0, d), scale(rng) * 4); break;
        case GgmlType::kQ8_0: put_half(blk + offsetof(BlockQ8_0, d), scale(rng) / 4); break;
        case GgmlType::kQ4_1:
          put_half(blk + offsetof(BlockQ4_1, d), scale(rng) * 8);
          put_half(blk + offsetof(BlockQ4_1, m), -scale(rng) * 50);
          break;
        case GgmlType::kQ5_1:
          put_half(blk + offsetof(BlockQ5_1, d), scale(rng) * 4);
          put_half(blk + offsetof(BlockQ5_1, m), -scale(rng) * 50);
          break;
        case GgmlType::kQ2_K:
          put_half(blk + offsetof(BlockQ2_K, d), scale(rng));
          put_half(blk + offsetof(BlockQ2_K, dmin), scale(rng));
          break;
        case GgmlType::kQ3_K: put_half(blk + offsetof(BlockQ3_K, d), scale(rng) / 4); break;
        case GgmlType::kQ4_K:
          put_half(blk + offsetof(BlockQ4_K, d), scale(rng) / 4);
          put_half(blk + offsetof(BlockQ4_K, dmin), scale(rng) / 4);
          break;
        case GgmlType::kQ5_K:
          put_half(blk + offsetof(BlockQ5_K, d), scale(rng) / 8);
          put_half(blk + offsetof(BlockQ5_K, dmin), scale(rng) / 4);
          break;
        case GgmlType::kQ6_K: put_half(blk + offsetof(BlockQ6_K, d), scale(rng) / 16); break;
        default: break;
      }
    }
  }
  m.w = WeightMatrix{type, rows, cols, data, row_bytes};
  return m;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(std::max<size_t>(1, v.size())));
}

// Infinite when the sizes differ or an element is NaN (or infinite) on one side only: std::max
// would skip a NaN difference and let a NaN output pass any tolerance. Equal infinities (and two
// NaNs) count as equal.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

inline double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(std::max<size_t>(1, a.size())));
}

inline bool bitwise_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// One layer's paged KV for the attention tests: sequences of (start_pos, n_q) with block tables
// drawn from one shuffled pool of ids, every slot of their positions filled through the reference
// kv_store with values in [-1, 1] (so K/V hold exactly representable values); seqs[i] has its
// queries at rows [q_begin, q_begin + n_q) of a q of q_rows rows. The views point into the arenas.
struct PagedKv {
  KvLayerView kv;
  std::vector<uint8_t> karena, varena;
  std::vector<BlockId> ids;
  std::vector<AttentionSeq> seqs;
  int32_t q_rows = 0;
};

inline PagedKv random_paged_kv(KvDtype dtype, int32_t block_size, int32_t n_kv, int32_t head_dim,
                               const std::vector<std::pair<int32_t, int32_t>>& start_and_n_q, std::mt19937& rng) {
  PagedKv p;
  int32_t total_blocks = 0;
  for (const auto& [start, n_q] : start_and_n_q) total_blocks += (start + n_q + block_size - 1) / block_size;
  p.ids.resize(static_cast<size_t>(total_blocks));
  std::iota(p.ids.begin(), p.ids.end(), 0);
  std::shuffle(p.ids.begin(), p.ids.end(), rng);
  p.kv.dtype = dtype;
  p.kv.block_size = block_size;
  p.kv.n_kv_heads = n_kv;
  p.kv.head_dim = head_dim;
  p.karena.resize(static_cast<size_t>(p.kv.block_stride_bytes() * total_blocks));
  p.varena.resize(p.karena.size());
  p.kv.k = p.karena.data();
  p.kv.v = p.varena.data();
  const int32_t width = n_kv * head_dim;
  int32_t used = 0;
  for (const auto& [start, n_q] : start_and_n_q) {
    AttentionSeq a;
    a.q_begin = p.q_rows;
    a.n_q = n_q;
    a.start_pos = start;
    a.n_blocks = (start + n_q + block_size - 1) / block_size;
    a.blocks = p.ids.data() + used;
    used += a.n_blocks;
    p.q_rows += n_q;
    const int32_t n_pos = start + n_q;
    const auto k = random_floats(static_cast<size_t>(n_pos * width), rng);
    const auto v = random_floats(static_cast<size_t>(n_pos * width), rng);
    std::vector<int32_t> slots;
    for (int32_t q = 0; q < n_pos; ++q) slots.push_back(a.blocks[q / block_size] * block_size + q % block_size);
    ref::kv_store(p.kv, k.data(), v.data(), slots.data(), n_pos);
    p.seqs.push_back(a);
  }
  return p;
}

// Attention importance reference: the mass per key of sequence s, Σ over rows i >= from and heads h
// of softmax_k(q_ih · k_k · scale), in double precision from the reference K rows.
inline std::vector<double> reference_mass(const float* q, const KvLayerView& kv, const AttentionSeq& s,
                                          int32_t n_head, float scale, int32_t from) {
  const int32_t hd = kv.head_dim, group = n_head / kv.n_kv_heads, bs = kv.block_size;
  std::vector<double> mass(static_cast<size_t>(s.start_pos + s.n_q), 0.0);
  std::vector<float> krow(static_cast<size_t>(hd));
  for (int32_t i = std::max(0, from); i < s.n_q; ++i) {
    const int32_t n_keys = s.start_pos + i + 1;
    for (int32_t h = 0; h < n_head; ++h) {
      const float* qv = q + (static_cast<int64_t>(s.q_begin + i) * n_head + h) * hd;
      std::vector<double> sc(static_cast<size_t>(n_keys));
      double mx = -1e300;
      for (int32_t k = 0; k < n_keys; ++k) {
        ref::kv_row(kv, false, s.blocks[k / bs], k % bs, h / group, krow.data());
        double dot = 0;
        for (int32_t e = 0; e < hd; ++e) dot += static_cast<double>(qv[e]) * krow[static_cast<size_t>(e)];
        sc[static_cast<size_t>(k)] = dot * scale;
        mx = std::max(mx, sc[static_cast<size_t>(k)]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int32_t k = 0; k < n_keys; ++k) mass[static_cast<size_t>(k)] += sc[static_cast<size_t>(k)] / sum;
    }
  }
  return mass;
}

}  // namespace strata::cpu::test
