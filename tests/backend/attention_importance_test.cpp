// Attention importance (AttentionSeq::importance, --kv-evict) on every SIMD target: the mass each
// key slot receives, summed over query heads and the counted rows, against a double-precision
// softmax computed here from the K rows (ref::kv_row); the outputs are the same bits with or
// without it; rows before importance_from and sequences without a buffer add nothing; and the
// buffer accumulates over calls (layers).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_ref.h"
#include "backend/kernel_test_util.h"

namespace strata::cpu {
namespace {

struct SeqSpec {
  int32_t start_pos;
  int32_t n_q;
  int32_t from;   // importance_from; -1: no buffer
};

class AttentionImportance : public ::testing::TestWithParam<int64_t> {};

using test::reference_mass;

void run_case(KvDtype dtype, int32_t block_size, int32_t n_head, int32_t n_kv, int32_t head_dim,
              const std::vector<SeqSpec>& specs, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "dtype " << kv_dtype_name(dtype) << " block " << block_size << " heads " << n_head
                                    << "/" << n_kv << " head_dim " << head_dim);
  std::vector<std::pair<int32_t, int32_t>> shape;
  for (const auto& s : specs) shape.emplace_back(s.start_pos, s.n_q);
  const test::PagedKv paged = test::random_paged_kv(dtype, block_size, n_kv, head_dim, shape, rng);
  const KvLayerView& kv = paged.kv;
  const int32_t q_rows = paged.q_rows;
  std::vector<AttentionSeq> plain = paged.seqs, with;
  std::vector<std::vector<float>> buffers;
  for (const AttentionSeq& a : plain) buffers.emplace_back(static_cast<size_t>(a.start_pos + a.n_q), 0.0f);
  with = plain;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].from >= 0) {
      with[i].importance = buffers[i].data();
      with[i].importance_from = specs[i].from;
    }
  }
  const auto q = test::random_floats(static_cast<size_t>(q_rows * n_head * head_dim), rng, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> out_plain(q.size()), out_with(q.size());
  ThreadPool pool(3);
  KernelScratch scratch;
  paged_attention(q.data(), kv, plain, n_head, scale, out_plain.data(), pool, scratch);
  paged_attention(q.data(), kv, with, n_head, scale, out_with.data(), pool, scratch);
  EXPECT_TRUE(test::bitwise_equal(out_plain.data(), out_with.data(), out_plain.size()))
      << "asking for importance changed the outputs";
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i);
    if (specs[i].from < 0) continue;
    const auto mass = reference_mass(q.data(), kv, plain[i], n_head, scale, specs[i].from);
    double total = 0, err = 0;
    for (size_t k = 0; k < mass.size(); ++k) {
      err = std::max(err, std::abs(mass[k] - buffers[i][k]));
      total += buffers[i][k];
    }
    EXPECT_LE(err, 1e-5 * std::max(1, specs[i].n_q - specs[i].from) * n_head);
    // One unit of mass per counted row and head.
    EXPECT_NEAR(total, static_cast<double>(std::max(0, specs[i].n_q - specs[i].from)) * n_head, 1e-3);
  }
  // A second call (the next layer) adds the same again.
  std::vector<std::vector<float>> first = buffers;
  paged_attention(q.data(), kv, with, n_head, scale, out_with.data(), pool, scratch);
  for (size_t i = 0; i < specs.size(); ++i) {
    for (size_t k = 0; k < buffers[i].size(); ++k) EXPECT_NEAR(buffers[i][k], 2 * first[i][k], 1e-5 * std::max(1.0f, first[i][k]));
  }
}

TEST_P(AttentionImportance, MatchesTheSoftmaxMassPerKey) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(17);
  // Decodes, a prompt chunk after cached tokens counting every row, a chunk counting its last rows
  // only (snapkv's window), one that counts none of its rows, a sequence without a buffer.
  const std::vector<SeqSpec> mixed = {{70, 1, 0}, {0, 1, 0}, {20, 13, 0}, {0, 45, 37}, {16, 5, 5}, {33, 2, -1}};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
    for (int32_t bs : {16, 7}) {
      run_case(dtype, bs, 8, 2, 64, mixed, rng);  // GQA group 4
      run_case(dtype, bs, 8, 4, 8, mixed, rng);   // stories260K's shape
      run_case(dtype, bs, 4, 1, 12, mixed, rng);  // head_dim not a multiple of 8
    }
  }
}

TEST_P(AttentionImportance, LongPromptManyTiles) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(18);
  run_case(KvDtype::kF16, 16, 8, 4, 8, {{0, 200, 0}, {300, 1, 0}}, rng);
}

INSTANTIATE_TEST_SUITE_P(Targets, AttentionImportance, ::testing::ValuesIn(test::targets_to_test()),
                         test::target_param_name);

}  // namespace
}  // namespace strata::cpu
