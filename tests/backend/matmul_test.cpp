// matmul / matmul_multi against the scalar reference (kernels_ref.h) for every weight type, on every
// SIMD target this CPU supports: odd shapes, 1..100 tokens, 1 vs several threads, and the property
// the forward pass relies on for consistent logits: a token's outputs are the same bits whether it
// is computed alone or in a batch.
//
// Error bounds (relative to the RMS of the reference outputs):
//   F32/F16/BF16 weights: max error 1e-5 (f32 accumulation of exactly widened weights).
//   Quantized weights vs the f32 reference: RMS error 1e-2 and max error 6e-2 (activations are
//     quantized to 8 bits per block of 32 or 256; expected RMS error ~0.5%).
//   Quantized weights vs the same arithmetic on the 8-bit activations in double: max 2e-5 (this
//     pins every unpacking detail of the weight blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_ref.h"
#include "backend/cpu/matmul_float.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/kernel_test_util.h"
#include "core/error.h"
#include "gguf/quant.h"

namespace strata::cpu {
namespace {

using test::random_floats;
using test::random_matrix;

constexpr GgmlType kFloatTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16};
constexpr GgmlType kQuantTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                    GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                                    GgmlType::kQ5_K, GgmlType::kQ6_K};
constexpr int64_t kTokenCounts[] = {1, 2, 3, 4, 7, 8, 9, 16, 64, 100};

bool is_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// y = W · x̂ᵀ in double, where x̂ are the activations as the kernels quantize them.
std::vector<float> reference_on_quantized_acts(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
  const int32_t block = quant_act_block(w.type);
  std::vector<uint8_t> mem(QuantActs::bytes(n, w.cols, block) + 64);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
  const QuantActs a = QuantActs::carve(base, n, w.cols, block);
  quantize_acts(x.data(), 0, n, a);
  std::vector<float> xq(x.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < w.cols; ++k) xq[t * w.cols + k] = a.d[t * (w.cols / block) + k / block] * a.qs[t * w.cols + k];
  }
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  ref::matmul(w, xq.data(), n, y.data());
  return y;
}

class Matmul : public ::testing::TestWithParam<int64_t> {};

// Sets the environment variable `var` to `value`, then expects `f` to throw E naming var=value.
template <typename E, typename F>
void expect_env_rejected(const char* var, const char* value, F&& f) {
  setenv(var, value, 1);
  try {
    f();
    ADD_FAILURE() << "no error for " << var << "=" << value;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(var) + "=" + value), std::string::npos) << e.what();
  }
}

void check_type(GgmlType type, int64_t rows, int64_t cols, ThreadPool& pool1, ThreadPool& pool3, std::mt19937& rng) {
  KernelScratch scratch;
  const auto m = random_matrix(type, rows, cols, rng);
  for (int64_t n : kTokenCounts) {
    SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " rows " << rows << " cols " << cols << " n " << n);
    const auto x = random_floats(static_cast<size_t>(n * cols), rng);
    std::vector<float> ref(static_cast<size_t>(n * rows)), y1(ref.size()), y3(ref.size());
    ref::matmul(m.w, x.data(), n, ref.data());
    matmul(m.w, x.data(), n, y1.data(), pool1, scratch);
    matmul(m.w, x.data(), n, y3.data(), pool3, scratch);
    ASSERT_TRUE(test::bitwise_equal(y1.data(), y3.data(), y1.size())) << "1 vs 3 threads differ";
    const double scale = test::rms(ref);
    if (is_float(type)) {
      EXPECT_LE(test::max_abs_diff(y3, ref), 1e-5 * scale);
    } else {
      EXPECT_LE(test::rms_diff(y3, ref), 1e-2 * scale);
      EXPECT_LE(test::max_abs_diff(y3, ref), 6e-2 * scale);
      const auto exact = reference_on_quantized_acts(m.w, x, n);
      EXPECT_LE(test::max_abs_diff(y3, exact), 2e-5 * test::rms(exact));
    }
    // The first, a middle and the last token alone give the same bits as in the batch.
    for (int64_t t : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> alone(static_cast<size_t>(rows));
      matmul(m.w, x.data() + t * cols, 1, alone.data(), pool3, scratch);
      ASSERT_TRUE(test::bitwise_equal(alone.data(), y3.data() + t * rows, static_cast<size_t>(rows)))
          << "token " << t << " alone differs from the batch";
    }
  }
}

TEST_P(Matmul, FloatTypesMatchTheReference) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  std::mt19937 rng(1);
  for (GgmlType type : kFloatTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 100}, {64, 131}, {5, 768}, {19, 7}}) {
      check_type(type, rows, cols, pool1, pool3, rng);
    }
  }
}

// One token walks the rows in 4-row tiles or one row at a time (decode_order.h, chosen at load by
// speed, per type): both give the reference, and a token alone the bits it has in a batch.
TEST_P(Matmul, FloatTypesGiveTheSameBitsInEitherDecodeOrder) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  for (GgmlType type : kFloatTypes) {
    const DecodeOrder was = decode_order(type);
    for (DecodeOrder order : {DecodeOrder::kTiles, DecodeOrder::kRows}) {
      SCOPED_TRACE(decode_order_name(order));
      set_decode_order(type, order);
      std::mt19937 rng(2);
      // Full vectors per row (8 lanes on AVX2, 16 on AVX-512): an even count and a tail (100), even
      // (768), none (7), odd (120: 15 / 7 and a tail; 1000: 125 / 62 and a tail) on every target,
      // so that a kernel splitting a row's vectors between accumulators meets every remainder.
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{37, 100}, {9, 768}, {19, 7}, {13, 120}, {6, 1000}}) {
        check_type(type, rows, cols, pool1, pool3, rng);
      }
    }
    set_decode_order(type, was);
  }
}

// CpuBackend::upload_matrix copies F16/BF16 rows of a multiple of 64 bytes in groups of 4 rows,
// interleaved line by line (WeightMatrix::row_group): every path over such a matrix (one token's
// tiles, the narrow few-token tiles, the widened slices of many tokens, the embedding gather) must
// give the bits it gives over the rows as stored, and the padding rows of the last group must never
// be read into an output.
TEST_P(Matmul, RowsInGroupsGiveTheBitsOfRowsAsStored) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  CpuBackend backend(2);
  CpuBackend mapped(2, /*mapped_weights=*/true);
  std::mt19937 rng(5);
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 64}, {13, 768}, {6, 1024}, {1, 32}, {4, 96}, {9, 100}}) {
      SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " rows " << rows << " cols " << cols);
      const auto m = random_matrix(type, rows, cols, rng);
      const WeightMatrix up = backend.upload_matrix(m.w);
      const bool groups = cols % 32 == 0;  // 64-byte rows
      ASSERT_EQ(up.row_group, groups ? WeightMatrix::kRowGroup : 0);
      ASSERT_NE(up.data, m.w.data);
      EXPECT_EQ(mapped.upload_matrix(m.w).row_group, 0) << "--mmap-weights keeps the file's layout";
      KernelScratch scratch;
      const GroupPrefetch was = group_prefetch(type);
      for (int64_t n : kTokenCounts) {
        SCOPED_TRACE(n);
        const auto x = random_floats(static_cast<size_t>(n * cols), rng);
        std::vector<float> plain(static_cast<size_t>(n * rows)), grouped1(plain.size()), grouped3(plain.size());
        matmul(m.w, x.data(), n, plain.data(), pool1, scratch);
        for (GroupPrefetch p : kGroupPrefetches) {
          SCOPED_TRACE(group_prefetch_name(p));
          set_group_prefetch(type, p);
          matmul(up, x.data(), n, grouped1.data(), pool1, scratch);
          matmul(up, x.data(), n, grouped3.data(), pool3, scratch);
          ASSERT_TRUE(test::bitwise_equal(plain.data(), grouped1.data(), plain.size()));
          ASSERT_TRUE(test::bitwise_equal(plain.data(), grouped3.data(), plain.size()));
        }
      }
      set_group_prefetch(type, was);
      std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
      for (int64_t r = 0; r < rows; ++r) {
        get_row(m.w, r, a.data());
        get_row(up, r, b.data());
        ASSERT_TRUE(test::bitwise_equal(a.data(), b.data(), a.size())) << "row " << r;
      }
      if (groups && rows > 4) {
        std::vector<float> y(static_cast<size_t>(rows)), x(static_cast<size_t>(cols), 1.0f);
        EXPECT_THROW(matmul_float_rows(up, x.data(), 1, y.data(), 2, rows, nullptr), std::invalid_argument)
            << "a range that starts inside a group";
      }
    }
  }
}

// CpuBackend::upload_matrix copies every quantized type (kQuantTypes) in groups of 16 rows
// (quant_groups.h), whose kernel keeps a row per vector lane: against the exact arithmetic on the quantized activations (as the
// rows-as-stored kernels), the same bits with 1 or 3 threads, each token alone as in its batch,
// the embedding gather equal to the rows as stored, nothing written past the rows asked (the last
// group's padding), and chunk ranges that end inside a group.
TEST_P(Matmul, KQuantsInQuantGroupsMatchTheExactArithmetic) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  CpuBackend backend(2);
  std::mt19937 rng(8);
  for (GgmlType type : kQuantTypes)
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {16, 768}, {1, 512}, {33, 2048}, {64, 256}, {8, 1024}}) {
    SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " rows " << rows << " cols " << cols);
    const auto m = random_matrix(type, rows, cols, rng);
    const WeightMatrix up = backend.upload_matrix(m.w);
    ASSERT_EQ(up.row_group, WeightMatrix::kQuantGroup);
    ASSERT_NE(up.data, m.w.data);
    KernelScratch scratch;
    const GroupPrefetch was = group_prefetch(type);
    for (int64_t n : kTokenCounts) {
      SCOPED_TRACE(n);
      const auto x = random_floats(static_cast<size_t>(n * cols), rng);
      const auto size = static_cast<size_t>(n * rows);
      std::vector<float> y1(size + 16, -7.0f), y3(size + 16, -7.0f);
      set_group_prefetch(type, GroupPrefetch::kSoftware);
      matmul(up, x.data(), n, y1.data(), pool1, scratch);
      matmul(up, x.data(), n, y3.data(), pool3, scratch);
      for (size_t i = size; i < size + 16; ++i) ASSERT_EQ(y1[i], -7.0f) << "written past the output";
      y1.resize(size);
      y3.resize(size);
      ASSERT_TRUE(test::bitwise_equal(y1.data(), y3.data(), size)) << "1 vs 3 threads differ";
      for (GroupPrefetch p : kGroupPrefetches) {  // software prefetch at any distance, or none: the same bits
        set_group_prefetch(type, p);
        std::vector<float> yp(size);
        matmul(up, x.data(), n, yp.data(), pool3, scratch);
        ASSERT_TRUE(test::bitwise_equal(y1.data(), yp.data(), size)) << group_prefetch_name(p);
      }
      set_group_prefetch(type, was);
      const auto exact = reference_on_quantized_acts(m.w, x, n);
      EXPECT_LE(test::max_abs_diff(y3, exact), 2e-5 * test::rms(exact));
      for (int64_t t : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> alone(static_cast<size_t>(rows));
        matmul(up, x.data() + t * cols, 1, alone.data(), pool3, scratch);
        ASSERT_TRUE(test::bitwise_equal(alone.data(), y3.data() + t * rows, static_cast<size_t>(rows)))
            << "token " << t << " alone differs from the batch";
      }
      // A chunk from a group boundary to a row inside a later group writes only its rows.
      if (rows > 20 && n <= 4) {
        const auto acts_x = x;
        std::vector<float> part(size, -9.0f);
        const int32_t block = quant_act_block(type);
        std::vector<uint8_t> mem(QuantActs::bytes(n, cols, block) + 64);
        auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
        const QuantActs acts = QuantActs::carve(base, n, cols, block);
        quantize_acts(acts_x.data(), 0, n, acts);
        matmul_quant_rows(up, acts, n, part.data(), 16, rows - 3);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const float v = part[static_cast<size_t>(t * rows + r)];
            if (r >= 16 && r < rows - 3) {
              ASSERT_EQ(v, y1[static_cast<size_t>(t * rows + r)]) << "t " << t << " r " << r;
            } else {
              ASSERT_EQ(v, -9.0f) << "t " << t << " r " << r << " outside the chunk";
            }
          }
        }
      }
    }
    std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
    for (int64_t r = 0; r < rows; ++r) {
      get_row(m.w, r, a.data());
      get_row(up, r, b.data());
      ASSERT_TRUE(test::bitwise_equal(a.data(), b.data(), a.size())) << "row " << r;
    }
    if (rows > 2) {
      const auto x = random_floats(static_cast<size_t>(cols), rng);
      std::vector<uint8_t> mem(QuantActs::bytes(1, cols, quant_act_block(type)) + 64);
      auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
      const QuantActs acts = QuantActs::carve(base, 1, cols, quant_act_block(type));
      quantize_acts(x.data(), 0, 1, acts);
      std::vector<float> y(static_cast<size_t>(rows));
      EXPECT_THROW(matmul_quant_rows(up, acts, 1, y.data(), 2, rows), std::invalid_argument)
          << "a range that starts inside a group";
    }
  }
  // With --mmap-weights the rows stay as stored.
  EXPECT_EQ(CpuBackend(1, /*mapped_weights=*/true).upload_matrix(random_matrix(GgmlType::kQ4_K, 4, 256, rng).w).row_group, 0)
      << "--mmap-weights keeps the file's layout";
  EXPECT_EQ(backend.upload_matrix(random_matrix(GgmlType::kQ8_0, 16, 96, rng).w).row_group, 0) << "no grouped kernel (a row of 3 blocks: no whole pairs)";
}

// The grouped kernel's integer dots are exact on every target and its float steps the same
// sequence, so the x86 targets (VNNI, maddubs + madd at 256 and 512 bits) give the same bits.
TEST(MatmulQuantGroups, X86TargetsGiveTheSameBits) {
  std::vector<int64_t> x86;
  for (int64_t t : test::targets_to_test()) {
    if ((t & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0) x86.push_back(t);
  }
  if (x86.size() < 2) GTEST_SKIP() << "fewer than two x86 SIMD targets on this CPU";
  ThreadPool pool(2);
  CpuBackend backend(2);
  KernelScratch scratch;
  std::mt19937 rng(9);
  for (GgmlType type : kQuantTypes) {
    const auto m = random_matrix(type, 45, 1024, rng);
    const WeightMatrix up = backend.upload_matrix(m.w);
    ASSERT_EQ(up.row_group, WeightMatrix::kQuantGroup);
    // Random activations, and activations at the ends of the 8-bit range: runs of 32 all +1 or all -1
    // (their quantized sums +-4064, the extremes of QuantActs::words' split sums), alternating by run.
    const auto random_x = random_floats(5 * 1024, rng);
    std::vector<float> extreme_x(5 * 1024);
    for (size_t i = 0; i < extreme_x.size(); ++i) {
      const size_t t = i / 1024, run = i % 1024 / 32;
      extreme_x[i] = t == 0 ? 1.0f : t == 1 ? -1.0f : t == 2 ? (run % 2 == 0 ? 1.0f : -1.0f) : t == 3 ? (run % 3 == 0 ? -1.0f : 0.5f) : random_x[i];
    }
    const std::vector<float>* const sets[] = {&random_x, &extreme_x};
    for (const std::vector<float>* x : sets) {
      std::vector<float> first;
      for (int64_t target : x86) {
        test::TargetScope scope(target);
        std::vector<float> y(5 * 45);
        matmul(up, x->data(), 5, y.data(), pool, scratch);
        if (first.empty()) {
          first = y;
        } else {
          EXPECT_TRUE(test::bitwise_equal(first.data(), y.data(), y.size()))
              << ggml_type_name(type) << " " << hwy::TargetName(target) << (x == &extreme_x ? " (extreme activations)" : "");
        }
      }
    }
  }
}

TEST(MatmulRowGroups, EnvironmentTurnsThemOff) {
  std::mt19937 rng(6);
  const auto m = random_matrix(GgmlType::kF16, 8, 64, rng);
  const auto q = random_matrix(GgmlType::kQ4_K, 8, 256, rng);
  setenv("STRATA_CPU_ROW_GROUPS", "0", 1);
  EXPECT_EQ(CpuBackend(1).upload_matrix(m.w).row_group, 0);
  EXPECT_EQ(CpuBackend(1).upload_matrix(q.w).row_group, 0);
  setenv("STRATA_CPU_ROW_GROUPS", "1", 1);
  EXPECT_EQ(CpuBackend(1).upload_matrix(m.w).row_group, WeightMatrix::kRowGroup);
  EXPECT_EQ(CpuBackend(1).upload_matrix(q.w).row_group, WeightMatrix::kQuantGroup);
  expect_env_rejected<Error>("STRATA_CPU_ROW_GROUPS", "yes", [] { CpuBackend b(1); });
  unsetenv("STRATA_CPU_ROW_GROUPS");
  // Software prefetch or none, chosen by the variable or measured.
  ThreadPool pool(2);
  setenv("STRATA_CPU_GROUP_PREFETCH", "hardware", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kF16, 768), GroupPrefetch::kHardware);
  setenv("STRATA_CPU_GROUP_PREFETCH", "software", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kBF16, 768), GroupPrefetch::kSoftware);
  setenv("STRATA_CPU_GROUP_PREFETCH", "software-16k", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kBF16, 768), GroupPrefetch::kSoftware16K);
  setenv("STRATA_CPU_GROUP_PREFETCH", "software-4k", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kF16, 768), GroupPrefetch::kSoftware4K);
  for (const GroupPrefetch p : kGroupPrefetches) EXPECT_EQ(parse_group_prefetch(group_prefetch_name(p)), p);
  EXPECT_EQ(parse_group_prefetch("software-8k"), std::nullopt);
  expect_env_rejected<std::invalid_argument>("STRATA_CPU_GROUP_PREFETCH", "none",
                                             [&] { (void)choose_group_prefetch(pool, GgmlType::kF16, 768); });
  setenv("STRATA_CPU_GROUP_PREFETCH", "auto", 1);
  const GroupPrefetch was = group_prefetch(GgmlType::kF16);
  const GroupPrefetch measured = choose_group_prefetch(pool, GgmlType::kF16, 1000);  // either: a measurement
  EXPECT_NE(std::find(std::begin(kGroupPrefetches), std::end(kGroupPrefetches), measured), std::end(kGroupPrefetches));
  EXPECT_EQ(group_prefetch(GgmlType::kF16), was) << "measuring changed the choice in use";
  EXPECT_THROW((void)choose_group_prefetch(pool, GgmlType::kF32, 768), std::invalid_argument);
  // The types of quant groups, likewise (their own distance for "software"); never a type not in groups.
  setenv("STRATA_CPU_GROUP_PREFETCH", "hardware", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kQ4_K, 2048), GroupPrefetch::kHardware);
  setenv("STRATA_CPU_GROUP_PREFETCH", "software-4k", 1);
  EXPECT_EQ(choose_group_prefetch(pool, GgmlType::kQ8_0, 2048), GroupPrefetch::kSoftware4K);
  setenv("STRATA_CPU_GROUP_PREFETCH", "auto", 1);
  const GroupPrefetch was_q6 = group_prefetch(GgmlType::kQ6_K);
  const GroupPrefetch measured_q6 = choose_group_prefetch(pool, GgmlType::kQ6_K, 1000);  // rounded down to 768 columns
  EXPECT_NE(std::find(std::begin(kGroupPrefetches), std::end(kGroupPrefetches), measured_q6), std::end(kGroupPrefetches));
  EXPECT_EQ(group_prefetch(GgmlType::kQ6_K), was_q6) << "measuring changed the choice in use";
  EXPECT_THROW((void)choose_group_prefetch(pool, GgmlType::kQ8_1, 2048), std::invalid_argument);
  EXPECT_THROW(set_group_prefetch(GgmlType::kIQ4_NL, GroupPrefetch::kHardware), std::invalid_argument);
  unsetenv("STRATA_CPU_GROUP_PREFETCH");
}

// The retuner with made-up timings: cost(epoch, i) seconds a byte for variant i. It tries each
// variant at the start, then runs the best in all but one epoch in kExploreEvery, switches only
// for a variant faster twice in a row against the epochs around it, and follows a change of costs.
TEST(MatmulRowGroups, RetunerFollowsTheFastestVariant) {
  PrefetchRetuner r;
  r.restart(GroupPrefetch::kSoftware);
  auto index = [](GroupPrefetch p) {
    return static_cast<size_t>(std::find(std::begin(kGroupPrefetches), std::end(kGroupPrefetches), p) - std::begin(kGroupPrefetches));
  };
  uint32_t epoch = 0;
  auto run_epochs = [&](auto&& cost, uint32_t epochs, std::array<uint32_t, 4>& runs) {
    for (uint32_t e = 0; e < epochs; ++e, ++epoch) {
      const GroupPrefetch first = r.pick();
      for (uint32_t c = 0; c < PrefetchRetuner::kEpochCalls; ++c) {
        const GroupPrefetch p = r.pick();
        ASSERT_EQ(p, first) << "one variant a whole epoch";
        r.record(1e6, 1e6 * cost(epoch, index(p)));
      }
      ++runs[index(first)];
    }
  };
  auto fixed = [](std::array<double, 4> c) { return [c](uint32_t, size_t v) { return c[v]; }; };
  std::array<uint32_t, 4> runs{};
  constexpr uint32_t E = PrefetchRetuner::kExploreEvery;
  // kSoftware, kHardware, kSoftware16K, kSoftware4K
  run_epochs(fixed({1.0, 0.7, 1.1, 1.2}), 8 + E * 30, runs);
  EXPECT_EQ(r.best(), GroupPrefetch::kHardware);
  EXPECT_EQ(r.epochs(), 8 + E * 30);
  for (size_t v = 0; v < 4; ++v) {
    if (v == index(GroupPrefetch::kHardware)) {
      EXPECT_GE(runs[v], 30 * (E - 1)) << "the best runs in all epochs but one in kExploreEvery";
    } else {
      EXPECT_GE(runs[v], 10u) << "explored: " << group_prefetch_name(kGroupPrefetches[v]);
      EXPECT_LE(runs[v], 14u) << "explored only: " << group_prefetch_name(kGroupPrefetches[v]);
    }
  }
  // A neighbour's burst: every epoch of the best from here on is slow once in 8 (epochs that an
  // exploration may sit next to); a variant that is not faster never becomes the best.
  runs = {};
  run_epochs([](uint32_t e, size_t v) { return v == 1 ? (e % 8 == 0 ? 3.0 : 0.7) : std::array{1.0, 0.7, 0.75, 1.2}[v]; },
             E * 24, runs);
  EXPECT_EQ(r.best(), GroupPrefetch::kHardware) << "switched on a burst";
  // (Each exploration here is followed by a burst, so each is explored again once: 2 epochs in E.)
  EXPECT_GE(runs[index(GroupPrefetch::kHardware)], 24 * (E - 2)) << "left the best on a burst";
  // The host changes: software 4 KiB ahead is now the fastest, hardware the slowest.
  runs = {};
  run_epochs(fixed({1.0, 1.5, 1.1, 0.6}), E * 12, runs);
  EXPECT_EQ(r.best(), GroupPrefetch::kSoftware4K);
  EXPECT_GE(runs[index(GroupPrefetch::kSoftware4K)], E * 7) << "found within 3 explorations' rounds";
  // Restarting keeps what was measured.
  r.restart(GroupPrefetch::kHardware);
  EXPECT_EQ(r.best(), GroupPrefetch::kSoftware4K);
  EXPECT_EQ(r.pick(), GroupPrefetch::kSoftware4K);
}

// Retuning on: one-token matmuls in groups keep their bits whatever variant runs, and a fixed
// choice turns it off.
TEST(MatmulRowGroups, RetuningKeepsTheBits) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  CpuBackend backend(2);
  KernelScratch scratch;
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto m = random_matrix(type, 40, 512, rng);
    const WeightMatrix up = backend.upload_matrix(m.w);
    ASSERT_NE(up.row_group, 0);
    const auto x = random_floats(512, rng);
    const GroupPrefetch was = group_prefetch(type);
    set_group_prefetch(type, GroupPrefetch::kSoftware);
    EXPECT_FALSE(group_prefetch_retuning(type));
    std::vector<float> fixed(40), y(40);
    matmul(up, x.data(), 1, fixed.data(), pool, scratch);
    enable_group_prefetch_retuning(type);
    EXPECT_TRUE(group_prefetch_retuning(type));
    std::set<GroupPrefetch> seen;
    for (uint32_t i = 0; i < PrefetchRetuner::kEpochCalls * (4 + PrefetchRetuner::kExploreEvery * 3); ++i) {
      matmul(up, x.data(), 1, y.data(), pool, scratch);
      seen.insert(group_prefetch(type));
      ASSERT_TRUE(test::bitwise_equal(fixed.data(), y.data(), y.size())) << "call " << i;
    }
    EXPECT_EQ(seen.size(), std::size(kGroupPrefetches)) << "every variant ran";
    set_group_prefetch(type, GroupPrefetch::kSoftware16K);
    EXPECT_FALSE(group_prefetch_retuning(type));
    matmul(up, x.data(), 1, y.data(), pool, scratch);
    EXPECT_EQ(group_prefetch(type), GroupPrefetch::kSoftware16K) << "fixed again";
    set_group_prefetch(type, was);
  }
  EXPECT_THROW(enable_group_prefetch_retuning(GgmlType::kIQ4_NL), std::invalid_argument);
}

TEST(MatmulDecodeOrder, EnvironmentChoosesOrMeasuresPerType) {
  ThreadPool pool(2);
  const GgmlType types[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_K, GgmlType::kQ6_K};
  DecodeOrder was[5];
  for (size_t i = 0; i < 5; ++i) was[i] = decode_order(types[i]);
  setenv("STRATA_CPU_DECODE_ORDER", "rows", 1);
  EXPECT_EQ(choose_decode_order(pool, GgmlType::kF16, 768), DecodeOrder::kRows);
  setenv("STRATA_CPU_DECODE_ORDER", "tiles", 1);
  EXPECT_EQ(choose_decode_order(pool, GgmlType::kBF16, 768), DecodeOrder::kTiles);
  EXPECT_EQ(choose_decode_order(pool, GgmlType::kQ6_K, 768), DecodeOrder::kTiles);
  expect_env_rejected<std::invalid_argument>("STRATA_CPU_DECODE_ORDER", "fast",
                                             [&] { (void)choose_decode_order(pool, GgmlType::kF16, 768); });
  setenv("STRATA_CPU_DECODE_ORDER", "auto", 1);
  for (GgmlType t : types) {
    SCOPED_TRACE(std::string(ggml_type_name(t)));
    const DecodeOrder measured = choose_decode_order(pool, t, 768);  // either: it is a measurement
    EXPECT_TRUE(measured == DecodeOrder::kRows || measured == DecodeOrder::kTiles);
  }
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(decode_order(types[i]), was[i]) << "measuring changed the order in use";
  // Q8_0 (one row at a time always) has no choice; a K-quant's width is rounded down to its block.
  EXPECT_THROW((void)choose_decode_order(pool, GgmlType::kQ8_0, 768), std::invalid_argument);
  EXPECT_THROW(set_decode_order(GgmlType::kQ8_0, DecodeOrder::kRows), std::invalid_argument);
  const DecodeOrder odd = choose_decode_order(pool, GgmlType::kQ4_K, 1000);
  EXPECT_TRUE(odd == DecodeOrder::kRows || odd == DecodeOrder::kTiles);
  unsetenv("STRATA_CPU_DECODE_ORDER");
  // One type's order leaves the others' alone.
  set_decode_order(GgmlType::kF16, DecodeOrder::kRows);
  set_decode_order(GgmlType::kBF16, DecodeOrder::kTiles);
  set_decode_order(GgmlType::kQ4_K, DecodeOrder::kRows);
  EXPECT_EQ(decode_order(GgmlType::kF16), DecodeOrder::kRows);
  EXPECT_EQ(decode_order(GgmlType::kBF16), DecodeOrder::kTiles);
  EXPECT_EQ(decode_order(GgmlType::kQ4_K), DecodeOrder::kRows);
  EXPECT_EQ(decode_order(GgmlType::kQ6_K), was[4]);
  for (size_t i = 0; i < 5; ++i) set_decode_order(types[i], was[i]);
}

TEST_P(Matmul, QuantizedTypesMatchTheReference) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  std::mt19937 rng(2);
  for (GgmlType type : kQuantTypes) {
    const bool k_quant = quant_act_block(type) == 256;
    for (int64_t cols : k_quant ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{96, 288}) {
      check_type(type, 37, cols, pool1, pool3, rng);
    }
  }
}

// Every type in `types`, row counts around the tile sizes, 1..9 tokens, 1 and 2 threads; each
// against the double-precision arithmetic on the quantized activations, and each token alone
// against the batch.
void check_small_batches_and_odd_rows(std::span<const GgmlType> types, std::mt19937& rng) {
  ThreadPool pool1(1), pool2(2);
  KernelScratch scratch;
  for (GgmlType type : types) {
    const int64_t cols = quant_act_block(type) == 256 ? 512 : 160;
    for (int64_t rows : {1, 3, 4, 5, 6, 7, 9, 33}) {
      const auto m = random_matrix(type, rows, cols, rng);
      for (int64_t n = 1; n <= 9; ++n) {
        SCOPED_TRACE(::testing::Message() << ggml_type_name(type) << " rows " << rows << " n " << n);
        const auto x = random_floats(static_cast<size_t>(n * cols), rng);
        std::vector<float> y1(static_cast<size_t>(n * rows)), y2(y1.size());
        matmul(m.w, x.data(), n, y1.data(), pool1, scratch);
        matmul(m.w, x.data(), n, y2.data(), pool2, scratch);
        ASSERT_TRUE(test::bitwise_equal(y1.data(), y2.data(), y1.size())) << "1 vs 2 threads differ";
        const auto exact = reference_on_quantized_acts(m.w, x, n);
        EXPECT_LE(test::max_abs_diff(y2, exact), 2e-5 * test::rms(exact));
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows));
          matmul(m.w, x.data() + t * cols, 1, alone.data(), pool2, scratch);
          ASSERT_TRUE(test::bitwise_equal(alone.data(), y2.data() + t * rows, static_cast<size_t>(rows)))
              << "token " << t << " alone differs from the batch";
        }
      }
    }
  }
}

// The one-token tiles (4 rows at a time, the rest alone) and the 512-bit K-quant steps.
TEST_P(Matmul, QuantizedSmallBatchesAndOddRows) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(4);
  check_small_batches_and_odd_rows(kQuantTypes, rng);
}

// The K-quants' one-token order (decode_order.h): 4-row tiles or one row at a time, row counts
// around the tile, against the exact arithmetic and each token alone against the batch (whose tiles
// do not depend on the order).
TEST_P(Matmul, KQuantsGiveTheSameBitsInEitherDecodeOrder) {
  test::TargetScope scope(GetParam());
  constexpr GgmlType kKQuants[] = {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                   GgmlType::kQ6_K};
  for (GgmlType type : kKQuants) {
    const DecodeOrder was = decode_order(type);
    for (DecodeOrder order : {DecodeOrder::kTiles, DecodeOrder::kRows}) {
      SCOPED_TRACE(decode_order_name(order));
      set_decode_order(type, order);
      std::mt19937 rng(5);
      check_small_batches_and_odd_rows(std::span<const GgmlType>(&type, 1), rng);
    }
    set_decode_order(type, was);
  }
}

// The portable Highway kernels of every quantized type (matmul_quant_hwy-inl.h), which x86 targets
// only use when forced: on every target here, including SCALAR (Highway's generic code; NEON and
// SVE take the same code with 8+ lanes), the same checks as above and against the f32 reference.
class MatmulHighwayForced : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { set_quant_highway_forced(true); }
  void TearDown() override { set_quant_highway_forced(false); }
};

TEST_P(MatmulHighwayForced, SmallBatchesAndOddRows) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(5);
  check_small_batches_and_odd_rows(kQuantTypes, rng);
}

TEST_P(MatmulHighwayForced, MatchesTheReference) {
  test::TargetScope scope(GetParam());
  ThreadPool pool1(1), pool3(3);
  // (The 1% RMS bound against the f32 reference is statistical, about the 8-bit activations: with
  // seed 6 one Q4_K case measured 1.03% on both paths alike. The 2e-5 bound is the kernel's.)
  std::mt19937 rng(2);
  for (GgmlType type : kQuantTypes) {
    const bool k_quant = quant_act_block(type) == 256;
    for (int64_t cols : k_quant ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{96, 288}) {
      check_type(type, 37, cols, pool1, pool3, rng);
    }
  }
}

// Forcing the Highway kernels changes the arithmetic on x86 (f32 lanes and their sum), so it is
// really another path: check that it ran by comparing against the default path, which must agree
// within the same bound but, for a long row, not bit for bit on every output.
TEST_P(MatmulHighwayForced, IsADifferentPathOnX86) {
  test::TargetScope scope(GetParam());
  if ((GetParam() & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) == 0) GTEST_SKIP() << "Highway is the only path here";
  ThreadPool pool(1);
  KernelScratch scratch;
  std::mt19937 rng(7);
  for (GgmlType type : kQuantTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto m = random_matrix(type, 64, 4096, rng);
    const auto x = random_floats(4096, rng);
    std::vector<float> hwy_y(64), intrin_y(64);
    matmul(m.w, x.data(), 1, hwy_y.data(), pool, scratch);
    set_quant_highway_forced(false);
    matmul(m.w, x.data(), 1, intrin_y.data(), pool, scratch);
    set_quant_highway_forced(true);
    EXPECT_LE(test::max_abs_diff(hwy_y, intrin_y), 4e-5 * test::rms(intrin_y));
    EXPECT_FALSE(test::bitwise_equal(hwy_y.data(), intrin_y.data(), hwy_y.size()));
  }
}

TEST_P(Matmul, MultiEqualsSeparateCalls) {
  test::TargetScope scope(GetParam());
  ThreadPool pool(2);
  KernelScratch scratch;
  std::mt19937 rng(3);
  const int64_t cols = 512;
  std::vector<test::TestMatrix> ms;
  ms.push_back(random_matrix(GgmlType::kF16, 70, cols, rng));
  ms.push_back(random_matrix(GgmlType::kQ4_K, 33, cols, rng));
  ms.push_back(random_matrix(GgmlType::kQ8_0, 50, cols, rng));
  ms.push_back(random_matrix(GgmlType::kF32, 9, cols, rng));
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{40}}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), rng);
    std::vector<std::vector<float>> fused(ms.size()), single(ms.size());
    std::vector<MatmulJob> jobs;
    for (size_t i = 0; i < ms.size(); ++i) {
      fused[i].resize(static_cast<size_t>(n * ms[i].w.rows));
      single[i].resize(fused[i].size());
      jobs.push_back({&ms[i].w, fused[i].data()});
      matmul(ms[i].w, x.data(), n, single[i].data(), pool, scratch);
    }
    matmul_multi(jobs, x.data(), n, pool, scratch);
    for (size_t i = 0; i < ms.size(); ++i) {
      EXPECT_TRUE(test::bitwise_equal(fused[i].data(), single[i].data(), fused[i].size()))
          << "job " << i << " n " << n;
    }
  }
}

// Few-token calls cut their rows in guided chunks (shrinking to the end) or fixed ones: every row
// is computed once either way, to the same bits, over several jobs and thread counts. Outputs start
// as NaN so that a row no chunk covers shows.
TEST(MatmulChunks, GuidedAndFixedComputeEveryRowToTheSameBits) {
  std::mt19937 rng(11);
  const int64_t cols = 256;
  std::vector<test::TestMatrix> ms;
  ms.push_back(random_matrix(GgmlType::kF16, 700, cols, rng));  // guided chunks of >= 128 of its rows
  ms.push_back(random_matrix(GgmlType::kQ4_K, 33, cols, rng));
  ms.push_back(random_matrix(GgmlType::kQ8_0, 1000, cols, rng));
  KernelScratch scratch;
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{15}}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n);
      const auto x = random_floats(static_cast<size_t>(n * cols), rng);
      std::vector<float> out[2][3];
      for (int v = 0; v < 2; ++v) {
        set_decode_chunks(v == 0 ? DecodeChunks::kGuided : DecodeChunks::kFixed);
        std::vector<MatmulJob> jobs;
        for (size_t i = 0; i < ms.size(); ++i) {
          out[v][i].assign(static_cast<size_t>(n * ms[i].w.rows), std::numeric_limits<float>::quiet_NaN());
          jobs.push_back({&ms[i].w, out[v][i].data()});
        }
        matmul_multi(jobs, x.data(), n, pool, scratch);
      }
      set_decode_chunks(DecodeChunks::kGuided);
      for (size_t i = 0; i < ms.size(); ++i) {
        std::vector<float> ref(out[0][i].size());
        ref::matmul(ms[i].w, x.data(), n, ref.data());
        EXPECT_LE(test::max_abs_diff(out[0][i], ref), 6e-2 * test::rms(ref)) << "job " << i;  // NaN fails too
        EXPECT_TRUE(test::bitwise_equal(out[0][i].data(), out[1][i].data(), out[0][i].size())) << "job " << i;
      }
    }
  }
}

TEST(MatmulChunks, EnvironmentChoosesThem) {
  setenv("STRATA_CPU_DECODE_CHUNKS", "fixed", 1);
  { CpuBackend b(1); }
  EXPECT_EQ(decode_chunks(), DecodeChunks::kFixed);
  setenv("STRATA_CPU_DECODE_CHUNKS", "guided", 1);
  { CpuBackend b(1); }
  EXPECT_EQ(decode_chunks(), DecodeChunks::kGuided);
  expect_env_rejected<Error>("STRATA_CPU_DECODE_CHUNKS", "even", [] { CpuBackend b(1); });
  unsetenv("STRATA_CPU_DECODE_CHUNKS");
  EXPECT_EQ(decode_chunks(), DecodeChunks::kGuided);
}

// STRATA_CPU_TARGET=NAME puts every kernel on that target (any case), for the process; a target this
// build does not run on this CPU is an error naming it.
TEST(SimdTarget, EnvironmentRestrictsTheKernelsToOneTarget) {
  const std::string best(simd_target_name());
  for (const int64_t t : test::targets_to_test()) {
    std::string name = hwy::TargetName(t);
    SCOPED_TRACE(name);
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(c));
    setenv("STRATA_CPU_TARGET", lower.c_str(), 1);
    CpuBackend b(1);
    EXPECT_EQ(simd_target_name(), name);
    EXPECT_EQ(b.description().rfind("cpu (" + name + ",", 0), 0u) << b.description();
  }
  expect_env_rejected<Error>("STRATA_CPU_TARGET", "NEON", [] { CpuBackend b(1); });
  setenv("STRATA_CPU_TARGET", "auto", 1);
  hwy::SetSupportedTargetsForTest(0);
  { CpuBackend b(1); }
  EXPECT_EQ(simd_target_name(), best) << "auto leaves the best target";
  unsetenv("STRATA_CPU_TARGET");
}

INSTANTIATE_TEST_SUITE_P(Targets, Matmul, ::testing::ValuesIn(test::targets_to_test()), test::target_param_name);
INSTANTIATE_TEST_SUITE_P(Targets, MatmulHighwayForced, ::testing::ValuesIn(test::targets_to_test()),
                         test::target_param_name);

}  // namespace
}  // namespace strata::cpu
