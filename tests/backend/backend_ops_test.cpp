// Every op of the Backend interface (backend/backend.h), on the CPU backend here and on the CUDA
// backend in tests/cuda/cuda_backend_ops_test.cpp (which compiles this file with
// STRATA_OPS_TEST_CUDA, under the ctest label `cuda`; it reports SKIPPED with the reason on a
// machine without a usable GPU or in a build without CUDA), on random
// inputs of several shapes and weight types, against the scalar references (backend/cpu/
// kernels_ref.h, gguf/quant.h dequantization, kv/warm_format.h codec) — as llama.cpp's
// test-backend-ops. Inputs go to the backend and results come back through its own allocate /
// upload / copy_to_device / copy_to_host, so a device backend runs these tests unchanged: adding
// one to available_devices() adds it here.
//
// Tolerances, per op (relative to the RMS of the reference output unless said otherwise):
//   matmul, matmul_multi: F32/F16/BF16 weights max 1e-5 (f32 sums of exactly widened weights);
//     on CUDA, products of more than kGemvMaxRows rows go through cuBLAS with the activations
//     rounded to half (F16: max 3e-3) or split into bf16 hi + lo (BF16: max 5e-3) there;
//     quantized weights RMS 1e-2 and max 6e-2 (activations are quantized to 8 bits per block of
//     32 or 256, as ggml does; matmul_test.cpp pins the exact arithmetic of the CPU kernels).
//     matmul_multi gives each output the same bits as matmul() on its own.
//   embed: exact for F32/F16/BF16 tables, 1e-6 of the row's RMS for quantized ones.
//   rms_norm: 1e-6 relative per element; rope: 2e-6 absolute on values in [-1, 1] (positions up to
//     ~10^5, llama3 frequency factors, linear scaling); silu_mul: 1e-6 relative.
//   add, add_bias, gather_rows, kv_store (rounding to f16/bf16 as core/fp16.h), kv_copy_block,
//     host<->device copies: exact.
//   paged_attention: 2e-5 absolute (outputs are convex combinations of values in [-1, 1]), over
//     hot blocks of f32/f16/bf16 and tables mixing hot and warm (int8/fp8/int4) ids; tables mixing
//     hot ids and ids of blocks in host slots (--kv-offload): the bits of the all-hot table; a
//     view with a warm tier that its tables do not use: the bits of the view without one.
//   kv_warm_encode: the reference encoder's bytes; kv_warm_decode: the reference decoder's values.
//   attention importance (AttentionSeq::importance): 1e-4 absolute + 1e-4 relative of the mass
//     (the CUDA kernels use fast exp/log); kv_move_rows: exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels_ref.h"
#include "backend/cpu/quant_groups.h"
#include "backend/kernel_test_util.h"
#include "core/error.h"
#include "gguf/quant.h"
#include "kv/warm_format.h"
#include "sample/logit_kernels.h"
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
#include "backend/cuda/attention_mma_stats.h"
#include "backend/cuda/gemv_stats.h"
#endif

namespace strata {
namespace {

using cpu::test::max_abs_diff;
using cpu::test::reference_mass;
using cpu::test::random_floats;
using cpu::test::random_matrix;
using cpu::test::rms;
using cpu::test::rms_diff;

constexpr GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                                  GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
                                  GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Outputs that are NaN or infinite (max_abs_diff skips NaN: std::max(m, NaN) keeps m).
int64_t count_nonfinite(const std::vector<float>& v) {
  return std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
}

bool is_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// Host data copied into backend memory, and back.
struct DevArray {
  std::unique_ptr<DeviceBuffer> buf;
  ActView view;
};

DevArray upload(Backend& be, const std::vector<float>& host, int64_t rows, int64_t cols) {
  EXPECT_EQ(static_cast<int64_t>(host.size()), rows * cols);
  DevArray a;
  a.buf = be.allocate(host.size() * sizeof(float), MemoryUse::kActivations);
  be.copy_to_device(a.buf->data(), host.data(), host.size() * sizeof(float));
  a.view = {reinterpret_cast<float*>(a.buf->data()), rows, cols};
  return a;
}

DevArray alloc(Backend& be, int64_t rows, int64_t cols) { return upload(be, std::vector<float>(rows * cols, NAN), rows, cols); }

std::vector<float> download(Backend& be, ActView v) {
  std::vector<float> out(static_cast<size_t>(v.size()));
  be.copy_to_host(out.data(), v.data, out.size() * sizeof(float));
  return out;
}

std::vector<uint8_t> download_bytes(Backend& be, const uint8_t* p, size_t n) {
  std::vector<uint8_t> out(n);
  be.copy_to_host(out.data(), p, n);
  return out;
}

// A small vector (norm weights, biases, rope factors) as the backend holds it; `v` must outlive
// its use (the CPU backend keeps pointing at it).
const float* upload_vector(Backend& be, const std::vector<float>& v) { return be.upload_vector(v.data(), static_cast<int64_t>(v.size())); }

// One layer's KV arenas (hot, and warm when `warm` is set) on the host and the same bytes in
// backend memory; `host` reads the former (references), `dev` the latter (the backend).
struct KvLayer {
  KvLayerView host, dev;
  std::vector<uint8_t> hk, hv, hwk, hwv;
  std::unique_ptr<DeviceBuffer> dk, dv, dwk, dwv;

  KvLayer(KvDtype dtype, int32_t block_size, int32_t n_kv, int32_t head_dim, int32_t n_hot, WarmFormat warm = WarmFormat::kNone,
          int32_t warm_slots = 0) {
    host.dtype = dtype;
    host.block_size = block_size;
    host.n_kv_heads = n_kv;
    host.head_dim = head_dim;
    hk.assign(static_cast<size_t>(host.block_stride_bytes() * n_hot), 0);
    hv = hk;
    host.k = hk.data();
    host.v = hv.data();
    if (warm != WarmFormat::kNone) {
      host.n_hot_blocks = n_hot;
      host.warm_format = warm;
      host.warm_span = warm_span(warm, block_size);
      host.warm_k_slot_bytes = warm_slot_bytes(warm, false, block_size, n_kv, head_dim);
      host.warm_v_slot_bytes = warm_slot_bytes(warm, true, block_size, n_kv, head_dim);
      hwk.assign(static_cast<size_t>(host.warm_k_slot_bytes * warm_slots), 0);
      hwv.assign(static_cast<size_t>(host.warm_v_slot_bytes * warm_slots), 0);
      host.warm_k = hwk.data();
      host.warm_v = hwv.data();
    }
  }

  // Allocates the backend's copy (checking it comes zeroed) and copies the host bytes into it.
  void upload(Backend& be) {
    auto put = [&](std::unique_ptr<DeviceBuffer>& d, const std::vector<uint8_t>& h) -> uint8_t* {
      if (h.empty()) return nullptr;
      d = be.allocate(h.size(), MemoryUse::kKvCache);
      EXPECT_GE(d->bytes(), h.size());
      const auto zero = download_bytes(be, d->data(), h.size());
      EXPECT_TRUE(std::all_of(zero.begin(), zero.end(), [](uint8_t b) { return b == 0; })) << "KV memory not zeroed";
      be.copy_to_device(d->data(), h.data(), h.size());
      return d->data();
    };
    dev = host;
    dev.k = put(dk, hk);
    dev.v = put(dv, hv);
    dev.warm_k = put(dwk, hwk);
    dev.warm_v = put(dwv, hwv);
  }
};

#ifdef STRATA_OPS_TEST_CUDA
std::vector<DeviceKind> op_test_devices() { return {DeviceKind::kCuda}; }
#else
std::vector<DeviceKind> op_test_devices() { return {DeviceKind::kCpu}; }
#endif

class BackendOps : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    try {
      (void)resolve_device(GetParam());
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
    be_ = make_backend(BackendOptions{GetParam(), 3});
  }
  Backend& be() { return *be_; }
  std::unique_ptr<Backend> be_;
};

std::string device_param_name(const ::testing::TestParamInfo<DeviceKind>& info) {
  return std::string(device_kind_name(info.param));
}

// Whether the CUDA GEMV of this weight type reads x quantized to 8 bits.
bool cuda_gemv_xq(GgmlType type) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  return cuda::gemv_stats::xq_type(type);
#else
  (void)type;
  return false;
#endif
}

// Launches of the CUDA GEMVs' own 8-bit quantization of x so far (0 without CUDA).
int64_t xq_launch_count() {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  return cuda::gemv_stats::xq_launches();
#else
  return 0;
#endif
}

// A backend made with these environment variables set (a null value: unset), each restored to
// what it was afterwards, also when making it throws (the backends read their switches when they
// are made).
std::unique_ptr<Backend> backend_with_env(DeviceKind dev, std::initializer_list<std::pair<const char*, const char*>> env) {
  struct Restore {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    ~Restore() {
      for (const auto& [name, old] : saved) {
        if (old) ::setenv(name.c_str(), old->c_str(), 1);
        else ::unsetenv(name.c_str());
      }
    }
  } restore;
  for (const auto& [name, value] : env) {
    const char* old = std::getenv(name);
    restore.saved.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  return make_backend(BackendOptions{dev, 3});
}

// Types every backend must multiply by (the CPU backend multiplies by all of kAllTypes).
bool required_type(GgmlType t) {
  return is_float(t) || t == GgmlType::kQ8_0 || t == GgmlType::kQ4_K || t == GgmlType::kQ6_K;
}

void expect_matmul_close(GgmlType type, const std::vector<float>& got, const std::vector<float>& ref,
                         DeviceKind dev = DeviceKind::kCpu, int64_t n = 1) {
  const double scale = rms(ref);
  if (is_float(type)) {
    double tol = 1e-5;
    if (dev == DeviceKind::kCuda && n > 8 && type == GgmlType::kF16) tol = 3e-3;
    if (dev == DeviceKind::kCuda && n > 8 && type == GgmlType::kBF16) tol = 5e-3;
    EXPECT_LE(max_abs_diff(got, ref), tol * scale);
  } else {
    EXPECT_LE(rms_diff(got, ref), 1e-2 * scale);
    EXPECT_LE(max_abs_diff(got, ref), 6e-2 * scale);
  }
}

TEST_P(BackendOps, MatmulEveryWeightType) {
  std::mt19937 rng(11);
  for (GgmlType type : kAllTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{17, 256}, {64, 512}}) {
      if (!be().supports_matmul(type)) {
        EXPECT_FALSE(required_type(type) || GetParam() == DeviceKind::kCpu) << ggml_type_name(type);
        continue;
      }
      const auto m = random_matrix(type, rows, cols, rng);
      const WeightMatrix w = be().upload_matrix(m.w);
      for (int64_t n : {1, 5, 33}) {
        SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " [" << rows << "][" << cols << "] n " << n);
        const auto x = random_floats(static_cast<size_t>(n * cols), rng);
        std::vector<float> ref(static_cast<size_t>(n * rows));
        cpu::ref::matmul(m.w, x.data(), n, ref.data());
        const DevArray dx = upload(be(), x, n, cols);
        const DevArray dy = alloc(be(), n, rows);
        be().matmul(w, dx.view, dy.view);
        expect_matmul_close(type, download(be(), dy.view), ref, GetParam(), n);
      }
    }
  }
}

// The SiLU-gated feed-forward input in one call equals matmul_multi then silu_mul on the same
// backend, bit for bit (the CUDA backend fuses it into one GEMV for decode-sized batches), for
// every required weight type, row counts that do not fill a thread block, and batch sizes on both
// sides of the GEMV/GEMM switch.
TEST_P(BackendOps, MatmulSiluMulEqualsTheOpsOneByOne) {
  std::mt19937 rng(13);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {64, 2048}}) {
      const auto mg = random_matrix(type, rows, cols, rng);
      const auto mu = random_matrix(type, rows, cols, rng);
      const WeightMatrix wg = be().upload_matrix(mg.w), wu = be().upload_matrix(mu.w);
      for (int64_t n : {1, 3, 8, 12}) {
        SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " [" << rows << "][" << cols << "] n " << n);
        const auto x = random_floats(static_cast<size_t>(n * cols), rng);
        const DevArray dx = upload(be(), x, n, cols);
        const DevArray g1 = alloc(be(), n, rows), u1 = alloc(be(), n, rows);
        const MatmulOut outs[] = {{&wg, g1.view}, {&wu, u1.view}};
        be().matmul_multi(outs, dx.view);
        be().silu_mul(g1.view, u1.view);
        const DevArray g2 = alloc(be(), n, rows), u2 = alloc(be(), n, rows);
        be().matmul_silu_mul(wg, wu, dx.view, g2.view, u2.view);
        const auto want = download(be(), g1.view);
        EXPECT_EQ(download(be(), g2.view), want);
        // And against the CPU reference products.
        std::vector<float> rg(static_cast<size_t>(n * rows)), ru(rg.size());
        cpu::ref::matmul(mg.w, x.data(), n, rg.data());
        cpu::ref::matmul(mu.w, x.data(), n, ru.data());
        for (size_t i = 0; i < rg.size(); ++i) rg[i] = rg[i] / (1.0f + std::exp(-rg[i])) * ru[i];
        EXPECT_LE(rms_diff(want, rg), 2e-2 * rms(rg));
      }
    }
  }
}

// Prefill-sized products take 16-bit activations. The CUDA backend has rms_norm, add_rms_norm and
// silu_mul write that rounding beside their f32 result, and the next matmul reads it instead of
// converting again. The product must equal the product of a fresh upload of the same floats, and
// still after another op changed the array (the half copy must then be forgotten, not reused).
TEST_P(BackendOps, MatmulAfterANormOrSiluEqualsMatmulOfTheSameFloats) {
  std::mt19937 rng(15);
  const int64_t rows = 33, cols = 256, out_rows = 64;
  const auto m = random_matrix(GgmlType::kF16, out_rows, cols, rng);
  const WeightMatrix w = be().upload_matrix(m.w);
  const auto wt = random_floats(static_cast<size_t>(cols), rng);
  const float* dw = upload_vector(be(), wt);
  const DevArray x = upload(be(), random_floats(static_cast<size_t>(rows * cols), rng, -3.0f, 3.0f), rows, cols);
  const DevArray d = upload(be(), random_floats(static_cast<size_t>(rows * cols), rng), rows, cols);
  const DevArray up = upload(be(), random_floats(static_cast<size_t>(rows * cols), rng), rows, cols);
  const DevArray h = alloc(be(), rows, cols), fresh = alloc(be(), rows, cols);
  const DevArray y1 = alloc(be(), rows, out_rows), y2 = alloc(be(), rows, out_rows);
  be().matmul(w, x.view, y1.view);  // a half-activation product first, as in a prefill
  auto expect_same_as_fresh = [&](const char* what) {
    SCOPED_TRACE(what);
    be().matmul(w, h.view, y1.view);
    const auto got = download(be(), y1.view);
    const auto hv = download(be(), h.view);
    be().copy_to_device(fresh.buf->data(), hv.data(), hv.size() * sizeof(float));
    be().matmul(w, fresh.view, y2.view);
    EXPECT_EQ(got, download(be(), y2.view));
  };
  for (int changed = 0; changed < 2; ++changed) {
    be().rms_norm(x.view, dw, h.view, 1e-5f);
    if (changed) be().add(h.view, d.view);
    expect_same_as_fresh(changed ? "rms_norm, then add" : "rms_norm");
    be().add_rms_norm(x.view, d.view, dw, h.view, 1e-5f);
    if (changed) be().rms_norm(d.view, dw, d.view, 1e-5f);  // another array's copy replaces h's
    if (changed) be().add(h.view, x.view);
    expect_same_as_fresh(changed ? "add_rms_norm, then add" : "add_rms_norm");
    be().copy_to_device(h.buf->data(), download(be(), x.view).data(), static_cast<size_t>(rows * cols) * sizeof(float));
    be().silu_mul(h.view, up.view);
    if (changed) be().add(h.view, d.view);
    expect_same_as_fresh(changed ? "silu_mul, then add" : "silu_mul");
  }
}

// Long rows (16 KB and more: the CUDA GEMV streams each with several warps and adds their partial
// sums): every weight type against the CPU reference, and a row's result the same whatever
// batch (n) it is computed in, bit for bit.
TEST_P(BackendOps, MatmulLongRowsAndBatchInvariance) {
  std::mt19937 rng(16);
  const std::pair<GgmlType, int64_t> shapes[] = {{GgmlType::kF32, 4096},   {GgmlType::kF16, 8192},
                                                 {GgmlType::kBF16, 8192},  {GgmlType::kQ8_0, 16384},
                                                 {GgmlType::kQ4_K, 32768}, {GgmlType::kQ6_K, 32768}};
  for (auto [type, cols] : shapes) {
    const int64_t rows = 6;
    const auto m = random_matrix(type, rows, cols, rng);
    const WeightMatrix w = be().upload_matrix(m.w);
    const int64_t n_max = 8;
    const auto x = random_floats(static_cast<size_t>(n_max * cols), rng);
    const DevArray dx = upload(be(), x, n_max, cols);
    std::vector<float> ref(static_cast<size_t>(n_max * rows));
    cpu::ref::matmul(m.w, x.data(), n_max, ref.data());
    std::vector<float> first_rows;  // results of x row 0 at n = 1
    for (int64_t n : {1, 3, 8}) {
      SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " cols " << cols << " n " << n);
      const DevArray dy = alloc(be(), n, rows);
      be().matmul(w, ActView{dx.view.data, n, cols}, dy.view);
      const auto got = download(be(), dy.view);
      expect_matmul_close(type, got, std::vector<float>(ref.begin(), ref.begin() + n * rows), GetParam(), n);
      const std::vector<float> row0(got.begin(), got.begin() + rows);
      if (first_rows.empty()) first_rows = row0;
      EXPECT_EQ(row0, first_rows) << "x row 0 gives another result in a batch of " << n;
    }
  }
}

// Q4_K, Q6_K and Q8_0 GEMVs on CUDA (unless STRATA_CUDA_GEMV_Q8X says otherwise) read x quantized to 8 bits
// in groups of 32 (one launch before each GEMV): the plain and the fused gate/up forms take that path (launch counter), stay within
// the quantized types' tolerance of the CPU reference on an x whose groups differ in magnitude
// by 10^7, the fused form gives the plain products' SiLU-gate bits, and a row's result is the
// same bits alone and in a batch of 8.
TEST_P(BackendOps, QuantizedXGemvEveryForm) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  if (!cuda_gemv_xq(GgmlType::kQ4_K)) GTEST_SKIP() << "STRATA_CUDA_GEMV_Q8X=0: the GEMVs read the f32 x";
  // (ctest runs the suite's matmul tests once more with STRATA_CUDA_GEMV_Q8X=0: the f32 x.)
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    if (!cuda_gemv_xq(type)) continue;
    SCOPED_TRACE(ggml_type_name(type));
    std::mt19937 rng(23);
    const int64_t rows = 40, cols = 2048;
    const auto mg = random_matrix(type, rows, cols, rng), mu = random_matrix(type, rows, cols, rng);
    const WeightMatrix wg = be().upload_matrix(mg.w), wu = be().upload_matrix(mu.w);
    // x with groups of very different magnitudes (each group's own scale), zeros and one huge group.
    auto x = random_floats(static_cast<size_t>(8 * cols), rng, -2.0f, 2.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      if ((i / 32) % 5 == 1) x[i] *= 1e-3f;
      if ((i / 32) % 7 == 3) x[i] = 0.0f;
      if (i / 32 == 9) x[i] *= 1e4f;
    }
    std::vector<float> rg(static_cast<size_t>(8 * rows)), ru(rg.size());
    cpu::ref::matmul(mg.w, x.data(), 8, rg.data());
    cpu::ref::matmul(mu.w, x.data(), 8, ru.data());
    const DevArray dx = upload(be(), x, 8, cols);
    std::vector<float> alone_g, alone_f;
    for (int64_t n : {1, 8}) {
      SCOPED_TRACE(::testing::Message() << "n " << n);
      const ActView xv{dx.view.data, n, cols};
      const DevArray g = alloc(be(), n, rows), u = alloc(be(), n, rows), f = alloc(be(), n, rows), fu = alloc(be(), n, rows);
      const int64_t launches0 = cuda::gemv_stats::xq_launches();
      const MatmulOut outs[] = {{&wg, g.view}, {&wu, u.view}};
      be().matmul_multi(outs, xv);
      be().matmul_silu_mul(wg, wu, xv, f.view, fu.view);
      EXPECT_EQ(cuda::gemv_stats::xq_launches() - launches0, 2) << "one quantization per GEMV launch";
      const auto got_g = download(be(), g.view), got_u = download(be(), u.view), got_f = download(be(), f.view);
      expect_matmul_close(type, got_g, std::vector<float>(rg.begin(), rg.begin() + n * rows), GetParam(), n);
      expect_matmul_close(type, got_u, std::vector<float>(ru.begin(), ru.begin() + n * rows), GetParam(), n);
      be().silu_mul(g.view, u.view);
      EXPECT_EQ(got_f, download(be(), g.view)) << "the fused gate/up GEMV computes the same products";
      if (n == 1) {
        alone_g = got_g;
        alone_f = got_f;
      } else {
        EXPECT_EQ(std::vector<float>(got_g.begin(), got_g.begin() + rows), alone_g) << "row 0 alone and in a batch of 8";
        EXPECT_EQ(std::vector<float>(got_f.begin(), got_f.begin() + rows), alone_f);
      }
    }
  }
#else
  GTEST_SKIP() << "the CUDA GEMV only";
#endif
}

// The CUDA backend's A/B switches: an unknown value stops the backend with an error that names the
// variable; the values the README lists are taken.
TEST_P(BackendOps, CudaSwitchesRejectUnknownValues) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  const std::pair<const char*, const char*> bad[] = {
      {"STRATA_CUDA_GEMV_EARLY_TRIGGER", "yes"}, {"STRATA_CUDA_XQ_STAGE_SLOTS", "3"}, {"STRATA_CUDA_GEMV_STAGED", "2"},
      {"STRATA_CUDA_SIDE_PREFETCH", "yes"},      {"STRATA_CUDA_SIDE_PREFETCH_MB", "0"},  {"STRATA_CUDA_SIDE_PREFETCH_BLOCKS", "x"}};
  for (const auto& [name, value] : bad) {
    try {
      backend_with_env(GetParam(), {{name, value}});
      ADD_FAILURE() << name << "=" << value << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  for (const char* v : {"0", "q4_k", "all"}) {
    EXPECT_NO_THROW(backend_with_env(GetParam(), {{"STRATA_CUDA_GEMV_EARLY_TRIGGER", v}})) << v;
  }
  for (const char* v : {"auto", "0", "bulk", "line"}) {
    EXPECT_NO_THROW(backend_with_env(GetParam(), {{"STRATA_CUDA_SIDE_PREFETCH", v}})) << v;
  }
#else
  GTEST_SKIP() << "the CUDA backend's switches";
#endif
}

// One-row producers that write the next GEMV's 8-bit x (cuda::GemvXq::out): the lazy-norm producer
// (O, down), the SwiGLU GEMV times r and plain, each followed by the GEMV that reads its output, on
// backends with them (STRATA_CUDA_XQ_OUT=1: blocks of 32 warps of one row; =2: 16 warps of two;
// unset: the default, which must write them too, staged for Q4_K, Q6_K and Q8_0; =s, s2, s4: the staged form, weights copied into
// shared memory, where they fit, by default a block's 32 rows at once where they fit in one wave of
// blocks, else through a ring of two 8-row slots (chunks copied after others are consumed), but for
// Q4_K where the 32 rows do not fit at all the register form; STRATA_CUDA_XQ_STAGE_SLOTS=2: the ring,
// =4: the 32 rows, wherever they fit, =auto-ring: the ring for Q4_K too) and one without (=0, where each of those GEMVs
// quantizes its x by a launch of its own): every output the same bits, and the launches as planned
// (4 producers wrote the 8-bit form, 4 quantizations fewer). Shapes: the producers' rows 2048 and
// 4096 (multiples of 32, one block per 32), a 1,024-wide model whose rows take one, two and more
// than two pieces per lane (1,024 / 2,048 / 2,816 columns), and a 256-wide one (cuda_model_test's
// width: rows of one weight block), llama-1b's FFN of 8,192 (staged or not by its size) and a
// Llama-3-8B's of 14,336 (a down projection whose 32 rows do not fit shared memory); a SwiGLU
// of 40 rows (not a multiple of 32) keeps the launch of its own.
TEST_P(BackendOps, QuantizedXWrittenByProducers) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  if (!cuda_gemv_xq(GgmlType::kQ4_K)) GTEST_SKIP() << "STRATA_CUDA_GEMV_Q8X=0: the GEMVs read the f32 x";
  auto make = [&](const char* xq_out, const char* gemv_staged = "0") {  // null: the variable unset (the default)
    // The lazy norm for every weight type (Q6_K and Q8_0 too).
    return backend_with_env(GetParam(), {{"STRATA_CUDA_LAZY_NORM", "1"}, {"STRATA_CUDA_XQ_OUT", xq_out},
                                         {"STRATA_CUDA_GEMV_STAGED", gemv_staged}});
  };
  const std::unique_ptr<Backend> on = make("1"), on2 = make("2"), def = make(nullptr, nullptr), off = make("0");
  const std::unique_ptr<Backend> st = make("s"), st2 = make("s2"), st4 = make("s4"), stg = make("s", "1");
  // The staged producers' shared memory forced to a ring of two 8-row slots, and to the whole 32 rows;
  // "auto", the default, named; and "auto-ring" (the ring where the 32 rows do not fit).
  auto make_slots = [&](const char* slots) {
    return backend_with_env(GetParam(), {{"STRATA_CUDA_LAZY_NORM", "1"}, {"STRATA_CUDA_XQ_OUT", "s"},
                                         {"STRATA_CUDA_GEMV_STAGED", "0"}, {"STRATA_CUDA_XQ_STAGE_SLOTS", slots}});
  };
  const std::unique_ptr<Backend> ring = make_slots("2"), whole = make_slots("4"), chosen = make_slots("auto");
  const std::unique_ptr<Backend> auto_ring = make_slots("auto-ring");
  const float eps = 1e-5f;
  struct Shape {
    int64_t d, ffn;
  };
  // The staged producers (STRATA_CUDA_XQ_OUT=s...) take a launch where 16 of its block's rows (a
  // ring of two 8-row slots; of both matrices for the SwiGLU) fit the shared memory an sm_90 block
  // may opt into (227 KB) less 1 KB with STRATA_CUDA_XQ_STAGE_SLOTS=2 or auto-ring, and by default
  // (auto) for Q6_K and Q8_0, else (=4, and Q4_K's by default) all 32; the others keep the register
  // form: at 32 rows, Q8_0's down of 8,192 columns (32 rows of 8,704 B), Q4_K's of 14,336 (8,064 B).
  auto expected_staged = [](GgmlType t, int64_t d, int64_t ffn, int64_t rows_at_once = 16) {
    auto row_bytes = [t](int64_t cols) {
      return t == GgmlType::kQ4_K ? cols / 256 * 144 : t == GgmlType::kQ6_K ? cols / 256 * 210 : cols / 32 * 34;
    };
    const int64_t limit = 232448 - 1024;
    const int64_t n = rows_at_once;
    const int64_t glu = 2 * n * row_bytes(d) <= limit ? 2 : 0;  // gate/up times r, the plain one
    const int64_t fits_d = n * row_bytes(d) <= limit ? 1 : 0, fits_f = n * row_bytes(ffn) <= limit ? 1 : 0;
    // The float GEMVs stage a block's 32 rows at once, never a ring.
    const int64_t fits_d32 = 32 * row_bytes(d) <= limit ? 1 : 0, fits_f32 = 32 * row_bytes(ffn) <= limit ? 1 : 0;
    // The producers (O, the two SwiGLUs, down), then the GEMVs that write floats
    // (STRATA_CUDA_GEMV_STAGED=1: the QKV-like one, the plain down, the last O-shaped one).
    return std::pair<int64_t, int64_t>{fits_d + glu + fits_f, fits_d32 + fits_f32 + fits_d32};
  };
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    if (!cuda_gemv_xq(type)) continue;
    // 256: cuda_model_test's width; 8,192: llama-1b's FFN (Q8_0's down staged through the ring only);
    // 14,336: a Llama-3-8B's (down through the ring (Q6_K), in the register form (Q4_K by default, Q8_0))
    for (const Shape sh :
         {Shape{2048, 4096}, Shape{1024, 2816}, Shape{256, 512}, Shape{1024, 8192}, Shape{1024, 14336}}) {
      SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " d " << sh.d << " ffn " << sh.ffn);
      std::mt19937 rng(31);
      const int64_t D = sh.d, F = sh.ffn, rq = 64, rs = 40;
      const auto mo = random_matrix(type, D, D, rng), mg = random_matrix(type, F, D, rng), mu = random_matrix(type, F, D, rng);
      const auto md = random_matrix(type, D, F, rng), mq = random_matrix(type, rq, D, rng);
      const auto msg = random_matrix(type, rs, D, rng), msu = random_matrix(type, rs, D, rng);
      const auto g1 = random_floats(static_cast<size_t>(D), rng, -1.5f, 1.5f), g2 = random_floats(static_cast<size_t>(D), rng, -1.5f, 1.5f);
      const auto a = random_floats(static_cast<size_t>(D), rng, -2.0f, 2.0f);
      const auto x0 = random_floats(static_cast<size_t>(D), rng, -4.0f, 4.0f);
      struct Got {
        std::vector<std::vector<float>> outs;
        int64_t xq_launches = 0, xq_out_launches = 0, xq_staged_launches = 0, gemv_staged_launches = 0;
      };
      auto run = [&](Backend& b) {
        const WeightMatrix wo = b.upload_matrix(mo.w), wg = b.upload_matrix(mg.w), wu = b.upload_matrix(mu.w);
        const WeightMatrix wd = b.upload_matrix(md.w), wq = b.upload_matrix(mq.w);
        const WeightMatrix wsg = b.upload_matrix(msg.w), wsu = b.upload_matrix(msu.w);
        const float* dg1 = upload_vector(b, g1);
        const float* dg2 = upload_vector(b, g2);
        const DevArray da = upload(b, a, 1, D), dx = upload(b, x0, 1, D), dd = alloc(b, 1, D), dh = alloc(b, 1, D);
        const DevArray df = alloc(b, 1, F), du = alloc(b, 1, F), dh2 = alloc(b, 1, D), dq = alloc(b, 1, rq);
        const DevArray df2 = alloc(b, 1, F), du2 = alloc(b, 1, F), dy = alloc(b, 1, D), ds = alloc(b, 1, rs), dsu = alloc(b, 1, rs);
        const DevArray dy2 = alloc(b, 1, D);
        const int64_t q0 = cuda::gemv_stats::xq_launches(), o0 = cuda::gemv_stats::xq_out_launches();
        const int64_t s0 = cuda::gemv_stats::xq_staged_launches(), g0 = cuda::gemv_stats::gemv_staged_launches();
        PendingNorm n1 = b.matmul_add_rms_norm(wo, da.view, dd.view, dx.view, dg1, dh.view, eps, true);  // O
        EXPECT_TRUE(n1.pending());
        b.matmul_silu_mul_normed(wg, wu, dh.view, n1, df.view, du.view);  // gate/up times r
        b.resolve_norm(dh.view, n1);
        PendingNorm n2 = b.matmul_add_rms_norm(wd, df.view, dd.view, dx.view, dg2, dh2.view, eps, true);  // down
        EXPECT_TRUE(n2.pending());
        const MatmulOut qo[] = {{&wq, dq.view}};
        b.matmul_multi_normed(qo, dh2.view, n2);  // QKV-like
        b.resolve_norm(dh2.view, n2);
        b.matmul_silu_mul(wg, wu, dh2.view, df2.view, du2.view);  // the plain SwiGLU
        b.matmul(wd, df2.view, dy.view);
        b.matmul_silu_mul(wsg, wsu, dh2.view, ds.view, dsu.view);  // 40 rows: a launch of its own
        b.matmul(wo, dh2.view, dy2.view);
        Got got;
        got.xq_launches = cuda::gemv_stats::xq_launches() - q0;
        got.xq_out_launches = cuda::gemv_stats::xq_out_launches() - o0;
        got.xq_staged_launches = cuda::gemv_stats::xq_staged_launches() - s0;
        got.gemv_staged_launches = cuda::gemv_stats::gemv_staged_launches() - g0;
        for (const DevArray* o : {&dx, &dh, &df, &dh2, &dq, &df2, &dy, &ds, &dy2}) got.outs.push_back(download(b, o->view));
        return got;
      };
      const Got without = run(*off);
      EXPECT_EQ(without.xq_out_launches, 0);
      // Without: a, h, f, h2 (QKV), h2 (SwiGLU), f2, h2 (40 rows), h2 (the last matmul).
      EXPECT_EQ(without.xq_launches, 8);
      for (Backend* b : {on.get(), on2.get(), def.get(), st.get(), st2.get(), st4.get(), stg.get(), ring.get(), whole.get(),
                         chosen.get(), auto_ring.get()}) {
        // The default stages Q4_K's, Q6_K's and Q8_0's producers and float GEMVs.
        const bool by_default = b == def.get();
        const bool staged = b == st.get() || b == st2.get() || b == st4.get() || b == stg.get() || by_default ||
                            b == ring.get() || b == whole.get() || b == chosen.get() || b == auto_ring.get();
        SCOPED_TRACE(b == on.get()       ? "one row per warp"
                     : b == on2.get()    ? "two rows per warp"
                     : b == def.get()    ? "the default"
                     : b == st.get()     ? "staged"
                     : b == st2.get()    ? "staged, two rows per warp"
                     : b == st4.get()    ? "staged, four rows per warp"
                     : b == ring.get()   ? "staged through a ring of two slots"
                     : b == whole.get()  ? "staged, a block's 32 rows at once"
                     : b == chosen.get() ? "staged, the slots chosen per launch"
                     : b == auto_ring.get() ? "staged, the slots chosen per launch, the ring where the rows do not fit"
                                         : "staged, and the GEMVs that write floats");
        const Got with = run(*b);
        EXPECT_EQ(with.xq_out_launches, 4) << "O, gate/up times r, down, the plain gate/up";
        const int64_t rows_at_once =
            b == ring.get() || b == auto_ring.get() ? 16 : b == whole.get() || type == GgmlType::kQ4_K ? 32 : 16;
        if (staged) EXPECT_EQ(with.xq_staged_launches, expected_staged(type, sh.d, sh.ffn, rows_at_once).first) << "staged launches";
        else EXPECT_EQ(with.xq_staged_launches, 0);
        EXPECT_EQ(with.gemv_staged_launches, b == stg.get() || by_default ? expected_staged(type, sh.d, sh.ffn).second : 0);
        // With: a, h2 (SwiGLU), h2 (40 rows), h2 (the last matmul).
        EXPECT_EQ(with.xq_launches, 4);
        ASSERT_EQ(with.outs.size(), without.outs.size());
        for (size_t i = 0; i < with.outs.size(); ++i) {
          EXPECT_EQ(count_nonfinite(with.outs[i]), 0) << "output " << i;
          EXPECT_EQ(with.outs[i], without.outs[i]) << "output " << i << " (x, h, f, h2, q, f2, y, s, y2)";
        }
      }
    }
  }
#else
  GTEST_SKIP() << "the CUDA GEMV only";
#endif
}

// The staged float GEMVs over the f32 x (STRATA_CUDA_GEMV_STAGED=1; F16/BF16, and Q8_0 where its
// GEMVs read the f32 x): the lazy norm's consumer (QKV-like, three matrices in one launch) and a
// plain GEMV (LM-head-like) give the bits of the register form, where a block's 32 rows fit shared
// memory (an sm_90 block may opt into 227 KB, less 1 KB); wider rows keep the register form.
TEST_P(BackendOps, StagedFloatGemvsGiveTheRegisterBits) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  auto make = [&](const char* gemv_staged) {  // the lazy norm for every weight type
    return backend_with_env(GetParam(), {{"STRATA_CUDA_LAZY_NORM", "1"}, {"STRATA_CUDA_GEMV_STAGED", gemv_staged}});
  };
  const std::unique_ptr<Backend> off = make("0"), on = make("1");
  const float eps = 1e-5f;
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0}) {
    if (cuda_gemv_xq(type)) continue;  // (Q8_0 on 8-bit x, its default: the test above; ctest runs this with STRATA_CUDA_GEMV_Q8X=0)
    for (const int64_t D : {int64_t{2048}, int64_t{256}, int64_t{1024}, int64_t{4096}}) {
      SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " d " << D);
      std::mt19937 rng(37);
      const auto mo = random_matrix(type, D, D, rng), mq = random_matrix(type, 64, D, rng);
      const auto mk = random_matrix(type, 32, D, rng), mv = random_matrix(type, 32, D, rng);
      const auto mh = random_matrix(type, 96, D, rng);
      const auto g1 = random_floats(static_cast<size_t>(D), rng, -1.5f, 1.5f);
      const auto a = random_floats(static_cast<size_t>(D), rng, -2.0f, 2.0f);
      const auto x0 = random_floats(static_cast<size_t>(D), rng, -4.0f, 4.0f);
      auto run = [&](Backend& b, int64_t& staged) {
        const WeightMatrix wo = b.upload_matrix(mo.w), wq = b.upload_matrix(mq.w), wk = b.upload_matrix(mk.w);
        const WeightMatrix wv = b.upload_matrix(mv.w), wh = b.upload_matrix(mh.w);
        const float* dg1 = upload_vector(b, g1);
        const DevArray da = upload(b, a, 1, D), dx = upload(b, x0, 1, D), dd = alloc(b, 1, D), dh = alloc(b, 1, D);
        const DevArray dq = alloc(b, 1, 64), dk = alloc(b, 1, 32), dv = alloc(b, 1, 32), dy = alloc(b, 1, 96);
        const int64_t g0 = cuda::gemv_stats::gemv_staged_launches();
        PendingNorm n1 = b.matmul_add_rms_norm(wo, da.view, dd.view, dx.view, dg1, dh.view, eps, true);  // O
        EXPECT_TRUE(n1.pending());
        const MatmulOut qkv[] = {{&wq, dq.view}, {&wk, dk.view}, {&wv, dv.view}};
        b.matmul_multi_normed(qkv, dh.view, n1);  // QKV-like
        b.resolve_norm(dh.view, n1);
        b.matmul(wh, dh.view, dy.view);  // LM-head-like
        staged = cuda::gemv_stats::gemv_staged_launches() - g0;
        std::vector<std::vector<float>> outs;
        for (const DevArray* o : {&dx, &dh, &dq, &dk, &dv, &dy}) outs.push_back(download(b, o->view));
        return outs;
      };
      int64_t staged_off = 0, staged_on = 0;
      const auto want = run(*off, staged_off), got = run(*on, staged_on);
      EXPECT_EQ(staged_off, 0);
      const int64_t row_bytes = type == GgmlType::kQ8_0 ? D / 32 * 34 : 2 * D;
      EXPECT_EQ(staged_on, 32 * row_bytes <= 232448 - 1024 ? 2 : 0) << "the QKV-like launch and the plain one";
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(count_nonfinite(got[i]), 0) << "output " << i;
        EXPECT_EQ(got[i], want[i]) << "output " << i << " (x, h, q, k, v, y)";
      }
    }
  }
#else
  GTEST_SKIP() << "the CUDA GEMV only";
#endif
}

TEST_P(BackendOps, MatmulMultiMatchesSeparateMatmuls) {
  std::mt19937 rng(12);
  const int64_t cols = 512;
  const GgmlType types[] = {GgmlType::kQ4_K, GgmlType::kF16, GgmlType::kQ8_0};
  const int64_t rows[] = {48, 16, 31};
  std::vector<cpu::test::TestMatrix> ms;
  std::vector<WeightMatrix> ws;
  for (int i = 0; i < 3; ++i) {
    ms.push_back(random_matrix(types[i], rows[i], cols, rng));
    ws.push_back(be().upload_matrix(ms.back().w));
  }
  for (int64_t n : {1, 7, 40}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto x = random_floats(static_cast<size_t>(n * cols), rng);
    const DevArray dx = upload(be(), x, n, cols);
    std::vector<DevArray> ys;
    std::vector<MatmulOut> outs;
    for (int i = 0; i < 3; ++i) {
      ys.push_back(alloc(be(), n, rows[i]));
      outs.push_back({&ws[static_cast<size_t>(i)], ys.back().view});
    }
    be().matmul_multi(outs, dx.view);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> ref(static_cast<size_t>(n * rows[i]));
      cpu::ref::matmul(ms[static_cast<size_t>(i)].w, x.data(), n, ref.data());
      const auto got = download(be(), ys[static_cast<size_t>(i)].view);
      expect_matmul_close(types[i], got, ref, GetParam(), n);
      const DevArray alone = alloc(be(), n, rows[i]);
      be().matmul(ws[static_cast<size_t>(i)], dx.view, alone.view);
      EXPECT_EQ(download(be(), alone.view), got) << ggml_type_name(types[i]) << ": matmul_multi differs from matmul";
    }
  }
}

// The lazy norm of decode steps (Backend::matmul_add_rms_norm and the *_normed consumers; CUDA
// with STRATA_CUDA_LAZY_NORM=1, set here before the backend is made): the O/down projection with
// the residual add and the next RMSNorm, then the QKV-like matmul_multi and the SwiGLU GEMV of the
// normed rows, against the CPU references of the old ops (matmul, add + rms_norm, matmul,
// silu_mul), for the decode path's weight types, rows 1..8, norm widths 512/2048/8192 (producer
// rows of 8192 and 256 columns, consumers of 64 + 24 and 2 x 40 rows).
// Tolerances (relative to the reference's RMS): x - x0 as matmul's (expect_matmul_close); h and
// the products: F32/F16/BF16 max 1e-4, quantized RMS 3e-2 and max 1.5e-1 (two chained products,
// each with its activation quantization on the CPU); twice those for silu(gate) * up. Negative control: the same outputs without
// the 1/RMS factor (x0 is in [-4, 4], so r is far from 1) miss the reference by more than ten
// times the tolerance, so a lost or wrong r fails. On CUDA also: the lazy path was taken (launch
// counters, a pending norm), x is bit-identical to the old ops on a backend with the switch off,
// h and the products within 1e-5 of theirs, and a second run gives the same bits. On both: the
// first row alone gives the same bits as in the batch (batch invariance, as matmul's; the
// SwiGLU output on CUDA only).
TEST_P(BackendOps, LazyNormEqualsTheOpsOneByOne) {
  std::unique_ptr<Backend> plain = backend_with_env(GetParam(), {{"STRATA_CUDA_LAZY_NORM", "0"}});
  std::unique_ptr<Backend> lazy = backend_with_env(GetParam(), {{"STRATA_CUDA_LAZY_NORM", "1"}});
  const bool cuda = GetParam() == DeviceKind::kCuda;
  if (cuda) {
    EXPECT_TRUE(lazy->supports_lazy_norm(1) && lazy->supports_lazy_norm(8));
    EXPECT_FALSE(lazy->supports_lazy_norm(9));
    EXPECT_FALSE(plain->supports_lazy_norm(1));
  }
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  const int64_t producers0 = cuda::gemv_stats::norm_producer_launches();
  const int64_t consumers0 = cuda::gemv_stats::norm_consumer_launches();
  int64_t lazy_steps = 0;
#endif
  std::mt19937 rng(21);
  const float eps = 1e-5f;
  struct Shape {
    int64_t width, in_cols;
  };
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    // {256, 512}: the width of cuda_model_test's models (Q6_K's one-token logits there were wrong with
    // STRATA_CUDA_GEMV_Q8X=all and the lazy norm on an H100, 2026-12-06, while these shapes passed).
    for (const Shape sh : {Shape{512, 8192}, Shape{2048, 512}, Shape{8192, 256}, Shape{256, 512}}) {
      const int64_t D = sh.width, K = sh.in_cols, rq = 64, rk = 24, rf = 40;
      const auto mo = random_matrix(type, D, K, rng);
      const auto mq = random_matrix(type, rq, D, rng), mk = random_matrix(type, rk, D, rng);
      const auto mg = random_matrix(type, rf, D, rng), mu = random_matrix(type, rf, D, rng);
      const auto g = random_floats(static_cast<size_t>(D), rng, -1.5f, 1.5f);
      struct Dev {
        Backend* be;
        WeightMatrix wo, wq, wk, wg, wu;
        const float* g;
      };
      auto make_dev = [&](Backend& b) {
        return Dev{&b, b.upload_matrix(mo.w), b.upload_matrix(mq.w), b.upload_matrix(mk.w), b.upload_matrix(mg.w),
                   b.upload_matrix(mu.w), upload_vector(b, g)};
      };
      const Dev dl = make_dev(*lazy), dp = make_dev(*plain);
      for (int64_t n = 1; n <= 8; ++n) {
        SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " width " << D << " in " << K << " n " << n);
        const auto a = random_floats(static_cast<size_t>(n * K), rng);
        const auto x0 = random_floats(static_cast<size_t>(n * D), rng, -4.0f, 4.0f);
        // References: the old ops on the CPU.
        std::vector<float> d(static_cast<size_t>(n * D)), x1(d.size()), h(d.size()), hg(d.size());
        cpu::ref::matmul(mo.w, a.data(), n, d.data());
        for (size_t i = 0; i < d.size(); ++i) x1[i] = x0[i] + d[i];
        cpu::ref::rms_norm(x1.data(), g.data(), h.data(), n, D, eps);
        for (size_t i = 0; i < d.size(); ++i) hg[i] = x1[i] * g[static_cast<size_t>(i % D)];  // h without 1/RMS
        auto products = [&](const std::vector<float>& in) {
          std::vector<float> q(static_cast<size_t>(n * rq)), k(static_cast<size_t>(n * rk)), gt(static_cast<size_t>(n * rf)),
              up(gt.size());
          cpu::ref::matmul(mq.w, in.data(), n, q.data());
          cpu::ref::matmul(mk.w, in.data(), n, k.data());
          cpu::ref::matmul(mg.w, in.data(), n, gt.data());
          cpu::ref::matmul(mu.w, in.data(), n, up.data());
          const std::vector<float> gate = gt;
          cpu::ref::silu_mul(gt.data(), up.data(), static_cast<int64_t>(gt.size()));
          return std::array<std::vector<float>, 5>{q, k, gt, gate, up};
        };
        const auto ref = products(h);
        const auto unnormed = products(hg);

        struct Out {
          std::vector<float> x, h, q, k, f;
          bool pending = false;
        };
        // The sequence over the first `rows` rows of the inputs.
        auto run = [&](const Dev& dv, int64_t rows) {
          Backend& b = *dv.be;
          const std::vector<float> ar(a.begin(), a.begin() + rows * K), xr(x0.begin(), x0.begin() + rows * D);
          const DevArray da = upload(b, ar, rows, K), dx = upload(b, xr, rows, D), dd = alloc(b, rows, D), dh = alloc(b, rows, D);
          const DevArray dq = alloc(b, rows, rq), dk = alloc(b, rows, rk), dg = alloc(b, rows, rf), du = alloc(b, rows, rf);
          PendingNorm norm =
              b.matmul_add_rms_norm(dv.wo, da.view, dd.view, dx.view, dv.g, dh.view, eps, b.supports_lazy_norm(rows));
          Out o;
          o.pending = norm.pending();
          const MatmulOut qk[] = {{&dv.wq, dq.view}, {&dv.wk, dk.view}};
          b.matmul_multi_normed(qk, dh.view, norm);
          b.matmul_silu_mul_normed(dv.wg, dv.wu, dh.view, norm, dg.view, du.view);
          b.resolve_norm(dh.view, norm);
          EXPECT_FALSE(norm.pending());
          o.x = download(b, dx.view);
          o.h = download(b, dh.view);
          o.q = download(b, dq.view);
          o.k = download(b, dk.view);
          o.f = download(b, dg.view);
          return o;
        };
        const Out got = run(dl, n);
        EXPECT_EQ(got.pending, cuda);
        std::vector<float> gd(got.x.size());
        for (size_t i = 0; i < gd.size(); ++i) gd[i] = got.x[i] - x0[i];
        expect_matmul_close(type, gd, d, GetParam(), n);
        const double tol_max = is_float(type) ? 1e-4 : 1.5e-1, tol_rms = is_float(type) ? 1e-4 : 3e-2;
        const std::pair<const std::vector<float>*, const std::vector<float>*> cmp[] = {
            {&got.h, &h}, {&got.q, &ref[0]}, {&got.k, &ref[1]}, {&got.f, &ref[2]}};
        // silu(a) b carries the errors of two products, each of the size of a's and b's values
        // (|silu'| < 1.1), not of their product's: where a is very negative, silu(a) is tiny and
        // its relative error large. So its scale is 2 rms(a) rms(b) (the quantized types' 8-bit x
        // made a 40-value silu(a) b off by 2.9-6.9% of its own rms, within 1-2% of that scale).
        const double f_scale = 2.0 * rms(ref[3]) * rms(ref[4]);
        auto scale = [&](size_t j, const std::vector<float>& want) { return j == 3 ? f_scale : rms(want); };
        for (size_t j = 0; j < 4; ++j) {
          const auto& [out, want] = cmp[j];
          SCOPED_TRACE(::testing::Message() << "output " << "hqkf"[j]);
          EXPECT_EQ(count_nonfinite(*out), 0);
          EXPECT_LE(max_abs_diff(*out, *want), tol_max * scale(j, *want));
          EXPECT_LE(rms_diff(*out, *want), tol_rms * scale(j, *want));
        }
        // Negative control: without the 1/RMS factor the products are far outside the tolerance.
        for (size_t j = 0; j < 3; ++j) {
          EXPECT_GT(rms_diff(unnormed[j], ref[j]), 10 * tol_rms * scale(j + 1, ref[j]));
        }
        if (cuda) {
          const Out old = run(dp, n);
          EXPECT_FALSE(old.pending);
          EXPECT_EQ(got.x, old.x) << "the residual stream must be the old ops' bits";
          const std::pair<const std::vector<float>*, const std::vector<float>*> same[] = {
              {&got.h, &old.h}, {&got.q, &old.q}, {&got.k, &old.k}, {&got.f, &old.f}};
          // Q4_K GEMVs read x quantized to 8 bits (cuda::gemv_xq_bytes): x * g and its normed copy
          // round to the same bytes but for an odd value that lies within an ulp of a rounding
          // boundary, each of which moves a product by about one quantization step of its group.
          const bool xq = cuda_gemv_xq(type);
          for (size_t j = 0; j < 4; ++j) {
            const auto& [out, want] = same[j];
            EXPECT_LE(max_abs_diff(*out, *want), (xq && j > 0 ? 5e-3 : 1e-5) * rms(*want)) << "output " << "hqkf"[j];
          }
          const Out again = run(dl, n);
          EXPECT_EQ(again.h, got.h);
          EXPECT_EQ(again.q, got.q);
          EXPECT_EQ(again.k, got.k);
          EXPECT_EQ(again.f, got.f);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
          lazy_steps += 2;
#endif
        }
        if (n > 1) {
          // Batch invariance: the first row alone gives the first row's bits of the batch.
          const Out one = run(dl, 1);
          auto first = [](const std::vector<float>& v, int64_t cols) { return std::vector<float>(v.begin(), v.begin() + cols); };
          EXPECT_EQ(one.x, first(got.x, D));
          EXPECT_EQ(one.h, first(got.h, D));
          EXPECT_EQ(one.q, first(got.q, rq));
          EXPECT_EQ(one.k, first(got.k, rk));
          // (The CPU's vectorised silu_mul rounds an element by its place in the array: CUDA only.)
          if (cuda) {
            EXPECT_EQ(one.f, first(got.f, rf));
          }
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
          if (cuda) lazy_steps += 1;
#endif
        }
      }
    }
  }
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
  // Every lazy run launched the producer once and the two consumers (QKV-like and SwiGLU) once each.
  EXPECT_EQ(cuda::gemv_stats::norm_producer_launches() - producers0, lazy_steps);
  EXPECT_EQ(cuda::gemv_stats::norm_consumer_launches() - consumers0, 2 * lazy_steps);
#endif
}

TEST_P(BackendOps, EmbedEveryTableType) {
  std::mt19937 rng(13);
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    if (!be().supports_matmul(type)) continue;  // tables of a type the backend cannot read (checked above)
    const int64_t rows = 50, cols = 256;
    const auto m = random_matrix(type, rows, cols, rng);
    const WeightMatrix w = be().upload_matrix(m.w);
    const std::vector<TokenId> tokens = {0, 49, 7, 7, 23};
    std::vector<float> ref(tokens.size() * cols);
    for (size_t t = 0; t < tokens.size(); ++t) {
      dequantize_row(type, m.w.data + static_cast<uint64_t>(tokens[t]) * m.w.row_bytes, ref.data() + t * cols, cols);
    }
    const DevArray out = alloc(be(), static_cast<int64_t>(tokens.size()), cols);
    be().embed(w, tokens, out.view);
    const auto got = download(be(), out.view);
    if (is_float(type)) EXPECT_EQ(got, ref);
    else EXPECT_LE(max_abs_diff(got, ref), 1e-6 * rms(ref));
  }
}

// Greedy picks on the device (Backend::greedy_pick): the host sampler's pick (max_logit +
// argmax_index: the lowest index of the largest value, NaN never; -1 when that value is not finite,
// where the sampler refuses) on rows with ties, NaNs, infinities and signed zeros; embed_picked
// embeds those tokens (-1 as 0).
void check_device_picks(Backend& be, int64_t cols, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << cols << " columns");
  const int64_t rows = 8;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), rng);
  auto row = [&](int64_t r) { return x.data() + r * cols; };
  row(0)[5] = 3.0f, row(0)[300] = 3.0f;                   // a tie: the lower index
  row(1)[0] = nan, row(1)[17] = nan, row(1)[999] = 2.5f;  // NaNs never win
  std::fill(row(2), row(2) + cols, -inf);                 // every value -inf: -1
  std::fill(row(3), row(3) + cols, nan);                  // every value NaN: -1
  std::fill(row(4), row(4) + cols, -1.0f);
  row(4)[3] = -0.0f, row(4)[1] = 0.0f, row(4)[2] = nan;   // +0 and -0 tie
  row(5)[900] = inf, row(5)[777] = inf, row(5)[778] = nan;  // +inf, twice: -1 (not finite)
  row(6)[cols - 1] = 9.0f;                                // the last column
  std::fill(row(7), row(7) + cols, -inf);
  row(7)[cols / 2] = nan, row(7)[cols - 2] = -1e30f;      // one finite value
  std::vector<TokenId> want(static_cast<size_t>(rows));
  std::vector<float> block_max(logit_blocks(static_cast<size_t>(cols)));
  for (int64_t r = 0; r < rows; ++r) want[static_cast<size_t>(r)] = greedy_token({row(r), static_cast<size_t>(cols)}, block_max);
  EXPECT_EQ(want, (std::vector<TokenId>{5, 999, -1, -1, 1, -1, static_cast<TokenId>(cols - 1), static_cast<TokenId>(cols - 2)}));
  const DevArray logits = alloc(be, rows, cols);
  be.copy_to_device(logits.view.data, x.data(), x.size() * sizeof(float));
  be.greedy_pick(logits.view);
  const uint64_t t = be.collect_picks(rows);
  const auto got = be.picks(t);
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.end()), want);

  // embed_picked = embed of the same tokens, -1 as 0 (its first rows only, too).
  const auto m = random_matrix(GgmlType::kF16, cols, 64, rng);
  const WeightMatrix w = be.upload_matrix(m.w);
  std::vector<TokenId> embedded(want.size());
  for (size_t i = 0; i < want.size(); ++i) embedded[i] = std::max(want[i], 0);
  for (int64_t n : {rows, int64_t{3}}) {
    const DevArray a = alloc(be, n, 64), b = alloc(be, n, 64);
    be.embed_picked(w, a.view);
    be.embed(w, std::span<const TokenId>(embedded).first(static_cast<size_t>(n)), b.view);
    EXPECT_EQ(download(be, a.view), download(be, b.view)) << n << " rows";
  }
  // The last kPickTickets tickets stay readable, each with its own rows.
  std::vector<uint64_t> tickets;
  for (int i = 0; i < Backend::kPickTickets; ++i) tickets.push_back(be.collect_picks(i + 1));
  for (int i = 0; i < Backend::kPickTickets; ++i) {
    const auto p = be.picks(tickets[static_cast<size_t>(i)]);
    EXPECT_EQ(std::vector<TokenId>(p.begin(), p.end()), std::vector<TokenId>(want.begin(), want.begin() + i + 1));
  }
}

TEST_P(BackendOps, GreedyPickIsTheHostPickAndEmbedPickedEmbedsIt) {
  if (!be().supports_device_picks()) GTEST_SKIP() << "no device picks on this backend (the model picks on the host)";
  std::mt19937 rng(29);
  check_device_picks(be(), 1003, rng);  // rows read as floats
  check_device_picks(be(), 1024, rng);  // rows read as float4s
}

TEST_P(BackendOps, RmsNorm) {
  std::mt19937 rng(14);
  for (int64_t dim : {1, 7, 64, 768}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const int64_t rows = 5;
    const auto x = random_floats(static_cast<size_t>(rows * dim), rng, -3.0f, 3.0f);
    const auto wt = random_floats(static_cast<size_t>(dim), rng);
    std::vector<float> ref(x.size());
    cpu::ref::rms_norm(x.data(), wt.data(), ref.data(), rows, dim, 1e-5f);
    const float* dw = upload_vector(be(), wt);
    const DevArray dx = upload(be(), x, rows, dim);
    const DevArray dy = alloc(be(), rows, dim);
    be().rms_norm(dx.view, dw, dy.view, 1e-5f);
    be().rms_norm(dx.view, dw, dx.view, 1e-5f);  // in place, as the output norm runs
    const auto got = download(be(), dy.view);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6 * (std::abs(ref[i]) + 1e-3)) << i;
    EXPECT_EQ(download(be(), dx.view), got) << "in place differs";
  }
}

TEST_P(BackendOps, RopeNormalNeoxLlama3Factors) {
  std::mt19937 rng(15);
  const std::vector<float> factors = random_floats(64, rng, 1.0f, 8.0f);
  const float* dfactors = upload_vector(be(), factors);
  for (bool neox : {false, true}) {
    for (bool use_factors : {false, true}) {
      for (auto [head_dim, n_rot] : {std::pair<int32_t, int32_t>{64, 64}, {128, 64}, {10, 6}}) {
        SCOPED_TRACE(::testing::Message() << "neox " << neox << " factors " << use_factors << " head_dim " << head_dim
                                          << " n_rot " << n_rot);
        RopeParams p;
        p.n_rot = n_rot;
        p.freq_base = 500000.0f;
        p.freq_scale = 0.5f;
        p.neox = neox;
        RopeParams host_p = p;
        host_p.freq_factors = use_factors ? factors.data() : nullptr;
        p.freq_factors = use_factors ? dfactors : nullptr;
        const std::vector<int32_t> pos = {0, 1, 5, 77, 4095, 99999, 3};
        const int32_t heads = 3;
        const auto x = random_floats(pos.size() * heads * static_cast<size_t>(head_dim), rng);
        auto ref = x;
        cpu::ref::rope(ref.data(), pos.data(), static_cast<int64_t>(pos.size()), heads, head_dim, host_p);
        const DevArray dx = upload(be(), x, static_cast<int64_t>(pos.size()), int64_t{heads} * head_dim);
        be().rope(dx.view, pos, heads, head_dim, p);
        EXPECT_LE(max_abs_diff(download(be(), dx.view), ref), 2e-6);
      }
    }
  }
}

TEST_P(BackendOps, SiluMulAddAddBiasGatherRows) {
  std::mt19937 rng(16);
  const int64_t rows = 9, cols = 100;
  const size_t n = static_cast<size_t>(rows * cols);
  auto gate = random_floats(n, rng, -20.0f, 20.0f);
  gate[0] = -200.0f;  // exp overflows in f32: still a finite result
  gate[1] = 150.0f;
  const auto up = random_floats(n, rng);
  auto ref = gate;
  cpu::ref::silu_mul(ref.data(), up.data(), static_cast<int64_t>(n));
  const DevArray dg = upload(be(), gate, rows, cols), du = upload(be(), up, rows, cols);
  be().silu_mul(dg.view, du.view);
  const auto got = download(be(), dg.view);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], ref[i], 1e-6 * std::abs(ref[i]) + 1e-30) << "silu_mul " << i;

  const auto y = random_floats(n, rng), x = random_floats(n, rng), bias = random_floats(static_cast<size_t>(cols), rng);
  std::vector<float> sum(n), biased(n);
  for (size_t i = 0; i < n; ++i) {
    sum[i] = y[i] + x[i];
    biased[i] = y[i] + bias[i % static_cast<size_t>(cols)];
  }
  const DevArray dy = upload(be(), y, rows, cols), dx = upload(be(), x, rows, cols), dy2 = upload(be(), y, rows, cols);
  be().add(dy.view, dx.view);
  EXPECT_EQ(download(be(), dy.view), sum) << "add";
  be().add_bias(dy2.view, upload_vector(be(), bias));
  EXPECT_EQ(download(be(), dy2.view), biased) << "add_bias";

  // Runs, repeats and single rows, in any order.
  const std::vector<int32_t> pick = {2, 3, 4, 8, 0, 0, 5};
  std::vector<float> gathered;
  for (int32_t r : pick) gathered.insert(gathered.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
  const DevArray dout = alloc(be(), static_cast<int64_t>(pick.size()), cols);
  be().gather_rows(dx.view, pick, dout.view);
  EXPECT_EQ(download(be(), dout.view), gathered) << "gather_rows";
}

TEST_P(BackendOps, HostDeviceTransfersRoundTrip) {
  std::mt19937 rng(17);
  std::vector<uint8_t> bytes(100000);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (MemoryUse use : {MemoryUse::kActivations, MemoryUse::kKvCache}) {
    auto buf = be().allocate(bytes.size(), use);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    be().copy_to_device(buf->data() + 1, bytes.data(), bytes.size() - 1);
    std::vector<uint8_t> back(bytes.size() - 1);
    be().copy_to_host(back.data(), buf->data() + 1, back.size());
    EXPECT_TRUE(std::equal(back.begin(), back.end(), bytes.begin()));
  }
}

// MemoryUse::kPinnedHost (the host KV tier's memory): a host address on every backend, written and
// read in place by the host, and a source and destination of host<->device copies.
TEST_P(BackendOps, PinnedHostMemoryIsHostMemoryThatCopiesBothWays) {
  std::mt19937 rng(23);
  std::vector<uint8_t> bytes(70000);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  auto pinned = be().allocate(bytes.size(), MemoryUse::kPinnedHost);
  ASSERT_EQ(pinned->bytes(), bytes.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned->data()) % 64, 0u);
  std::memcpy(pinned->data(), bytes.data(), bytes.size());  // the host writes it directly
  auto device = be().allocate(bytes.size(), MemoryUse::kKvCache);
  be().copy_to_device(device->data(), pinned->data(), bytes.size());
  auto back = be().allocate(bytes.size(), MemoryUse::kPinnedHost);
  std::memset(back->data(), 0, bytes.size());
  be().copy_to_host(back->data(), device->data(), bytes.size());
  EXPECT_EQ(std::memcmp(back->data(), bytes.data(), bytes.size()), 0);
}

// Random K/V for `n_pos` positions of every block in `ids`, written by the reference kv_store
// into the host arenas.
void fill_blocks(KvLayer& kv, const std::vector<BlockId>& ids, std::mt19937& rng) {
  const int32_t bs = kv.host.block_size, width = kv.host.n_kv_heads * kv.host.head_dim;
  const int32_t n = static_cast<int32_t>(ids.size()) * bs;
  const auto k = random_floats(static_cast<size_t>(n * width), rng), v = random_floats(static_cast<size_t>(n * width), rng);
  std::vector<int32_t> slots;
  for (int32_t p = 0; p < n; ++p) slots.push_back(ids[static_cast<size_t>(p / bs)] * bs + p % bs);
  cpu::ref::kv_store(kv.host, k.data(), v.data(), slots.data(), n);
}

TEST_P(BackendOps, KvStoreEveryDtype) {
  std::mt19937 rng(18);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    for (int32_t bs : {16, 7}) {
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dtype) << " block " << bs);
      const int32_t n_kv = 2, head_dim = 64, n_blocks = 6, T = 20;
      KvLayer kv(dtype, bs, n_kv, head_dim, n_blocks);
      kv.upload(be());
      auto k = random_floats(static_cast<size_t>(T * n_kv * head_dim), rng, -70000.0f, 70000.0f);
      auto v = random_floats(k.size(), rng);
      k[0] = NAN;
      k[1] = 1e-40f;  // subnormal in f32, zero in f16
      std::vector<int32_t> slots(static_cast<size_t>(n_blocks * bs));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(T);
      cpu::ref::kv_store(kv.host, k.data(), v.data(), slots.data(), T);
      const DevArray dk = upload(be(), k, T, n_kv * head_dim), dv = upload(be(), v, T, n_kv * head_dim);
      be().kv_store(kv.dev, dk.view, dv.view, slots);
      EXPECT_EQ(download_bytes(be(), kv.dev.k, kv.hk.size()), kv.hk);
      EXPECT_EQ(download_bytes(be(), kv.dev.v, kv.hv.size()), kv.hv);
    }
  }
}

TEST_P(BackendOps, KvCopyBlock) {
  std::mt19937 rng(19);
  KvLayer kv(KvDtype::kF16, 16, 2, 32, 5);
  fill_blocks(kv, {0, 1, 2, 3, 4}, rng);
  kv.upload(be());
  be().kv_copy_block(kv.dev, 3, 1);
  const int64_t bs = kv.host.block_stride_bytes();
  std::memcpy(kv.hk.data() + 1 * bs, kv.hk.data() + 3 * bs, static_cast<size_t>(bs));
  std::memcpy(kv.hv.data() + 1 * bs, kv.hv.data() + 3 * bs, static_cast<size_t>(bs));
  EXPECT_EQ(download_bytes(be(), kv.dev.k, kv.hk.size()), kv.hk);
  EXPECT_EQ(download_bytes(be(), kv.dev.v, kv.hv.size()), kv.hv);
}

TEST_P(BackendOps, KvWarmEncodeAndDecodeEveryFormat) {
  std::mt19937 rng(20);
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    for (int32_t bs : {16, 7}) {
      SCOPED_TRACE(::testing::Message() << warm_format_name(f) << " block " << bs);
      const int32_t n_kv = 2, head_dim = 64, span = warm_span(f, bs), n_hot = 2 * span, slots = 2;
      KvLayer kv(KvDtype::kF16, bs, n_kv, head_dim, n_hot, f, slots);
      std::vector<BlockId> hot(static_cast<size_t>(n_hot));
      std::iota(hot.begin(), hot.end(), 0);
      std::shuffle(hot.begin(), hot.end(), rng);
      fill_blocks(kv, hot, rng);
      kv.upload(be());
      // Slot 1 from the first span of blocks, slot 0 from the second.
      for (int32_t s = 0; s < slots; ++s) {
        const std::span<const BlockId> group(hot.data() + s * span, static_cast<size_t>(span));
        const int32_t slot = slots - 1 - s;
        warm_encode(f, kv.host, group.data(), span, kv.hwk.data() + slot * kv.host.warm_k_slot_bytes,
                    kv.hwv.data() + slot * kv.host.warm_v_slot_bytes);
        be().kv_warm_encode(f, kv.dev, group, kv.dev.warm_k + slot * kv.dev.warm_k_slot_bytes,
                            kv.dev.warm_v + slot * kv.dev.warm_v_slot_bytes);
      }
      EXPECT_EQ(download_bytes(be(), kv.dev.warm_k, kv.hwk.size()), kv.hwk);
      EXPECT_EQ(download_bytes(be(), kv.dev.warm_v, kv.hwv.size()), kv.hwv);
      // Every warm sub-block decodes to the reference decoder's rows.
      const int32_t width = n_kv * head_dim;
      const DevArray dk = alloc(be(), bs, width), dv = alloc(be(), bs, width);
      for (BlockId id = n_hot; id < n_hot + slots * span; ++id) {
        be().kv_warm_decode(kv.dev, id, dk.view, dv.view);
        std::vector<float> rk(static_cast<size_t>(bs * width)), rv(rk.size());
        for (int32_t s = 0; s < bs; ++s) {
          for (int32_t h = 0; h < n_kv; ++h) {
            cpu::ref::kv_row(kv.host, false, id, s, h, rk.data() + s * width + h * head_dim);
            cpu::ref::kv_row(kv.host, true, id, s, h, rv.data() + s * width + h * head_dim);
          }
        }
        EXPECT_EQ(download(be(), dk.view), rk) << "K of warm id " << id;
        EXPECT_EQ(download(be(), dv.view), rv) << "V of warm id " << id;
      }
    }
  }
}

// kv_warm_encode_many: several warm slots of a layer in one call (on CUDA one launch), slots in any
// order, some slots left out (their bytes must stay as uploaded), against the reference encoder
// slot by slot.
TEST_P(BackendOps, KvWarmEncodeManyEqualsTheReferenceSlotBySlot) {
  std::mt19937 rng(21);
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16}) {
      for (int32_t bs : {16, 7}) {
        SCOPED_TRACE(::testing::Message() << warm_format_name(f) << " " << kv_dtype_name(dt) << " block " << bs);
        const int32_t n_kv = 3, head_dim = 64, span = warm_span(f, bs), slots = 7, n_enc = 5, n_hot = n_enc * span + 3;
        KvLayer kv(dt, bs, n_kv, head_dim, n_hot, f, slots);
        std::vector<BlockId> hot(static_cast<size_t>(n_hot));
        std::iota(hot.begin(), hot.end(), 0);
        std::shuffle(hot.begin(), hot.end(), rng);
        fill_blocks(kv, hot, rng);
        std::uniform_int_distribution<int> byte(0, 255);
        for (uint8_t& b : kv.hwk) b = static_cast<uint8_t>(byte(rng));  // what the left-out slots must keep
        for (uint8_t& b : kv.hwv) b = static_cast<uint8_t>(byte(rng));
        kv.upload(be());
        std::vector<int32_t> dst(static_cast<size_t>(slots));
        std::iota(dst.begin(), dst.end(), 0);
        std::shuffle(dst.begin(), dst.end(), rng);
        dst.resize(static_cast<size_t>(n_enc));
        const std::span<const BlockId> blocks(hot.data(), static_cast<size_t>(n_enc * span));
        for (int32_t i = 0; i < n_enc; ++i) {
          const int32_t slot = dst[static_cast<size_t>(i)];
          warm_encode(f, kv.host, blocks.data() + i * span, span, kv.hwk.data() + slot * kv.host.warm_k_slot_bytes,
                      kv.hwv.data() + slot * kv.host.warm_v_slot_bytes);
        }
        be().kv_warm_encode_many(f, kv.dev, blocks, dst);
        EXPECT_EQ(download_bytes(be(), kv.dev.warm_k, kv.hwk.size()), kv.hwk);
        EXPECT_EQ(download_bytes(be(), kv.dev.warm_v, kv.hwv.size()), kv.hwv);
      }
    }
  }
}

struct SeqSpec {
  int32_t start_pos;
  int32_t n_q;
};

// Sequences of mixed lengths (prompt chunks and decode steps) with shuffled block tables; with a
// warm format, each sequence's oldest whole groups of warm_span blocks (never the one holding its
// last position) are re-encoded into warm slots and its table points at them.
// imp_from (optional): per sequence, the first counted row of its attention importance (-1: the
// sequence does not ask). Then paged_attention runs again with the buffers in four passes of 1, 3,
// 3 and 2 layers (calls), each followed by collect_importance and finish_importance (the sums
// visible after the second), and each buffer must hold 9 times the reference mass (within 1e-4 +
// 1e-4 relative) while the outputs keep their bits. (On CUDA a decode pass gathers the scores of as
// many layers per mass launch as the last pass had: these passes take one launch per layer, one
// launch after the pass's last layer, and one launch in collect_importance for the layers left.)
void attention_case(Backend& be, KvDtype dtype, int32_t bs, int32_t n_head, int32_t n_kv, int32_t head_dim,
                    const std::vector<SeqSpec>& specs, WarmFormat warm, std::mt19937& rng,
                    const std::vector<int32_t>* imp_from = nullptr) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(dtype) << " block " << bs << " heads " << n_head << "/" << n_kv
                                    << " head_dim " << head_dim << " warm " << warm_format_name(warm));
  const int32_t span = warm == WarmFormat::kNone ? 1 : warm_span(warm, bs);
  int32_t total = 0, warm_groups = 0;
  for (const auto& s : specs) {
    const int32_t nb = (s.start_pos + s.n_q + bs - 1) / bs;
    total += nb;
    if (warm != WarmFormat::kNone) warm_groups += (nb - 1) / span;
  }
  std::vector<BlockId> ids(static_cast<size_t>(total));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  KvLayer kv(dtype, bs, n_kv, head_dim, total, warm, warm_groups);
  fill_blocks(kv, ids, rng);
  std::vector<std::vector<BlockId>> tables;
  std::vector<AttentionSeq> seqs;
  int32_t used = 0, q_rows = 0, slot = 0;
  for (const auto& s : specs) {
    const int32_t nb = (s.start_pos + s.n_q + bs - 1) / bs;
    std::vector<BlockId> table(ids.begin() + used, ids.begin() + used + nb);
    used += nb;
    if (warm != WarmFormat::kNone) {
      for (int32_t g = 0; g < (nb - 1) / span; ++g, ++slot) {
        warm_encode(warm, kv.host, table.data() + g * span, span, kv.hwk.data() + slot * kv.host.warm_k_slot_bytes,
                    kv.hwv.data() + slot * kv.host.warm_v_slot_bytes);
        for (int32_t j = 0; j < span; ++j) table[static_cast<size_t>(g * span + j)] = total + slot * span + j;
      }
    }
    tables.push_back(std::move(table));
    seqs.push_back({q_rows, s.n_q, s.start_pos, nullptr, nb});
    q_rows += s.n_q;
  }
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].blocks = tables[i].data();
  kv.upload(be);
  const auto q = random_floats(static_cast<size_t>(q_rows * n_head * head_dim), rng, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> ref(q.size());
  cpu::ref::paged_attention(q.data(), kv.host, seqs, n_head, scale, ref.data());
  const DevArray dq = upload(be, q, q_rows, n_head * head_dim), dout = alloc(be, q_rows, n_head * head_dim);
  be.paged_attention(dq.view, kv.dev, seqs, n_head, scale, dout.view);
  const std::vector<float> got = download(be, dout.view);
  EXPECT_LE(max_abs_diff(got, ref), 2e-5);
  EXPECT_EQ(count_nonfinite(got), 0);
  if (imp_from == nullptr) return;
  ASSERT_TRUE(be.reports_attention_importance());
  ASSERT_EQ(imp_from->size(), seqs.size());
  std::vector<std::vector<float>> buffers(seqs.size());
  std::vector<AttentionSeq> with = seqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if ((*imp_from)[i] < 0) continue;
    buffers[i].assign(static_cast<size_t>(seqs[i].start_pos + seqs[i].n_q), 0.0f);
    with[i].importance = buffers[i].data();
    with[i].importance_from = (*imp_from)[i];
  }
  const DevArray dout2 = alloc(be, q_rows, n_head * head_dim);
  int32_t layers = 0;
  for (const int32_t pass_layers : {1, 3, 3, 2}) {
    for (int32_t l = 0; l < pass_layers; ++l, ++layers) be.paged_attention(dq.view, kv.dev, with, n_head, scale, dout2.view);
    be.collect_importance();
    be.finish_importance();
  }
  const std::vector<float> got2 = download(be, dout2.view);
  EXPECT_EQ(0, std::memcmp(got.data(), got2.data(), got.size() * sizeof(float))) << "importance changed the outputs";
  for (size_t i = 0; i < seqs.size(); ++i) {
    if ((*imp_from)[i] < 0) continue;
    SCOPED_TRACE(::testing::Message() << "sequence " << i << " from " << (*imp_from)[i]);
    const std::vector<double> m = reference_mass(q.data(), kv.host, seqs[i], n_head, scale, (*imp_from)[i]);
    double worst = 0;
    for (size_t k = 0; k < m.size(); ++k) {
      worst = std::max(worst, std::abs(buffers[i][k] - layers * m[k]) / (1e-4 + 1e-4 * layers * m[k]));
    }
    EXPECT_LE(worst, 1.0) << "mass off by more than the tolerance";
  }
}

// Attention importance (--kv-evict) on backends that report it: decode and prefill shapes, hot
// f32/f16/bf16 and warm int8/fp8/int4 tables, GQA, rows counted from importance_from (SnapKV's
// observation window), sequences that do not ask in the same batch.
TEST_P(BackendOps, PagedAttentionImportance) {
  if (!be().reports_attention_importance()) GTEST_SKIP() << "this backend does not report importance";
  std::mt19937 rng(23);
  const std::vector<SeqSpec> mixed = {{0, 1}, {0, 37}, {50, 1}, {16, 16}, {100, 5}};
  const std::vector<int32_t> from = {0, 30, -1, 0, 2};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    attention_case(be(), dtype, 16, 8, 2, 64, mixed, WarmFormat::kNone, rng, &from);
  }
  attention_case(be(), KvDtype::kF16, 7, 4, 4, 32, mixed, WarmFormat::kNone, rng, &from);
  const std::vector<SeqSpec> decodes = {{700, 1}, {37, 1}, {0, 1}, {255, 1}};
  const std::vector<int32_t> dfrom = {0, 0, -1, 0};
  attention_case(be(), KvDtype::kF16, 16, 32, 8, 128, decodes, WarmFormat::kNone, rng, &dfrom);
  // A decode row before importance_from (counted from row 1): its keys get no mass, 0.
  const std::vector<int32_t> dfrom1 = {0, 1, -1, 0};
  attention_case(be(), KvDtype::kF16, 16, 32, 8, 128, decodes, WarmFormat::kNone, rng, &dfrom1);
  const std::vector<SeqSpec> warm_mixed = {{0, 40}, {70, 1}, {200, 3}, {33, 16}};
  const std::vector<int32_t> wfrom = {10, 0, 0, -1};
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    attention_case(be(), KvDtype::kF16, 16, 8, 2, 64, warm_mixed, f, rng, &wfrom);
  }
}

// --kv-offload: block tables mixing hot ids and host ids (KvLayerView::host_base: blocks whose
// bytes sit in slots of MemoryUse::kPinnedHost memory, read in place — on a GPU, mapped pinned
// memory the kernels read over the bus) give the same bits as the same tables with every block in
// the arena. The arena's copies of the moved blocks are overwritten with NaN bytes and the slots'
// other bytes too, so a read of the wrong place shows; each slot lays the view's K and V block out
// after a header and another layer's blocks, as KvStorage's frames do.
void host_slot_case(Backend& be, KvDtype dtype, int32_t bs, int32_t n_head, int32_t n_kv, int32_t head_dim,
                    const std::vector<SeqSpec>& specs, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "host slots: " << kv_dtype_name(dtype) << " block " << bs << " heads " << n_head
                                    << "/" << n_kv << " head_dim " << head_dim);
  int32_t total = 0;
  for (const auto& s : specs) total += (s.start_pos + s.n_q + bs - 1) / bs;
  std::vector<BlockId> ids(static_cast<size_t>(total));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  KvLayer kv(dtype, bs, n_kv, head_dim, total);
  fill_blocks(kv, ids, rng);
  std::vector<std::vector<BlockId>> tables;
  std::vector<AttentionSeq> seqs;
  int32_t used = 0, q_rows = 0;
  for (const auto& s : specs) {
    const int32_t nb = (s.start_pos + s.n_q + bs - 1) / bs;
    tables.emplace_back(ids.begin() + used, ids.begin() + used + nb);
    used += nb;
    seqs.push_back({q_rows, s.n_q, s.start_pos, nullptr, nb});
    q_rows += s.n_q;
  }
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].blocks = tables[i].data();
  kv.upload(be);
  const auto q = random_floats(static_cast<size_t>(q_rows * n_head * head_dim), rng, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const DevArray dq = upload(be, q, q_rows, n_head * head_dim), dout = alloc(be, q_rows, n_head * head_dim);
  be.paged_attention(dq.view, kv.dev, seqs, n_head, scale, dout.view);
  const std::vector<float> all_hot = download(be, dout.view);

  // Every other block of each table but its last moves to a host slot, in shuffled slot order.
  std::vector<std::pair<size_t, size_t>> moved;  // (sequence, table index)
  for (size_t i = 0; i < tables.size(); ++i) {
    for (size_t b = 0; b + 1 < tables[i].size(); b += 2) moved.emplace_back(i, b);
  }
  ASSERT_FALSE(moved.empty());
  std::vector<int32_t> slot_of(moved.size());
  std::iota(slot_of.begin(), slot_of.end(), 0);
  std::shuffle(slot_of.begin(), slot_of.end(), rng);
  const int64_t bstride = kv.host.block_stride_bytes();
  const int64_t k_off = 256 + 2 * bstride, v_off = k_off + bstride;  // as layer 1 of a frame
  const int64_t slot_bytes = (v_off + bstride + 255) / 256 * 256;
  std::unique_ptr<DeviceBuffer> host_mem = be.allocate(static_cast<uint64_t>(slot_bytes) * moved.size(), MemoryUse::kPinnedHost);
  std::memset(host_mem->data(), 0xff, static_cast<size_t>(slot_bytes) * moved.size());
  const int32_t host_base = total + 3;
  std::vector<std::vector<BlockId>> tables2 = tables;
  const std::vector<uint8_t> nan_block(static_cast<size_t>(bstride), 0xff);
  for (size_t m = 0; m < moved.size(); ++m) {
    const auto [i, b] = moved[m];
    const BlockId id = tables[i][b];
    uint8_t* slot = host_mem->data() + int64_t{slot_of[m]} * slot_bytes;
    std::memcpy(slot + k_off, kv.hk.data() + id * bstride, static_cast<size_t>(bstride));
    std::memcpy(slot + v_off, kv.hv.data() + id * bstride, static_cast<size_t>(bstride));
    be.copy_to_device(kv.dev.k + id * bstride, nan_block.data(), nan_block.size());
    be.copy_to_device(kv.dev.v + id * bstride, nan_block.data(), nan_block.size());
    tables2[i][b] = host_base + slot_of[m];
  }
  std::vector<AttentionSeq> seqs2 = seqs;
  for (size_t i = 0; i < seqs2.size(); ++i) seqs2[i].blocks = tables2[i].data();
  KvLayerView dev2 = kv.dev, host2 = kv.host;
  for (KvLayerView* v : {&dev2, &host2}) {
    v->host_base = host_base;
    v->host = host_mem->data();
    v->host_slot_bytes = slot_bytes;
    v->host_k_offset = k_off;
    v->host_v_offset = v_off;
  }
  const DevArray dout2 = alloc(be, q_rows, n_head * head_dim);
  be.paged_attention(dq.view, dev2, seqs2, n_head, scale, dout2.view);
  const std::vector<float> got = download(be, dout2.view);
  EXPECT_EQ(count_nonfinite(got), 0);
  EXPECT_EQ(0, std::memcmp(got.data(), all_hot.data(), got.size() * sizeof(float)))
      << "attention over host slots differs from the same blocks in the arena (max diff " << max_abs_diff(got, all_hot) << ")";
  // And the reference, reading the host slots through kv_row.
  std::vector<float> ref(q.size());
  cpu::ref::paged_attention(q.data(), host2, seqs2, n_head, scale, ref.data());
  EXPECT_LE(max_abs_diff(got, ref), 2e-5);
}

TEST_P(BackendOps, PagedAttentionReadsBlocksInHostSlotsInPlace) {
  std::mt19937 rng(26);
  const std::vector<SeqSpec> mixed = {{0, 40}, {70, 1}, {200, 3}, {33, 16}, {700, 1}};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    host_slot_case(be(), dtype, 16, 8, 2, 64, mixed, rng);  // GQA group 4; head_dim 64
  }
  host_slot_case(be(), KvDtype::kF16, 16, 32, 8, 128, {{1000, 1}, {300, 1}, {64, 64}}, rng);  // llama-1b's shape
  host_slot_case(be(), KvDtype::kF16, 7, 4, 4, 32, mixed, rng);
  host_slot_case(be(), KvDtype::kBF16, 16, 8, 4, 8, mixed, rng);  // stories260K's shape
}

// kv_move_rows: token rows (K and V) between hot slots, as the host copies them.
TEST_P(BackendOps, KvMoveRows) {
  std::mt19937 rng(24);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    const int32_t bs = 16, n_kv = 2, hd = 64, n_blocks = 6;
    KvLayer kv(dtype, bs, n_kv, hd, n_blocks);
    for (auto* bytes : {&kv.hk, &kv.hv}) {
      for (auto& b : *bytes) b = static_cast<uint8_t>(rng());
    }
    kv.upload(be());
    // Compaction-like moves: sources never destinations, destinations distinct.
    const std::vector<int32_t> src = {20, 21, 40, 95, 3}, dst = {5, 6, 7, 33, 80};
    be().kv_move_rows(kv.dev, src, dst);
    const int64_t ts = kv.host.token_stride_bytes();
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(kv.hk.data() + dst[i] * ts, kv.hk.data() + src[i] * ts, static_cast<size_t>(ts));
      std::memcpy(kv.hv.data() + dst[i] * ts, kv.hv.data() + src[i] * ts, static_cast<size_t>(ts));
    }
    EXPECT_EQ(download_bytes(be(), kv.dev.k, kv.hk.size()), kv.hk) << kv_dtype_name(dtype);
    EXPECT_EQ(download_bytes(be(), kv.dev.v, kv.hv.size()), kv.hv) << kv_dtype_name(dtype);
  }
}

// kv_read_rows: the K rows of the slots in order, then their V rows, layer after layer; the
// expected bytes are cut from the host copies of the arenas.
TEST_P(BackendOps, KvReadRows) {
  std::mt19937 rng(25);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    const int32_t bs = 16, n_kv = 2, hd = 64, n_blocks = 6;
    KvLayer l0(dtype, bs, n_kv, hd, n_blocks), l1(dtype, bs, n_kv, hd, n_blocks);
    for (KvLayer* kv : {&l0, &l1}) {
      for (auto* bytes : {&kv->hk, &kv->hv}) {
        for (auto& b : *bytes) b = static_cast<uint8_t>(rng());
      }
      kv->upload(be());
    }
    const std::vector<int32_t> slots = {95, 0, 17, 40, 41, 3};
    const int64_t ts = l0.host.token_stride_bytes();
    std::vector<uint8_t> want;
    for (KvLayer* kv : {&l0, &l1}) {
      for (const std::vector<uint8_t>* arena : {&kv->hk, &kv->hv}) {
        for (int32_t s : slots) want.insert(want.end(), arena->begin() + s * ts, arena->begin() + (s + 1) * ts);
      }
    }
    const std::vector<KvLayerView> views = {l0.dev, l1.dev};
    std::vector<uint8_t> got(want.size(), 0xAB);
    be().kv_read_rows(views, slots, got.data());
    EXPECT_EQ(got, want) << kv_dtype_name(dtype);
  }
}

TEST_P(BackendOps, PagedAttentionHot) {
  std::mt19937 rng(21);
  const std::vector<SeqSpec> mixed = {{0, 1}, {0, 37}, {50, 1}, {16, 16}, {100, 5}};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    attention_case(be(), dtype, 16, 8, 2, 64, mixed, WarmFormat::kNone, rng);
    attention_case(be(), dtype, 7, 4, 4, 32, mixed, WarmFormat::kNone, rng);
  }
  attention_case(be(), KvDtype::kF16, 16, 8, 1, 128, {{0, 300}, {700, 1}}, WarmFormat::kNone, rng);
}

// Decode batches (every sequence one new token) over hot tables only, against the CPU reference:
// on CUDA, batches of n_seqs x n_kv <= 264 take the latency kernel (attention_decode_hot_kernel:
// the block stages the keys for all heads of a kv head, a warp per query head). f32/f16/bf16 rows;
// GQA 1, 4, 7, 8 and 16; head_dim 40 (padded to 64), 64, 128 and 256; one sequence 2,500 deep (20
// splits); 20 sequences of contexts 1..2,500 (the batch caps the splits at 3, so a split takes its
// keys in up to 7 rounds of 128); contexts on both sides of every tile and block edge.
TEST_P(BackendOps, PagedAttentionHotDecode) {
  std::mt19937 rng(31);
  std::vector<SeqSpec> twenty;
  for (int32_t p : {0, 1, 15, 16, 31, 32, 33, 127, 128, 129, 383, 384, 385, 1000, 2499}) twenty.push_back({p, 1});
  for (int32_t i = 0; twenty.size() < 20; ++i) twenty.push_back({(i * 389 + 77) % 2500, 1});
  const std::vector<SeqSpec> one_long = {{2500, 1}};
  const std::vector<SeqSpec> few = {{40, 1}, {300, 1}, {95, 1}, {0, 1}, {777, 1}};
  struct Case {
    KvDtype dtype;
    int32_t bs, n_head, n_kv, hd;
    const std::vector<SeqSpec>* specs;
  };
  const std::vector<Case> cases = {
      {KvDtype::kF32, 16, 32, 8, 64, &twenty},   // GQA 4, rounds
      {KvDtype::kF16, 16, 32, 8, 64, &twenty},
      {KvDtype::kBF16, 16, 32, 8, 64, &twenty},
      {KvDtype::kF16, 16, 8, 1, 128, &one_long},  // GQA 8, 20 splits
      {KvDtype::kF16, 32, 4, 4, 40, &few},        // GQA 1, head_dim padded
      {KvDtype::kBF16, 16, 14, 2, 64, &few},      // GQA 7
      {KvDtype::kF16, 16, 16, 1, 64, &few},       // GQA 16: 16 warps
      {KvDtype::kF16, 8, 4, 2, 256, &few},        // head_dim 256: rounds of 64
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << kv_dtype_name(c.dtype) << " block " << c.bs << " heads " << c.n_head << "/"
                                      << c.n_kv << " head_dim " << c.hd << " seqs " << c.specs->size());
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
    const int64_t before = cuda::attn::hot_decode_launches();
#endif
    attention_case(be(), c.dtype, c.bs, c.n_head, c.n_kv, c.hd, *c.specs, WarmFormat::kNone, rng);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
    if (be().kind() == DeviceKind::kCuda && cuda::attn::hot_decode_enabled()) {
      EXPECT_GT(cuda::attn::hot_decode_launches(), before) << "the decode batch did not take the latency kernel";
    }
#endif
  }
}

TEST_P(BackendOps, PagedAttentionWarm) {
  std::mt19937 rng(22);
  const std::vector<SeqSpec> mixed = {{0, 40}, {70, 1}, {200, 3}, {33, 16}};
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    attention_case(be(), KvDtype::kF16, 16, 8, 2, 64, mixed, f, rng);
    attention_case(be(), KvDtype::kF32, 7, 4, 2, 32, mixed, f, rng);
  }
}

// Decode batches (every sequence one new token) over tables mostly of warm blocks, against the CPU
// reference (warm_decode_row's values): on CUDA the decode kernel, which stages int8/fp8 rows
// without their scales and folds them into the score and the softmax weight, decodes int4 in
// registers with per-group scales and zero points. One sequence 2,500 deep (many splits), 48
// sequences of contexts 1..2,500 (keys on both sides of every tile and block edge), GQA 1/2/4/8,
// head_dim 40 (a partial group of int4 V, channels past head_dim), 64, 96, 128, int4 blocks of 8,
// 16 (spans 4, 2) and 32, hot f16/bf16/f32.
TEST_P(BackendOps, PagedAttentionWarmDecode) {
  std::mt19937 rng(24);
  std::vector<SeqSpec> many;
  for (int32_t p : {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 511, 700, 1000, 1023,
                    1024, 1500, 2047, 2048, 2499}) {
    many.push_back({p, 1});
  }
  for (int32_t i = 0; many.size() < 48; ++i) many.push_back({(i * 389 + 77) % 2500, 1});
  const std::vector<SeqSpec> one_long = {{2500, 1}};
  const std::vector<SeqSpec> few = {{40, 1}, {300, 1}, {95, 1}, {64, 1}, {777, 1}};
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    attention_case(be(), KvDtype::kF16, 16, 32, 8, 64, one_long, f, rng);   // GQA 4
    attention_case(be(), KvDtype::kF16, 16, 8, 1, 128, many, f, rng);       // GQA 8, B = 48
    attention_case(be(), KvDtype::kF16, 32, 4, 4, 64, few, f, rng);         // GQA 1, int4 span 1
    attention_case(be(), KvDtype::kF16, 8, 8, 4, 128, few, f, rng);         // GQA 2, int4 span 4
    attention_case(be(), KvDtype::kBF16, 16, 16, 2, 96, few, f, rng);       // head_dim 96
    attention_case(be(), KvDtype::kF16, 16, 4, 2, 40, few, f, rng);         // head_dim 40
    attention_case(be(), KvDtype::kF32, 16, 8, 2, 64, few, f, rng);         // f32 hot rows
    attention_case(be(), KvDtype::kF16, 16, 32, 8, 64, {{3583, 1}, {3700, 1}, {3600, 1}}, f, rng);  // llama-1b's
  }
}

// The shapes the CUDA backend's tensor-core prefill kernel takes (f16/bf16 hot KV, head_dim 64 and
// 128, n_q > 1): a whole 512-token prompt, chunks that start mid-block and end mid-block, GQA 1..8,
// block sizes 7/16/32, chunks batched with decodes, long contexts split across thread blocks.
TEST_P(BackendOps, PagedAttentionPrefillShapes) {
  std::mt19937 rng(31);
  const std::vector<SeqSpec> mixed = {{0, 1}, {0, 37}, {50, 1}, {16, 16}, {100, 5}};
  std::vector<SeqSpec> decodes_and_chunk;
  for (int i = 0; i < 20; ++i) decodes_and_chunk.push_back({200 + 13 * i, 1});
  decodes_and_chunk.push_back({0, 33});
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
    for (int32_t hd : {64, 128}) {
      attention_case(be(), dtype, 16, 32, 8, hd, {{0, 512}}, WarmFormat::kNone, rng);
      attention_case(be(), dtype, 7, 8, 1, hd, {{0, 300}, {700, 1}}, WarmFormat::kNone, rng);
      attention_case(be(), dtype, 32, 4, 4, hd, mixed, WarmFormat::kNone, rng);
      attention_case(be(), dtype, 16, 14, 2, hd, {{1000, 64}, {3, 2}}, WarmFormat::kNone, rng);
      attention_case(be(), dtype, 16, 8, 2, hd, decodes_and_chunk, WarmFormat::kNone, rng);
      attention_case(be(), dtype, 16, 4, 1, hd, {{2500, 3}}, WarmFormat::kNone, rng);
    }
  }
}

// The same prefill shapes over tables mixing hot and warm ids (int8, fp8, int4: each sequence's
// older blocks re-encoded into warm slots, its last block hot), f16 and bf16 hot KV, head_dim 64
// and 128, GQA 1, 4 and 8, blocks of 16 (int4: slots of 2 blocks) and 32 tokens, chunks starting
// and ending mid-block and mid-tile, batched with decodes, a long context split across thread
// blocks. On CUDA each case must reach the tensor-core kernel (its launch counter moves), unless
// STRATA_CUDA_MMA_ATTN=0 or STRATA_CUDA_MMA_WARM=0 sends it to the FP32 kernels.
TEST_P(BackendOps, PagedAttentionPrefillWarm) {
  std::mt19937 rng(32);
  const std::vector<SeqSpec> mixed = {{0, 37}, {50, 1}, {16, 16}, {100, 5}, {0, 1}};
  std::vector<SeqSpec> decodes_and_chunk;
  for (int i = 0; i < 12; ++i) decodes_and_chunk.push_back({200 + 29 * i, 1});
  decodes_and_chunk.push_back({75, 50});
  struct Shape {
    int32_t bs, n_head, n_kv;
    std::vector<SeqSpec> specs;
  };
  const std::vector<Shape> shapes = {
      {16, 32, 8, {{0, 200}}},               // GQA 4, llama-1b's heads: the prompt's own keys warm
      {16, 8, 1, {{300, 45}, {700, 1}}},     // GQA 8: a chunk from mid-block to mid-block
      {32, 4, 4, mixed},                     // GQA 1, blocks of 32
      {16, 16, 2, {{1000, 64}, {3, 2}}},     // GQA 8: a long context over several splits
      {16, 8, 2, decodes_and_chunk},         // GQA 4: a chunk batched with decodes
  };
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
      for (int32_t hd : {64, 128}) {
        for (const Shape& sh : shapes) {
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
          const int64_t before = cuda::attn::mma_launches();
#endif
          attention_case(be(), dtype, sh.bs, sh.n_head, sh.n_kv, hd, sh.specs, f, rng);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
          if (cuda::attn::mma_enabled() && cuda::attn::mma_warm_enabled()) {
            EXPECT_GT(cuda::attn::mma_launches(), before)
                << warm_format_name(f) << " " << kv_dtype_name(dtype) << " head_dim " << hd << " block " << sh.bs
                << " heads " << sh.n_head << "/" << sh.n_kv << ": the chunk did not take the tensor-core kernel";
          }
#endif
        }
      }
    }
  }
}

// A warm tier leaves the bits of tiles whose keys are all hot alone: prefill chunks (and a decode)
// over hot blocks give the same outputs through a view without a warm tier and through the same
// view with an int8 / fp8 / int4 tier whose slots (0xff bytes) no table names; on CUDA both take
// the tensor-core kernel (the second with its warm-tier shared memory and per-tile vote).
TEST_P(BackendOps, PagedAttentionWarmTierKeepsHotBits) {
  std::mt19937 rng(33);
  const int32_t bs = 16, n_head = 8, n_kv = 2;
  const std::vector<SeqSpec> specs = {{0, 100}, {300, 45}, {64, 1}};
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
    for (int32_t hd : {64, 128}) {
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dtype) << " head_dim " << hd);
      int32_t total = 0;
      for (const auto& sp : specs) total += (sp.start_pos + sp.n_q + bs - 1) / bs;
      std::vector<BlockId> ids(static_cast<size_t>(total));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      KvLayer kv(dtype, bs, n_kv, hd, total);
      fill_blocks(kv, ids, rng);
      std::vector<std::vector<BlockId>> tables;
      std::vector<AttentionSeq> seqs;
      int32_t used = 0, q_rows = 0;
      for (const auto& sp : specs) {
        const int32_t nb = (sp.start_pos + sp.n_q + bs - 1) / bs;
        tables.emplace_back(ids.begin() + used, ids.begin() + used + nb);
        used += nb;
        seqs.push_back({q_rows, sp.n_q, sp.start_pos, nullptr, nb});
        q_rows += sp.n_q;
      }
      for (size_t i = 0; i < seqs.size(); ++i) seqs[i].blocks = tables[i].data();
      kv.upload(be());
      const auto q = random_floats(static_cast<size_t>(q_rows * n_head * hd), rng, -2.0f, 2.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const DevArray dq = upload(be(), q, q_rows, n_head * hd), dout = alloc(be(), q_rows, n_head * hd);
      be().paged_attention(dq.view, kv.dev, seqs, n_head, scale, dout.view);
      const std::vector<float> plain = download(be(), dout.view);
      ASSERT_EQ(count_nonfinite(plain), 0);
      for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
        KvLayerView tiered = kv.dev;
        tiered.n_hot_blocks = total;
        tiered.warm_format = f;
        tiered.warm_span = warm_span(f, bs);
        tiered.warm_k_slot_bytes = warm_slot_bytes(f, false, bs, n_kv, hd);
        tiered.warm_v_slot_bytes = warm_slot_bytes(f, true, bs, n_kv, hd);
        const std::vector<uint8_t> junk(static_cast<size_t>(2 * (tiered.warm_k_slot_bytes + tiered.warm_v_slot_bytes)), 0xff);
        std::unique_ptr<DeviceBuffer> warm_mem = be().allocate(junk.size(), MemoryUse::kKvCache);
        be().copy_to_device(warm_mem->data(), junk.data(), junk.size());
        tiered.warm_k = warm_mem->data();
        tiered.warm_v = warm_mem->data() + 2 * tiered.warm_k_slot_bytes;
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
        const int64_t before = cuda::attn::mma_launches();
#endif
        const DevArray dout2 = alloc(be(), q_rows, n_head * hd);
        be().paged_attention(dq.view, tiered, seqs, n_head, scale, dout2.view);
        const std::vector<float> got = download(be(), dout2.view);
        EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), got.size() * sizeof(float)))
            << warm_format_name(f) << " tier: max diff " << max_abs_diff(got, plain);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
        if (cuda::attn::mma_enabled() && cuda::attn::mma_warm_enabled()) {
          EXPECT_GT(cuda::attn::mma_launches(), before) << warm_format_name(f) << ": not the tensor-core kernel";
        }
#endif
      }
    }
  }
}

// One table naming all three kinds of block: each sequence's oldest groups of warm_span blocks
// warm (int8 / fp8 / int4), every other one of its next blocks moved into a host slot
// (--kv-offload: the pinned slots read in place, their arena copies overwritten with 0xff), the
// rest hot; prefill chunks and a decode against the CPU reference reading the same slots. On CUDA
// the batch must take the tensor-core kernel.
TEST_P(BackendOps, PagedAttentionPrefillWarmHotAndHostSlots) {
  std::mt19937 rng(34);
  const int32_t bs = 16, n_head = 8, n_kv = 2;
  const std::vector<SeqSpec> specs = {{0, 150}, {300, 70}, {90, 1}};
  for (WarmFormat f : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
      for (int32_t hd : {64, 128}) {
        SCOPED_TRACE(::testing::Message() << warm_format_name(f) << " " << kv_dtype_name(dtype) << " head_dim " << hd);
        const int32_t span = warm_span(f, bs);
        int32_t total = 0, warm_groups = 0;
        for (const auto& sp : specs) {
          const int32_t nb = (sp.start_pos + sp.n_q + bs - 1) / bs;
          total += nb;
          warm_groups += nb / 2 / span;  // the older half, whole groups
        }
        std::vector<BlockId> ids(static_cast<size_t>(total));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        KvLayer kv(dtype, bs, n_kv, hd, total, f, warm_groups);
        fill_blocks(kv, ids, rng);
        std::vector<std::vector<BlockId>> tables;
        std::vector<std::pair<size_t, size_t>> to_host;  // (sequence, table index)
        std::vector<AttentionSeq> seqs;
        int32_t used = 0, q_rows = 0, slot = 0;
        for (const auto& sp : specs) {
          const int32_t nb = (sp.start_pos + sp.n_q + bs - 1) / bs;
          std::vector<BlockId> table(ids.begin() + used, ids.begin() + used + nb);
          used += nb;
          const int32_t groups = nb / 2 / span;
          for (int32_t g = 0; g < groups; ++g, ++slot) {
            warm_encode(f, kv.host, table.data() + g * span, span, kv.hwk.data() + slot * kv.host.warm_k_slot_bytes,
                        kv.hwv.data() + slot * kv.host.warm_v_slot_bytes);
            for (int32_t j = 0; j < span; ++j) table[static_cast<size_t>(g * span + j)] = total + slot * span + j;
          }
          for (int32_t b = groups * span; b + 1 < nb; b += 2) to_host.emplace_back(tables.size(), b);
          tables.push_back(std::move(table));
          seqs.push_back({q_rows, sp.n_q, sp.start_pos, nullptr, nb});
          q_rows += sp.n_q;
        }
        ASSERT_FALSE(to_host.empty());
        kv.upload(be());
        const int64_t bstride = kv.host.block_stride_bytes();
        const int64_t k_off = 256, v_off = k_off + bstride;
        const int64_t slot_bytes = (v_off + bstride + 255) / 256 * 256;
        std::unique_ptr<DeviceBuffer> host_mem =
            be().allocate(static_cast<uint64_t>(slot_bytes) * to_host.size(), MemoryUse::kPinnedHost);
        std::memset(host_mem->data(), 0xff, static_cast<size_t>(slot_bytes) * to_host.size());
        const int32_t host_base = total + warm_groups * span + 5;
        const std::vector<uint8_t> junk(static_cast<size_t>(bstride), 0xff);
        for (size_t m = 0; m < to_host.size(); ++m) {
          const auto [i, b] = to_host[m];
          const BlockId id = tables[i][b];
          uint8_t* dst = host_mem->data() + static_cast<int64_t>(m) * slot_bytes;
          std::memcpy(dst + k_off, kv.hk.data() + id * bstride, static_cast<size_t>(bstride));
          std::memcpy(dst + v_off, kv.hv.data() + id * bstride, static_cast<size_t>(bstride));
          be().copy_to_device(kv.dev.k + id * bstride, junk.data(), junk.size());
          be().copy_to_device(kv.dev.v + id * bstride, junk.data(), junk.size());
          tables[i][b] = host_base + static_cast<int32_t>(m);
        }
        for (size_t i = 0; i < seqs.size(); ++i) seqs[i].blocks = tables[i].data();
        for (KvLayerView* v : {&kv.dev, &kv.host}) {
          v->host_base = host_base;
          v->host = host_mem->data();
          v->host_slot_bytes = slot_bytes;
          v->host_k_offset = k_off;
          v->host_v_offset = v_off;
        }
        const auto q = random_floats(static_cast<size_t>(q_rows * n_head * hd), rng, -2.0f, 2.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        std::vector<float> ref(q.size());
        cpu::ref::paged_attention(q.data(), kv.host, seqs, n_head, scale, ref.data());
        const DevArray dq = upload(be(), q, q_rows, n_head * hd), dout = alloc(be(), q_rows, n_head * hd);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
        const int64_t before = cuda::attn::mma_launches();
#endif
        be().paged_attention(dq.view, kv.dev, seqs, n_head, scale, dout.view);
        const std::vector<float> got = download(be(), dout.view);
        EXPECT_LE(max_abs_diff(got, ref), 2e-5);
        EXPECT_EQ(count_nonfinite(got), 0);
#if defined(STRATA_OPS_TEST_CUDA) && defined(STRATA_HAVE_CUDA)
        if (cuda::attn::mma_enabled() && cuda::attn::mma_warm_enabled()) {
          EXPECT_GT(cuda::attn::mma_launches(), before) << "not the tensor-core kernel";
        }
#endif
      }
    }
  }
}

// rope_kv_store_attention (the attention block from its raw projections; one decode kernel on
// CUDA) against rope_kv_store then paged_attention on the same backend: the same output bits and
// the same KV arena bytes, for decode batches (contexts from the first token to thousands, ending
// mid-block and on a block boundary, tables mixing hot and warm blocks), every hot dtype, GQA 1..8,
// head_dim 32..128, NORM and NEOX RoPE with partial rotation and llama3 factors, positions apart
// from the cache index (as after eviction); and a prefill-shaped batch (the two ops on every backend).
TEST_P(BackendOps, RopeKvStoreAttentionEqualsTheOpsOneByOne) {
  std::mt19937 rng(41);
  auto many_then = [](int32_t n, std::vector<int32_t> ctx) {  // ctx, then n short contexts 3, 10, 17, ...
    for (int32_t i = 0; i < n; ++i) ctx.push_back(3 + 7 * i);
    return ctx;
  };
  const std::vector<float> factors = random_floats(64, rng, 1.0f, 8.0f);
  const float* dfactors = upload_vector(be(), factors);
  struct Case {
    KvDtype dtype;
    int32_t bs, n_head, n_kv, head_dim, n_rot;
    bool neox, use_factors;
    WarmFormat warm;
    std::vector<int32_t> ctx;  // start_pos of each sequence's new token
    int32_t n_q = 1;           // > 1: a prefill-shaped batch
    int32_t pos_offset = 0;    // RoPE position = start_pos + pos_offset
  };
  const std::vector<Case> cases = {
      {KvDtype::kF16, 16, 32, 4, 64, 64, false, false, WarmFormat::kNone, {0}},
      {KvDtype::kF16, 16, 32, 4, 64, 64, false, false, WarmFormat::kNone, {37}},
      {KvDtype::kF16, 16, 8, 2, 64, 64, false, true, WarmFormat::kNone, {0, 15, 16, 37, 100, 700, 2500}},
      {KvDtype::kBF16, 16, 8, 1, 128, 64, true, false, WarmFormat::kNone, {5, 63, 64, 1000}},
      {KvDtype::kF32, 7, 4, 4, 32, 32, false, false, WarmFormat::kNone, {0, 6, 7, 50, 300}, 1, 1000},
      {KvDtype::kF16, 16, 16, 2, 128, 128, true, true, WarmFormat::kInt8, {70, 200, 33}},
      {KvDtype::kF16, 16, 6, 3, 64, 64, false, false, WarmFormat::kInt4, {130, 40}},
      {KvDtype::kF32, 16, 8, 2, 64, 64, false, false, WarmFormat::kFp8, {90}},
      {KvDtype::kF16, 16, 8, 2, 64, 64, false, false, WarmFormat::kNone, {0, 40}, 5},
      // Many sequences and two long ones: CUDA's latency kernel then takes fewer splits than the
      // contexts' rounds of keys, and the new key falls in a split's second or third round.
      {KvDtype::kF16, 16, 8, 2, 64, 64, false, false, WarmFormat::kNone, many_then(31, {3000, 1300})},
      {KvDtype::kBF16, 16, 16, 2, 128, 128, true, true, WarmFormat::kNone, many_then(14, {3000, 1300})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << kv_dtype_name(c.dtype) << " block " << c.bs << " heads " << c.n_head << "/"
                                      << c.n_kv << " head_dim " << c.head_dim << " n_rot " << c.n_rot << " neox "
                                      << c.neox << " warm " << warm_format_name(c.warm) << " n_q " << c.n_q);
    const int32_t span = c.warm == WarmFormat::kNone ? 1 : warm_span(c.warm, c.bs);
    int32_t total = 0, warm_groups = 0;
    for (int32_t p : c.ctx) {
      const int32_t nb = (p + c.n_q + c.bs - 1) / c.bs;
      total += nb;
      if (c.warm != WarmFormat::kNone) warm_groups += (nb - 1) / span;
    }
    std::vector<BlockId> ids(static_cast<size_t>(total));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    KvLayer a(c.dtype, c.bs, c.n_kv, c.head_dim, total, c.warm, warm_groups);
    KvLayer b(c.dtype, c.bs, c.n_kv, c.head_dim, total, c.warm, warm_groups);
    fill_blocks(a, ids, rng);
    std::vector<std::vector<BlockId>> tables;
    std::vector<AttentionSeq> seqs;
    std::vector<int32_t> pos, slots;
    int32_t used = 0, rows = 0, wslot = 0;
    for (int32_t p : c.ctx) {
      const int32_t nb = (p + c.n_q + c.bs - 1) / c.bs;
      std::vector<BlockId> table(ids.begin() + used, ids.begin() + used + nb);
      used += nb;
      for (int32_t i = 0; i < c.n_q; ++i) {
        pos.push_back(p + i + c.pos_offset);
        slots.push_back(table[static_cast<size_t>((p + i) / c.bs)] * c.bs + (p + i) % c.bs);
      }
      if (c.warm != WarmFormat::kNone) {
        for (int32_t g = 0; g < (nb - 1) / span; ++g, ++wslot) {
          warm_encode(c.warm, a.host, table.data() + g * span, span, a.hwk.data() + wslot * a.host.warm_k_slot_bytes,
                      a.hwv.data() + wslot * a.host.warm_v_slot_bytes);
          for (int32_t j = 0; j < span; ++j) table[static_cast<size_t>(g * span + j)] = total + wslot * span + j;
        }
      }
      tables.push_back(std::move(table));
      seqs.push_back({rows, c.n_q, p, nullptr, nb});
      rows += c.n_q;
    }
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].blocks = tables[i].data();
    b.hk = a.hk;
    b.hv = a.hv;
    b.hwk = a.hwk;
    b.hwv = a.hwv;
    a.upload(be());
    b.upload(be());
    RopeParams rp;
    rp.n_rot = c.n_rot;
    rp.freq_base = 500000.0f;
    rp.neox = c.neox;
    rp.freq_factors = c.use_factors ? dfactors : nullptr;
    const int64_t qw = int64_t{c.n_head} * c.head_dim, kw = int64_t{c.n_kv} * c.head_dim;
    const auto q = random_floats(static_cast<size_t>(rows * qw), rng, -2.0f, 2.0f);
    const auto k = random_floats(static_cast<size_t>(rows * kw), rng, -2.0f, 2.0f);
    const auto v = random_floats(static_cast<size_t>(rows * kw), rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const DevArray q1 = upload(be(), q, rows, qw), k1 = upload(be(), k, rows, kw), v1 = upload(be(), v, rows, kw);
    const DevArray q2 = upload(be(), q, rows, qw), k2 = upload(be(), k, rows, kw), v2 = upload(be(), v, rows, kw);
    const DevArray o1 = alloc(be(), rows, qw), o2 = alloc(be(), rows, qw);
    // CUDA, Q4_K GEMVs on 8-bit x: after such a GEMV, a decode attention that the latency kernel
    // takes (no warm tier, head_dim % 32 == 0) writes its output's 8-bit form too, and the O-like
    // GEMV after it reads that without a quantization launch of its own, with the bits of the same
    // GEMV over a copy of the output (which its own launch quantizes); other batches: the launch.
    const bool xq_check = cuda_gemv_xq(GgmlType::kQ4_K) && rows <= 8 && qw % 256 == 0;
    const char* attn_xq = std::getenv("STRATA_CUDA_ATTN_XQ");  // "0": the A/B switch that turns it off
    const bool xq_folds = c.n_q == 1 && c.warm == WarmFormat::kNone && c.head_dim % 32 == 0 &&
                          (attn_xq == nullptr || std::string(attn_xq) != "0");
    std::optional<cpu::test::TestMatrix> mo;
    WeightMatrix wo{};
    std::vector<int64_t> xq_counts;  // launches of the two GEMVs after the attentions
    if (xq_check) {
      mo = random_matrix(GgmlType::kQ4_K, 48, qw, rng);
      wo = be().upload_matrix(mo->w);
      const DevArray warm = upload(be(), random_floats(static_cast<size_t>(rows * qw), rng), rows, qw);
      const DevArray y0 = alloc(be(), rows, 48);
      be().matmul(wo, warm.view, y0.view);  // the last GEMV read 8-bit x
    }
    const DevArray y1 = alloc(be(), rows, 48), y2 = alloc(be(), rows, 48), y3 = alloc(be(), rows, 48);
    be().rope_kv_store(q1.view, k1.view, v1.view, pos, c.n_head, c.n_kv, c.head_dim, rp, a.dev, slots);
    be().paged_attention(q1.view, a.dev, seqs, c.n_head, scale, o1.view);
    if (xq_check) {
      const int64_t l0 = xq_launch_count();
      be().matmul(wo, o1.view, y1.view);
      xq_counts.push_back(xq_launch_count() - l0);
    }
    be().rope_kv_store_attention(q2.view, k2.view, v2.view, pos, c.n_head, c.n_kv, c.head_dim, rp, b.dev, slots, seqs,
                                 scale, o2.view);
    if (xq_check) {
      const int64_t l0 = xq_launch_count();
      be().matmul(wo, o2.view, y2.view);
      xq_counts.push_back(xq_launch_count() - l0);
    }
    const auto out1 = download(be(), o1.view), out2 = download(be(), o2.view);
    ASSERT_EQ(out1.size(), out2.size());
    EXPECT_EQ(0, std::memcmp(out1.data(), out2.data(), out1.size() * sizeof(float))) << "attention output differs";
    if (xq_check) {
      const DevArray copy = upload(be(), out2, rows, qw);
      be().matmul(wo, copy.view, y3.view);
      const auto want = download(be(), y3.view);
      EXPECT_EQ(download(be(), y1.view), want) << "GEMV after paged_attention";
      EXPECT_EQ(download(be(), y2.view), want) << "GEMV after rope_kv_store_attention";
      const int64_t launches = xq_folds ? 0 : 1;
      EXPECT_EQ(xq_counts, std::vector<int64_t>({launches, launches})) << "quantization launches of the two GEMVs";
    }
    EXPECT_EQ(download_bytes(be(), a.dev.k, a.hk.size()), download_bytes(be(), b.dev.k, b.hk.size())) << "K arena";
    EXPECT_EQ(download_bytes(be(), a.dev.v, a.hv.size()), download_bytes(be(), b.dev.v, b.hv.size())) << "V arena";
    // Decode batches asking for importance (the last sequence does not): the fused kernel reports
    // the same attention mass as the two ops, bit for bit on CUDA (the decode kernel writes its
    // scores for importance_decode_mass on both paths). The arenas already hold the new rows: storing them
    // again changes nothing.
    if (c.n_q != 1 || !be().reports_attention_importance()) continue;
    std::vector<std::vector<float>> mass1(seqs.size()), mass2(seqs.size());
    auto with_mass = [&](std::vector<std::vector<float>>& mass) {
      std::vector<AttentionSeq> s2 = seqs;
      for (size_t i = 0; i < s2.size(); ++i) {
        mass[i].assign(static_cast<size_t>(s2[i].start_pos + 1), 0.0f);
        if (i + 1 < s2.size() || s2.size() == 1) s2[i].importance = mass[i].data();
      }
      return s2;
    };
    const std::vector<AttentionSeq> s1 = with_mass(mass1), s2 = with_mass(mass2);
    const DevArray q3 = upload(be(), q, rows, qw), k3 = upload(be(), k, rows, kw), v3 = upload(be(), v, rows, kw);
    const DevArray q4 = upload(be(), q, rows, qw), k4 = upload(be(), k, rows, kw), v4 = upload(be(), v, rows, kw);
    be().rope_kv_store(q3.view, k3.view, v3.view, pos, c.n_head, c.n_kv, c.head_dim, rp, a.dev, slots);
    be().paged_attention(q3.view, a.dev, s1, c.n_head, scale, o1.view);
    be().collect_importance();
    be().finish_importance();
    be().rope_kv_store_attention(q4.view, k4.view, v4.view, pos, c.n_head, c.n_kv, c.head_dim, rp, b.dev, slots, s2,
                                 scale, o2.view);
    be().collect_importance();
    be().finish_importance();
    const auto out3 = download(be(), o1.view), out4 = download(be(), o2.view);
    EXPECT_EQ(0, std::memcmp(out3.data(), out4.data(), out3.size() * sizeof(float))) << "attention output with importance";
    EXPECT_EQ(0, std::memcmp(out1.data(), out3.data(), out1.size() * sizeof(float))) << "importance changed the output";
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (be().kind() == DeviceKind::kCuda) {
        EXPECT_EQ(mass1[i], mass2[i]) << "sequence " << i;
      } else {  // the CPU threads' partial sums meet in the order they finish: equal to rounding
        for (size_t k = 0; k < mass1[i].size(); ++k) EXPECT_NEAR(mass1[i][k], mass2[i][k], 1e-5f) << i << " key " << k;
      }
      if (s1[i].importance == nullptr) continue;
      // One query row: its mass over the keys sums to the number of query heads.
      double sum = 0;
      for (float m : mass1[i]) sum += m;
      EXPECT_NEAR(sum, c.n_head, 1e-3 * c.n_head) << "sequence " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendOps, ::testing::ValuesIn(op_test_devices()), device_param_name);

#ifndef STRATA_OPS_TEST_CUDA

TEST(BackendChoice, CpuIsAlwaysThereAndAutoResolvesToAnAvailableDevice) {
  const auto devs = available_devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs[0], DeviceKind::kCpu);
  EXPECT_NE(std::find(devs.begin(), devs.end(), resolve_device(DeviceKind::kAuto)), devs.end());
  EXPECT_EQ(make_backend(BackendOptions{DeviceKind::kCpu, 2})->thread_pool() != nullptr, true);
  for (DeviceKind d : {DeviceKind::kAuto, DeviceKind::kCpu, DeviceKind::kCuda}) {
    EXPECT_EQ(device_kind_from_name(device_kind_name(d)), d);
  }
  EXPECT_EQ(device_kind_from_name("gpu"), std::nullopt);
}

// The CPU backend's weights: upload_matrix copies F32/F16/BF16/Q8_0 and grouped quantized matrices into huge-page arenas
// (a new address, 64-byte aligned, the same bytes and shape; F16 in groups of 4 rows), unless
// BackendOptions::mapped_weights (--mmap-weights), which gives the host matrix back, as it does for
// K-quants; tables (upload_table) stay where they are either way. Products are the same bits from
// the copy as from the mapping, except Q4_K's, Q6_K's, Q8_0's and Q4_0's, whose copies are in groups
// of 16 rows with their own kernels (within the kernels' error bound); a Q5_1 row of one block has
// no whole pair of blocks, so it stays in the mapping.
TEST(CpuBackendWeights, UploadCopiesIntoHugePagesUnlessMapped) {
  std::mt19937 rng(41);
  BackendOptions mapped_opts{DeviceKind::kCpu, 2};
  mapped_opts.mapped_weights = true;
  const std::unique_ptr<Backend> copy = make_backend(BackendOptions{DeviceKind::kCpu, 2}), mapped = make_backend(mapped_opts);
  for (auto [type, rows, cols] : {std::tuple{GgmlType::kF16, int64_t{101}, int64_t{256}},
                                  std::tuple{GgmlType::kQ8_0, int64_t{33}, int64_t{512}},
                                  std::tuple{GgmlType::kQ4_K, int64_t{64}, int64_t{512}},
                                  std::tuple{GgmlType::kQ6_K, int64_t{7}, int64_t{768}},
                                  std::tuple{GgmlType::kQ4_0, int64_t{9}, int64_t{64}},
                                  std::tuple{GgmlType::kQ5_1, int64_t{9}, int64_t{32}},
                                  std::tuple{GgmlType::kF32, int64_t{3}, int64_t{40}}}) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto m = random_matrix(type, rows, cols, rng);
    const uint64_t bytes = m.w.row_bytes * static_cast<uint64_t>(rows);
    const WeightMatrix c = copy->upload_matrix(m.w), p = mapped->upload_matrix(m.w);
    if (type == GgmlType::kQ5_1) {
      EXPECT_EQ(c.data, m.w.data) << "rows of one block of 32 (no whole pair for the groups) stay in the mapping";
    } else {
      EXPECT_NE(c.data, m.w.data);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data) % 64, 0u);
    }
    if (type == GgmlType::kF16) {
      // F16/BF16 rows of a multiple of 64 bytes: in groups of 4 interleaved line by line (op_types.h),
      // the last group's missing rows zero.
      ASSERT_EQ(c.row_group, WeightMatrix::kRowGroup);
      const uint64_t g = c.row_group, lines = c.row_bytes / 64, groups = (static_cast<uint64_t>(rows) + g - 1) / g;
      for (uint64_t r = 0; r < groups * g; ++r) {
        for (uint64_t l = 0; l < lines; ++l) {
          const uint8_t* got = c.data + (r / g) * g * c.row_bytes + (g * l + r % g) * 64;
          if (r < static_cast<uint64_t>(rows)) {
            ASSERT_EQ(std::memcmp(got, m.w.data + r * m.w.row_bytes + l * 64, 64), 0) << "row " << r << " line " << l;
          } else {
            ASSERT_TRUE(std::all_of(got, got + 64, [](uint8_t b) { return b == 0; })) << "padding row " << r;
          }
        }
      }
      EXPECT_EQ(p.row_group, 0) << "--mmap-weights keeps the file's layout";
    } else if (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
      // Q4_K and Q6_K of whole super-blocks, Q8_0 and Q4_0 of whole pairs of blocks: in groups of 16 rows
      // (cpu/quant_groups.h), each row's blocks
      // the bytes of the file, reordered.
      ASSERT_EQ(c.row_group, WeightMatrix::kQuantGroup);
      std::vector<uint8_t> row(c.row_bytes);
      for (int64_t r = 0; r < rows; ++r) {
        cpu::read_quant_group_row(c, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), m.w.data + static_cast<uint64_t>(r) * m.w.row_bytes, c.row_bytes), 0) << r;
      }
      EXPECT_EQ(p.row_group, 0) << "--mmap-weights keeps the file's layout";
    } else {
      EXPECT_EQ(c.row_group, 0);
      EXPECT_EQ(std::memcmp(c.data, m.w.data, bytes), 0);
    }
    EXPECT_EQ(c.type, m.w.type);
    EXPECT_EQ(c.rows, rows);
    EXPECT_EQ(c.cols, cols);
    EXPECT_EQ(c.row_bytes, m.w.row_bytes);
    EXPECT_EQ(p.data, m.w.data);
    EXPECT_EQ(copy->upload_table(m.w).data, m.w.data);
    EXPECT_EQ(mapped->upload_table(m.w).data, m.w.data);
    for (int64_t n : {1, 5}) {
      const auto x = random_floats(static_cast<size_t>(n * cols), rng);
      auto product = [&](Backend& b, const WeightMatrix& w) {
        const DevArray dx = upload(b, x, n, cols), dy = alloc(b, n, rows);
        b.matmul(w, dx.view, dy.view);
        return download(b, dy.view);
      };
      if (c.row_group == WeightMatrix::kQuantGroup) {  // the grouped kernels' own summation order: within their bound
        const std::vector<float> a = product(*copy, c), b = product(*mapped, p);
        EXPECT_LE(max_abs_diff(a, b), 4e-5 * rms(b));
      } else {
        EXPECT_EQ(product(*copy, c), product(*mapped, p));
      }
    }
  }
}

#endif  // STRATA_OPS_TEST_CUDA

#if !defined(STRATA_OPS_TEST_CUDA)
TEST(BackendChoice, CudaWithoutCudaBuildFailsClearly) {
  if (built_with_cuda()) GTEST_SKIP() << "this build has the CUDA backend";
  EXPECT_EQ(resolve_device(DeviceKind::kAuto), DeviceKind::kCpu);
  try {
    make_backend(BackendOptions{DeviceKind::kCuda, 1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace strata
