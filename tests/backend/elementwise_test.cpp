// The cheap kernels against their scalar references on every SIMD target.
// Bounds: rms_norm 1e-6 relative; rope 2e-6 absolute on values in [-1, 1] (the reference computes
// angles and products in double), also at positions near 10^5; silu_mul 1e-6 relative;
// add_inplace, kv_store and get_row exact (kv_store must round like core/fp16.h, NaN and
// subnormals included).
#include <gtest/gtest.h>

#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_ref.h"
#include "backend/kernel_test_util.h"
#include "gguf/quant.h"

namespace strata::cpu {
namespace {

class Elementwise : public ::testing::TestWithParam<int64_t> {};

TEST_P(Elementwise, RmsNorm) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(1);
  for (int64_t dim : {1, 7, 64, 100, 768}) {
    const int64_t rows = 5;
    const auto x = test::random_floats(static_cast<size_t>(rows * dim), rng, -3.0f, 3.0f);
    const auto w = test::random_floats(static_cast<size_t>(dim), rng);
    std::vector<float> ref(x.size()), got(x.size()), inplace = x;
    ref::rms_norm(x.data(), w.data(), ref.data(), rows, dim, 1e-5f);
    rms_norm(x.data(), w.data(), got.data(), rows, dim, 1e-5f);
    rms_norm(inplace.data(), w.data(), inplace.data(), rows, dim, 1e-5f);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6 * (std::abs(ref[i]) + 1e-3)) << dim;
    EXPECT_TRUE(test::bitwise_equal(got.data(), inplace.data(), got.size()));
  }
}

TEST_P(Elementwise, RopeNormalAndNeoxWithFreqFactors) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(2);
  const std::vector<float> factors = test::random_floats(64, rng, 1.0f, 8.0f);
  for (bool neox : {false, true}) {
    for (const float* ff : {static_cast<const float*>(nullptr), factors.data()}) {
      for (auto [head_dim, n_rot] : {std::pair<int32_t, int32_t>{64, 64}, {128, 64}, {12, 12}, {10, 6}}) {
        SCOPED_TRACE(::testing::Message() << "neox " << neox << " factors " << (ff != nullptr) << " head_dim "
                                          << head_dim << " n_rot " << n_rot);
        RopeParams p;
        p.n_rot = n_rot;
        p.freq_base = 500000.0f;
        p.freq_scale = 0.5f;
        p.neox = neox;
        p.freq_factors = ff;
        const std::vector<int32_t> pos = {0, 1, 5, 77, 4095, 99999, 3};
        const int32_t heads = 3;
        auto x = test::random_floats(pos.size() * heads * static_cast<size_t>(head_dim), rng);
        auto ref = x;
        ref::rope(ref.data(), pos.data(), static_cast<int64_t>(pos.size()), heads, head_dim, p);
        rope(x.data(), pos.data(), static_cast<int64_t>(pos.size()), heads, head_dim, p);
        EXPECT_LE(test::max_abs_diff(x, ref), 2e-6);
      }
    }
  }
}

TEST_P(Elementwise, SiluMulAndAdd) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(3);
  for (int64_t n : {1, 9, 1000}) {
    auto gate = test::random_floats(static_cast<size_t>(n), rng, -20.0f, 20.0f);
    if (n > 2) {
      gate[0] = -200.0f;  // exp(200) overflows f32: the result must still be -0-ish, not NaN
      gate[1] = 150.0f;
    }
    const auto up = test::random_floats(static_cast<size_t>(n), rng);
    auto ref = gate;
    ref::silu_mul(ref.data(), up.data(), n);
    silu_mul(gate.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(gate[i], ref[i], 1e-6 * std::abs(ref[i]) + 1e-30) << i;

    auto y = test::random_floats(static_cast<size_t>(n), rng);
    const auto x = test::random_floats(static_cast<size_t>(n), rng);
    auto expect = y;
    for (int64_t i = 0; i < n; ++i) expect[i] += x[i];
    add_inplace(y.data(), x.data(), n);
    EXPECT_TRUE(test::bitwise_equal(y.data(), expect.data(), y.size()));
  }
}

TEST_P(Elementwise, KvStoreRoundsLikeTheReference) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(4);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    KvLayerView kv;
    kv.dtype = dtype;
    kv.block_size = 7;
    kv.n_kv_heads = 3;
    kv.head_dim = 12;
    const int32_t n_blocks = 4, width = 36, n_tokens = 9;
    std::vector<uint8_t> k1(static_cast<size_t>(kv.block_stride_bytes() * n_blocks)), v1(k1.size()), k2(k1.size()),
        v2(k1.size());
    auto k = test::random_floats(static_cast<size_t>(n_tokens * width), rng, -70000.0f, 70000.0f);
    auto v = test::random_floats(k.size(), rng, -1e-6f, 1e-6f);  // f16 subnormals
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                              65519.0f, 65520.0f, 1.0009765625f + 0.00048828125f, -0.0f, 3.0e-8f, 1e-40f};
    for (size_t i = 0; i < std::size(specials); ++i) k[i * 5] = v[i * 7] = specials[i];
    const std::vector<int32_t> slots = {0, 27, 8, 13, 14, 6, 20, 1, 26};
    kv.k = k1.data();
    kv.v = v1.data();
    ref::kv_store(kv, k.data(), v.data(), slots.data(), n_tokens);
    kv.k = k2.data();
    kv.v = v2.data();
    kv_store(kv, k.data(), v.data(), slots.data(), n_tokens);
    EXPECT_EQ(k1, k2) << kv_dtype_name(dtype);
    EXPECT_EQ(v1, v2) << kv_dtype_name(dtype);
  }
}

TEST_P(Elementwise, GetRowEqualsDequantize) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(5);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    const auto m = test::random_matrix(type, 5, 256, rng);
    for (int64_t r = 0; r < 5; ++r) {
      std::vector<float> a(256), b(256);
      dequantize_row(type, m.w.data + r * m.w.row_bytes, a.data(), 256);
      get_row(m.w, r, b.data());
      EXPECT_TRUE(test::bitwise_equal(a.data(), b.data(), 256)) << ggml_type_name(type);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, Elementwise, ::testing::ValuesIn(test::targets_to_test()), test::target_param_name);

}  // namespace
}  // namespace strata::cpu
