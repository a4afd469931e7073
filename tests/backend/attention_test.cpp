// paged_attention against the scalar reference on every SIMD target: GQA groups, block sizes 16
// and 7, shuffled block tables, sequences of mixed lengths mixing prompt chunks and decode steps,
// f32/f16/bf16 KV. Bound: max error 2e-5 (outputs are convex combinations of values in [-1, 1];
// the reference softmax is in double). A sequence's outputs are also the same bits alone as in a
// batch, and with 1 or 3 threads.
//
// Warm blocks (int8, fp8, int4; kv/warm_format.h): tables mixing hot ids and warm sub-block ids,
// built with warm_encode, against the reference reading every warm row through warm_decode_row:
// max error 1e-5 (relative to max|v| = 1). And against all-hot attention on the original values,
// within a bound per format derived from its quantization step (see kWarmBounds).
#include <gtest/gtest.h>

#include <iostream>
#include <numeric>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_ref.h"
#include "backend/kernel_test_util.h"
#include "kv/warm_format.h"

namespace strata::cpu {
namespace {

struct SeqSpec {
  int32_t start_pos;
  int32_t n_q;
};

class Attention : public ::testing::TestWithParam<int64_t> {};

void run_case(KvDtype dtype, int32_t block_size, int32_t n_head, int32_t n_kv, int32_t head_dim,
              const std::vector<SeqSpec>& specs, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "dtype " << kv_dtype_name(dtype) << " block " << block_size << " heads "
                                    << n_head << "/" << n_kv << " head_dim " << head_dim);
  // Block tables: every sequence gets its blocks from one shuffled pool; every slot filled through
  // the reference kv_store.
  std::vector<std::pair<int32_t, int32_t>> shape;
  for (const auto& s : specs) shape.emplace_back(s.start_pos, s.n_q);
  const test::PagedKv paged = test::random_paged_kv(dtype, block_size, n_kv, head_dim, shape, rng);
  const KvLayerView& kv = paged.kv;
  const std::vector<AttentionSeq>& seqs = paged.seqs;
  const int32_t q_rows = paged.q_rows;
  // Queries large enough that the softmax is far from uniform.
  const auto q = test::random_floats(static_cast<size_t>(q_rows * n_head * head_dim), rng, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> ref(q.size()), out1(q.size()), out3(q.size());
  ref::paged_attention(q.data(), kv, seqs, n_head, scale, ref.data());
  ThreadPool pool1(1), pool3(3);
  KernelScratch scratch;
  paged_attention(q.data(), kv, seqs, n_head, scale, out1.data(), pool1, scratch);
  paged_attention(q.data(), kv, seqs, n_head, scale, out3.data(), pool3, scratch);
  EXPECT_LE(test::max_abs_diff(out3, ref), 2e-5);
  EXPECT_TRUE(test::bitwise_equal(out1.data(), out3.data(), out1.size())) << "1 vs 3 threads differ";
  // Each sequence alone.
  for (const AttentionSeq& s : seqs) {
    AttentionSeq alone = s;
    alone.q_begin = 0;
    const size_t row = static_cast<size_t>(n_head) * head_dim;
    std::vector<float> out(static_cast<size_t>(s.n_q) * row);
    paged_attention(q.data() + s.q_begin * row, kv, std::span<const AttentionSeq>(&alone, 1), n_head, scale,
                    out.data(), pool3, scratch);
    EXPECT_TRUE(test::bitwise_equal(out.data(), out3.data() + s.q_begin * row, out.size()))
        << "sequence at row " << s.q_begin << " alone differs from the batch";
  }
}

// Expected distance between attention over a format's decoded values and over the originals, for
// K, V uniform in [-1, 1], queries uniform in [-2, 2], scale 1/sqrt(head_dim). A value error e
// moves an output by at most e (outputs are convex combinations); a key error e moves a score by
// at most scale·|q|₁·e and an output by about twice the score error times the spread of the values.
//   int8: step max|x|/127 per (token, head): |e| <= 1/254          -> max output error ~0.01
//   fp8:  3 mantissa bits: |e| <= 2^-4·|x|                          -> ~0.05
//   int4: step (max - min)/15 per group: |e| <= 1/15                -> ~0.15
// The bounds are these with a factor of ~2 of room; the measured errors are printed.
struct WarmBound {
  WarmFormat format;
  double max_err;
};
constexpr WarmBound kWarmBounds[] = {{WarmFormat::kInt8, 0.02}, {WarmFormat::kFp8, 0.1}, {WarmFormat::kInt4, 0.3}};

double warm_bound(WarmFormat f) {
  for (const WarmBound& b : kWarmBounds) {
    if (b.format == f) return b.max_err;
  }
  return 0;
}

// Like run_case, then each sequence's oldest blocks (whole groups of warm_span blocks, never the
// block holding its last position) are re-encoded into warm slots, in shuffled slot order, and its
// table points at them; the hot copies are overwritten with NaN so that reading a warm id as a hot
// one cannot go unnoticed.
void run_warm_case(WarmFormat fmt, KvDtype dtype, int32_t block_size, int32_t n_head, int32_t n_kv, int32_t head_dim,
                   const std::vector<SeqSpec>& specs, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "warm " << warm_format_name(fmt) << " dtype " << kv_dtype_name(dtype) << " block "
                                    << block_size << " heads " << n_head << "/" << n_kv << " head_dim " << head_dim);
  int32_t total_blocks = 0;
  for (const auto& s : specs) total_blocks += (s.start_pos + s.n_q + block_size - 1) / block_size;
  std::vector<BlockId> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  KvLayerView kv;
  kv.dtype = dtype;
  kv.block_size = block_size;
  kv.n_kv_heads = n_kv;
  kv.head_dim = head_dim;
  std::vector<uint8_t> karena(static_cast<size_t>(kv.block_stride_bytes() * total_blocks));
  std::vector<uint8_t> varena(karena.size());
  kv.k = karena.data();
  kv.v = varena.data();
  const int32_t width = n_kv * head_dim;
  std::vector<AttentionSeq> seqs;
  int32_t used = 0, q_rows = 0;
  for (const auto& s : specs) {
    AttentionSeq a;
    a.q_begin = q_rows;
    a.n_q = s.n_q;
    a.start_pos = s.start_pos;
    a.n_blocks = (s.start_pos + s.n_q + block_size - 1) / block_size;
    a.blocks = ids.data() + used;
    used += a.n_blocks;
    q_rows += s.n_q;
    const int32_t n_pos = s.start_pos + s.n_q;
    const auto k = test::random_floats(static_cast<size_t>(n_pos * width), rng);
    const auto v = test::random_floats(static_cast<size_t>(n_pos * width), rng);
    std::vector<int32_t> slots;
    for (int32_t p = 0; p < n_pos; ++p) slots.push_back(a.blocks[p / block_size] * block_size + p % block_size);
    ref::kv_store(kv, k.data(), v.data(), slots.data(), n_pos);
    seqs.push_back(a);
  }
  const auto q = test::random_floats(static_cast<size_t>(q_rows * n_head * head_dim), rng, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> all_hot(q.size());
  ref::paged_attention(q.data(), kv, seqs, n_head, scale, all_hot.data());

  // Re-encode, as the KV manager does for blocks that left the hot window.
  const int32_t span = warm_span(fmt, block_size);
  struct Group {
    size_t seq;
    int32_t first;  // logical block
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int32_t n_pos = seqs[i].start_pos + seqs[i].n_q;
    const int32_t candidates = (n_pos - 1) / block_size;  // full blocks before the last position's
    for (int32_t g = 0; g + span <= candidates; g += span) groups.push_back({i, g});
  }
  ASSERT_FALSE(groups.empty()) << "no warm blocks: the case tests nothing";
  const int64_t kslot = warm_slot_bytes(fmt, false, block_size, n_kv, head_dim);
  const int64_t vslot = warm_slot_bytes(fmt, true, block_size, n_kv, head_dim);
  std::vector<uint8_t> warm_k(static_cast<size_t>(kslot) * groups.size()), warm_v(static_cast<size_t>(vslot) * groups.size());
  std::vector<int32_t> slot_of(groups.size());
  std::iota(slot_of.begin(), slot_of.end(), 0);
  std::shuffle(slot_of.begin(), slot_of.end(), rng);
  std::vector<BlockId> poisoned;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    BlockId* table = const_cast<BlockId*>(seqs[g.seq].blocks);
    const int32_t slot = slot_of[gi];
    warm_encode(fmt, kv, table + g.first, span, warm_k.data() + slot * kslot, warm_v.data() + slot * vslot);
    for (int32_t j = 0; j < span; ++j) {
      poisoned.push_back(table[g.first + j]);
      table[g.first + j] = total_blocks + slot * span + j;
    }
  }
  for (BlockId b : poisoned) {
    std::memset(karena.data() + b * kv.block_stride_bytes(), 0xff, static_cast<size_t>(kv.block_stride_bytes()));
    std::memset(varena.data() + b * kv.block_stride_bytes(), 0xff, static_cast<size_t>(kv.block_stride_bytes()));
  }
  kv.n_hot_blocks = total_blocks;
  kv.warm_format = fmt;
  kv.warm_span = span;
  kv.warm_k = warm_k.data();
  kv.warm_v = warm_v.data();
  kv.warm_k_slot_bytes = kslot;
  kv.warm_v_slot_bytes = vslot;

  std::vector<float> ref(q.size()), out1(q.size()), out3(q.size());
  ref::paged_attention(q.data(), kv, seqs, n_head, scale, ref.data());
  ThreadPool pool1(1), pool3(3);
  KernelScratch scratch;
  paged_attention(q.data(), kv, seqs, n_head, scale, out1.data(), pool1, scratch);
  paged_attention(q.data(), kv, seqs, n_head, scale, out3.data(), pool3, scratch);
  const double err_decoded = test::max_abs_diff(out3, ref), err_hot = test::max_abs_diff(out3, all_hot);
  EXPECT_LE(err_decoded, 1e-5);
  EXPECT_LE(err_hot, warm_bound(fmt));
  EXPECT_TRUE(test::bitwise_equal(out1.data(), out3.data(), out1.size())) << "1 vs 3 threads differ";
  std::cout << "  warm " << warm_format_name(fmt) << " " << kv_dtype_name(dtype) << " bs " << block_size << " "
            << n_head << "/" << n_kv << "x" << head_dim << ": vs decoded reference " << err_decoded
            << ", vs all-hot originals " << err_hot << "\n";
  for (const AttentionSeq& s : seqs) {
    AttentionSeq alone = s;
    alone.q_begin = 0;
    const size_t row = static_cast<size_t>(n_head) * head_dim;
    std::vector<float> out(static_cast<size_t>(s.n_q) * row);
    paged_attention(q.data() + s.q_begin * row, kv, std::span<const AttentionSeq>(&alone, 1), n_head, scale,
                    out.data(), pool3, scratch);
    EXPECT_TRUE(test::bitwise_equal(out.data(), out3.data() + s.q_begin * row, out.size()))
        << "sequence at row " << s.q_begin << " alone differs from the batch";
  }
}

TEST_P(Attention, MatchesTheReference) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(7);
  // A long prompt, a prompt chunk after cached tokens, decode steps at various depths.
  const std::vector<SeqSpec> mixed = {{0, 45}, {20, 13}, {70, 1}, {0, 1}, {15, 1}, {33, 2}};
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    for (int32_t bs : {16, 7}) {
      run_case(dtype, bs, 8, 2, 64, mixed, rng);   // GQA group 4
      run_case(dtype, bs, 6, 6, 16, mixed, rng);   // no grouping
      run_case(dtype, bs, 8, 4, 8, mixed, rng);    // stories260K's shape
      run_case(dtype, bs, 4, 1, 12, mixed, rng);   // head_dim not a multiple of 8
    }
  }
}

TEST_P(Attention, OneLongPrompt) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(8);
  run_case(KvDtype::kF16, 16, 12, 12, 64, {{0, 300}}, rng);
}

TEST_P(Attention, WarmBlocksMatchTheirDecoding) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(9);
  const std::vector<SeqSpec> mixed = {{0, 45}, {20, 13}, {70, 1}, {0, 1}, {15, 1}, {33, 2}};
  for (WarmFormat fmt : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    for (int32_t bs : {16, 7}) {  // int4 spans 2 and 5 blocks per slot
      run_warm_case(fmt, KvDtype::kF16, bs, 8, 2, 64, mixed, rng);  // GQA group 4
      run_warm_case(fmt, KvDtype::kF32, bs, 6, 6, 16, mixed, rng);  // no grouping
      run_warm_case(fmt, KvDtype::kBF16, bs, 8, 4, 8, mixed, rng);  // stories260K's shape
      run_warm_case(fmt, KvDtype::kF32, bs, 4, 1, 12, mixed, rng);  // head_dim not a multiple of 8
      run_warm_case(fmt, KvDtype::kF16, bs, 2, 1, 6, mixed, rng);   // one lane per vector
    }
  }
}

// Blocks of 64 tokens: an int4 key block spans two groups of 32 tokens, a value row two groups of
// 32 channels; decodes deep in a long context, as in generation.
TEST_P(Attention, WarmLongContext) {
  test::TargetScope scope(GetParam());
  std::mt19937 rng(10);
  for (WarmFormat fmt : {WarmFormat::kInt8, WarmFormat::kFp8, WarmFormat::kInt4}) {
    run_warm_case(fmt, KvDtype::kF16, 64, 12, 12, 64, {{300, 1}, {500, 1}, {200, 20}}, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, Attention, ::testing::ValuesIn(test::targets_to_test()), test::target_param_name);

}  // namespace
}  // namespace strata::cpu
