// The forward pass over paged KV: exact greedy continuations of the shared reference model, and
// consistency of logits across prefill, token-by-token decode, random chunkings and batching.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "gguf/random_model.h"
#include "kv/block_pool.h"
#include "kv/kv_arena.h"
#include "model/model.h"
#include "support/test_support.h"

namespace strata {
namespace {

// One sequence's KV state for tests: a block table that grows as tokens are added.
struct TestSeq {
  std::vector<BlockId> blocks;
  int32_t n_tokens = 0;
};

class KvHarness {
 public:
  KvHarness(const Model& m, KvDtype dtype, int32_t block_size, int32_t num_blocks)
      : arena_(KvGeometry{m.config().n_layer, m.config().n_head_kv, m.config().head_dim, block_size, dtype}, num_blocks),
        pool_(num_blocks),
        views_(arena_.layers()),
        block_size_(block_size) {}

  void reserve(TestSeq& s, int32_t n_new) {
    const int32_t need = (s.n_tokens + n_new + block_size_ - 1) / block_size_;
    while (static_cast<int32_t>(s.blocks.size()) < need) {
      auto b = pool_.allocate_plain();
      ASSERT_TRUE(b.has_value());
      s.blocks.push_back(*b);
    }
  }
  void release(TestSeq& s) {
    for (BlockId b : s.blocks) pool_.decref(b);
    s.blocks.clear();
    s.n_tokens = 0;
  }
  std::span<const KvLayerView> views() const { return views_; }
  const BlockPool& pool() const { return pool_; }

 private:
  KvArena arena_;
  BlockPool pool_;
  std::vector<KvLayerView> views_;
  int32_t block_size_;
};

TokenId argmax(std::span<const float> v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Forward, ReproducesTheReferenceGreedyContinuations) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), 2);
  const int32_t V = model->config().n_vocab;
  std::ifstream in(test::shared_path("reference/stories260K-greedy.jsonl"));
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    const auto prompt = j["prompt_tokens"].get<std::vector<TokenId>>();
    const auto expected = j["tokens"].get<std::vector<TokenId>>();
    for (int32_t block_size : {16, 7}) {
      KvHarness kv(*model, KvDtype::kF32, block_size, 64);
      TestSeq s;
      kv.reserve(s, static_cast<int32_t>(prompt.size()));
      ForwardBatch b;
      b.seqs.push_back({prompt, 0, s.blocks, LogitsMode::kLast});
      auto logits = model->forward(b, kv.views());
      ASSERT_EQ(logits.size(), static_cast<size_t>(V));
      s.n_tokens = static_cast<int32_t>(prompt.size());
      std::vector<TokenId> got;
      for (size_t i = 0; i < expected.size(); ++i) {
        const TokenId t = argmax(logits);
        got.push_back(t);
        kv.reserve(s, 1);
        ForwardBatch d;
        d.seqs.push_back({std::span<const TokenId>(&got.back(), 1), s.n_tokens, s.blocks, LogitsMode::kLast});
        logits = model->forward(d, kv.views());
        s.n_tokens += 1;
      }
      EXPECT_EQ(got, expected) << "prompt: " << j["prompt"] << " block size " << block_size;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

// Model::forward_pick, as `bench model` decodes: the prompts prefilled (all but their last token),
// then each step's tokens picked by the model and fed to the next step before they are read back
// (from_picks). The three reference prompts alone and batched (different positions per row) give
// exactly the reference greedy tokens.
std::vector<std::vector<TokenId>> decode_with_picks(Model& model, KvHarness& kv, const std::vector<std::vector<TokenId>>& prompts,
                                                    int32_t n_new) {
  std::vector<TestSeq> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const auto n = static_cast<int32_t>(p.size()) - 1;
    kv.reserve(seqs[i], n);
    ForwardBatch b;
    b.seqs.push_back({std::span<const TokenId>(p).first(static_cast<size_t>(n)), 0, seqs[i].blocks, LogitsMode::kNone});
    model.forward(b, kv.views());
    seqs[i].n_tokens = n;
  }
  std::vector<std::vector<TokenId>> out(prompts.size());
  std::vector<TokenId> placeholder(prompts.size(), -1);  // not read with from_picks
  uint64_t last = 0;
  for (int32_t step = 0; step <= n_new; ++step) {
    if (step < n_new) {
      ForwardBatch b;
      for (size_t i = 0; i < prompts.size(); ++i) {
        kv.reserve(seqs[i], 1);
        const TokenId* t = step == 0 ? &prompts[i].back() : &placeholder[i];
        b.seqs.push_back({std::span<const TokenId>(t, 1), seqs[i].n_tokens, seqs[i].blocks, LogitsMode::kLast});
        seqs[i].n_tokens += 1;
      }
      const uint64_t ticket = model.forward_pick(b, kv.views(), step > 0);
      if (step > 0) {
        const auto p = model.picked(last);
        EXPECT_EQ(p.size(), prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) out[i].push_back(p[i]);
      }
      last = ticket;
    } else {
      const auto p = model.picked(last);
      for (size_t i = 0; i < prompts.size(); ++i) out[i].push_back(p[i]);
    }
  }
  for (TestSeq& s : seqs) kv.release(s);
  return out;
}

TEST(Forward, PickedDecodeGivesTheReferenceGreedyContinuations) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), 2);
  std::ifstream in(test::shared_path("reference/stories260K-greedy.jsonl"));
  std::vector<std::vector<TokenId>> prompts, expected;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    prompts.push_back(j["prompt_tokens"].get<std::vector<TokenId>>());
    expected.push_back(j["tokens"].get<std::vector<TokenId>>());
  }
  ASSERT_EQ(prompts.size(), 3u);
  const auto n = static_cast<int32_t>(std::min({expected[0].size(), expected[1].size(), expected[2].size()}));
  KvHarness kv(*model, KvDtype::kF32, 16, 96);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto got = decode_with_picks(*model, kv, {prompts[i]}, static_cast<int32_t>(expected[i].size()));
    EXPECT_EQ(got[0], expected[i]) << "prompt " << i << " alone";
  }
  const auto got = decode_with_picks(*model, kv, prompts, n);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], std::vector<TokenId>(expected[i].begin(), expected[i].begin() + n)) << "prompt " << i << " batched";
  }
}

// Its preconditions are internal checks (the process stops with the reason).
TEST(Forward, PickedDecodeRefusesWhatItCannotDo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), 2);
  KvHarness kv(*model, KvDtype::kF32, 16, 8);
  TestSeq s;
  kv.reserve(s, 8);
  const std::vector<TokenId> two = {1, 2};
  ForwardBatch b;
  b.seqs.push_back({two, 0, s.blocks, LogitsMode::kLast});
  EXPECT_DEATH(model->forward_pick(b, kv.views(), false), "every sequence takes one token");
  b.seqs[0].tokens = std::span<const TokenId>(two).first(1);
  EXPECT_DEATH(model->forward_pick(b, kv.views(), true), "1 sequences from a pick of 0");
  b.seqs[0].logits = LogitsMode::kNone;
  EXPECT_DEATH(model->forward_pick(b, kv.views(), false), "every sequence takes one token");
  b.seqs[0].logits = LogitsMode::kLast;
  EXPECT_DEATH(model->picked(0), "picked: ticket 0");
  uint64_t first = 0;
  for (int32_t i = 0; i < Backend::kPickTickets; ++i) {
    b.seqs[0].start_pos = i;
    const uint64_t t = model->forward_pick(b, kv.views(), i > 0);
    if (i == 0) first = t;
  }
  EXPECT_EQ(model->picked(first).size(), 1u);  // the last kPickTickets tickets are readable
  b.seqs[0].start_pos = Backend::kPickTickets;
  model->forward_pick(b, kv.views(), true);
  EXPECT_DEATH(model->picked(first), "picked: ticket 0");  // one more since: gone
  ForwardBatch two_seqs = b;
  two_seqs.seqs.push_back(b.seqs[0]);
  EXPECT_DEATH(model->forward_pick(two_seqs, kv.views(), true), "2 sequences from a pick of 1");
}

float max_rel_err(std::span<const float> a, std::span<const float> b) {
  float scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    err = std::max(err, std::abs(a[i] - b[i]));
  }
  return err / std::max(scale, 1e-20f);
}

// Bit equality of logits. The CPU kernels promise it wherever only the batch around a row
// changes (backend/cpu/kernels.h: matmul "does not depend on the batch it is in (bit for bit on
// one machine)"; paged_attention: "a query's result does not depend on the rest of the batch",
// and attention.cpp: "A query's arithmetic depends only on its own keys and the block size");
// RMSNorm, RoPE, SiLU and the residual adds work per token. So prefill, token-by-token decode,
// any chunking and any batch give the same bits for one position.
void expect_bit_equal(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return;
  size_t i = 0;
  while (i < got.size() && std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
  ADD_FAILURE() << what << ": logit " << i << " is " << got[i] << ", expected " << want[i] << " (relative error "
                << max_rel_err(got, want) << ")";
}

std::string make_model(const std::string& dir, const std::string& arch, GgmlType dtype) {
  const RandomModelSpec spec = test::small_model_spec(arch, dtype, 2, 11);
  auto vocab = GgufFile::open(test::shared_path("tokenizer/ggml-vocab-llama-spm.gguf"));
  const std::string path = dir + "/" + arch + "-" + std::string(ggml_type_name(dtype)) + ".gguf";
  write_random_model(spec, *vocab, path);
  return path;
}

std::vector<TokenId> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
  return t;
}

class Consistency : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { dir_ = test::make_temp_dir("strata-forward"); }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_;
};
std::string Consistency::dir_;

TEST_P(Consistency, PrefillTokenByTokenAndChunksAgree) {
  auto model = Model::load(make_model(dir_, GetParam(), GgmlType::kF32), 2);
  const int32_t V = model->config().n_vocab;
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 70, V);
  KvHarness kv(*model, KvDtype::kF32, 16, 64);

  // One prefill with logits for every position.
  TestSeq a;
  kv.reserve(a, 70);
  ForwardBatch b;
  b.seqs.push_back({prompt, 0, a.blocks, LogitsMode::kAll});
  auto full = model->forward(b, kv.views());
  std::vector<float> ref(full.begin(), full.end());

  // Token by token.
  TestSeq s;
  for (int i = 0; i < 70; ++i) {
    kv.reserve(s, 1);
    ForwardBatch d;
    d.seqs.push_back({std::span<const TokenId>(&prompt[i], 1), i, s.blocks, LogitsMode::kLast});
    auto l = model->forward(d, kv.views());
    s.n_tokens++;
    expect_bit_equal(l, std::span<const float>(ref).subspan(static_cast<size_t>(i) * V, V), "pos " + std::to_string(i));
  }
  kv.release(s);

  // Random chunks.
  for (int trial = 0; trial < 3; ++trial) {
    TestSeq c;
    int pos = 0;
    while (pos < 70) {
      const int n = std::min<int>(70 - pos, 1 + static_cast<int>(rng() % 23));
      kv.reserve(c, n);
      ForwardBatch d;
      d.seqs.push_back({std::span<const TokenId>(prompt).subspan(pos, n), pos, c.blocks, LogitsMode::kAll});
      auto l = model->forward(d, kv.views());
      c.n_tokens += n;
      expect_bit_equal(l, std::span<const float>(ref).subspan(static_cast<size_t>(pos) * V, static_cast<size_t>(n) * V),
                       "chunk at " + std::to_string(pos));
      pos += n;
    }
    kv.release(c);
  }
}

TEST_P(Consistency, BatchingWithOtherSequencesDoesNotChangeLogits) {
  auto model = Model::load(make_model(dir_, GetParam(), GgmlType::kF32), 2);
  const int32_t V = model->config().n_vocab;
  std::mt19937 rng(9);
  const int kSeqs = 4;
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < kSeqs; ++i) prompts.push_back(random_tokens(rng, 5 + 17 * i, V));
  KvHarness kv(*model, KvDtype::kF32, 16, 128);

  // Each alone: logits of the last prompt token, then of one decode token.
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < kSeqs; ++i) {
    TestSeq s;
    kv.reserve(s, static_cast<int32_t>(prompts[i].size()) + 1);
    ForwardBatch b;
    b.seqs.push_back({prompts[i], 0, s.blocks, LogitsMode::kLast});
    auto l = model->forward(b, kv.views());
    alone.emplace_back(l.begin(), l.end());
    kv.release(s);
  }
  // All together in one batch, in a different order, mixed with a decode step of another sequence.
  TestSeq other;
  const auto other_prompt = random_tokens(rng, 9, V);
  kv.reserve(other, 10);
  {
    ForwardBatch b;
    b.seqs.push_back({other_prompt, 0, other.blocks, LogitsMode::kNone});
    model->forward(b, kv.views());
  }
  std::vector<TestSeq> seqs(kSeqs);
  ForwardBatch b;
  const TokenId decode_tok = 42;
  b.seqs.push_back({std::span<const TokenId>(&decode_tok, 1), 9, other.blocks, LogitsMode::kLast});
  for (int i = kSeqs - 1; i >= 0; --i) {
    kv.reserve(seqs[i], static_cast<int32_t>(prompts[i].size()));
    b.seqs.push_back({prompts[i], 0, seqs[i].blocks, LogitsMode::kLast});
  }
  auto l = model->forward(b, kv.views());
  ASSERT_EQ(l.size(), static_cast<size_t>(kSeqs + 1) * V);
  for (int k = 0; k < kSeqs; ++k) {
    const int i = kSeqs - 1 - k;
    expect_bit_equal(l.subspan(static_cast<size_t>(k + 1) * V, V), alone[i], "sequence " + std::to_string(i));
  }
}

TEST_P(Consistency, EveryWeightTypeStaysCloseToF32) {
  auto ref_model = Model::load(make_model(dir_, GetParam(), GgmlType::kF32), 2);
  const int32_t V = ref_model->config().n_vocab;
  std::mt19937 rng(3);
  const auto prompt = random_tokens(rng, 24, V);
  auto run = [&](Model& m) {
    KvHarness kv(m, KvDtype::kF32, 16, 16);
    TestSeq s;
    kv.reserve(s, 24);
    ForwardBatch b;
    b.seqs.push_back({prompt, 0, s.blocks, LogitsMode::kAll});
    auto l = m.forward(b, kv.views());
    return std::vector<float>(l.begin(), l.end());
  };
  const auto ref = run(*ref_model);
  // Bounds: relative to the largest reference logit, per weight type. A tolerance here, not bit
  // equality: other weights give other logits (quantization error), nothing promises equality.
  const std::vector<std::pair<GgmlType, float>> types = {
      {GgmlType::kF16, 0.01f}, {GgmlType::kBF16, 0.03f}, {GgmlType::kQ8_0, 0.03f},
      {GgmlType::kQ4_0, 0.25f}, {GgmlType::kQ4_K, 0.2f}, {GgmlType::kQ6_K, 0.06f}, {GgmlType::kQ5_K, 0.1f}};
  for (const auto& [type, bound] : types) {
    auto m = Model::load(make_model(dir_, GetParam(), type), 2);
    const auto got = run(*m);
    EXPECT_LT(max_rel_err(got, ref), bound) << ggml_type_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, Consistency, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace strata
