// Tensor parallelism on CPU ranks (model/tensor_parallel.h, Model with --tensor-parallel N):
//   - the shard plan: heads, KV heads (replicated below N), and the refusals naming what does not
//     divide;
//   - stories260K (8 heads, 4 KV heads) with TP=2 and TP=4 reproduces the llama.cpp greedy
//     references of ../shared/reference (an outside reference), prompts alone and in one batch;
//   - random models (make-random's writer) with GQA — 2 KV heads, so TP=4 replicates them — in f32,
//     qwen2 with biases, and q8_0: TP=N logits against TP=1's over a 64-step greedy run, fed the same
//     tokens, within a relative RMS stated per type, and the same greedy token at every step;
//   - a Q4_K model whose column split would cut blocks is refused with a message naming the tensor;
//   - a rank that throws fails the pass with its error, wakes the others, and poisons the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/random_model.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "support/test_support.h"

namespace strata {
namespace {

ModelConfig heads_config(int32_t h, int32_t kv, int32_t ff, int32_t vocab) {
  ModelConfig c;
  c.n_head = h, c.n_head_kv = kv, c.n_ff = ff, c.n_vocab = vocab, c.n_embd = h * 8, c.head_dim = 8, c.n_layer = 1;
  return c;
}

TEST(TpShard, SplitsHeadsAndReplicatesKvHeadsBelowTheRankCount) {
  // 8 heads, 4 KV heads (stories260K): 2 ranks hold KV heads {0,1} and {2,3}.
  const ModelConfig c = heads_config(8, 4, 16, 512);
  for (int32_t r = 0; r < 2; ++r) {
    const TpShard s = tp_shard(c, r, 2);
    EXPECT_EQ(s.config.n_head, 4);
    EXPECT_EQ(s.head0, 4 * r);
    EXPECT_EQ(s.config.n_head_kv, 2);
    EXPECT_EQ(s.kv_head0, 2 * r);
    EXPECT_EQ(s.config.n_ff, 8);
    EXPECT_EQ(s.ff0, 8 * r);
    EXPECT_EQ(s.vocab0, 256 * r);
    EXPECT_EQ(s.n_vocab, 256);
    EXPECT_EQ(s.config.n_vocab, 512);  // token ids stay the model's
  }
  // 8 heads, 2 KV heads over 4 ranks: heads {0,1},{2,3} use KV head 0, {4,5},{6,7} KV head 1.
  const ModelConfig g = heads_config(8, 2, 16, 512);
  const int32_t want_kv[] = {0, 0, 1, 1};
  for (int32_t r = 0; r < 4; ++r) {
    const TpShard s = tp_shard(g, r, 4);
    EXPECT_EQ(s.config.n_head, 2);
    EXPECT_EQ(s.config.n_head_kv, 1);
    EXPECT_EQ(s.kv_head0, want_kv[r]) << "rank " << r;
  }
  EXPECT_EQ(tp_kv_heads(g, 4), 1);
  EXPECT_EQ(tp_kv_heads(g, 2), 1);
  EXPECT_EQ(tp_kv_heads(c, 2), 2);
}

void expect_refused(const ModelConfig& c, int32_t n, const std::string& part) {
  try {
    tp_shard(c, 0, n);
    ADD_FAILURE() << "TP=" << n << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TpShard, RefusesWhatDoesNotDivide) {
  expect_refused(heads_config(8, 4, 16, 512), 3, "8 attention heads");
  expect_refused(heads_config(12, 6, 24, 512), 4, "6 KV heads");   // 6 over 4 ranks
  expect_refused(heads_config(12, 3, 24, 512), 2, "3 KV heads");   // neither a multiple of 2 nor a divisor
  expect_refused(heads_config(8, 4, 172, 512), 8, "feed-forward width 172");
  expect_refused(heads_config(8, 4, 16, 510), 4, "vocabulary of 510");
}

TokenId argmax(std::span<const float> v) { return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin()); }

// A greedy run over a KV storage of the model's ranks: the prompt in one pass (or several
// sequences in one batch), then one token per step. `forced`: the tokens to feed instead of the
// argmax (so that two runs see the same inputs); its logits per step are kept.
struct Run {
  std::vector<TokenId> tokens;
  std::vector<std::vector<float>> logits;
};

std::vector<Run> greedy(Model& m, const std::vector<std::vector<TokenId>>& prompts, int32_t steps,
                        const std::vector<Run>* forced = nullptr) {
  KvConfig kc;
  kc.block_size = 16;
  kc.dtype = KvDtype::kF32;
  const int32_t per_seq = 16;
  kc.num_blocks = per_seq * static_cast<int32_t>(prompts.size());
  KvStorage st(m.kv_geometry(kc.block_size, kc.dtype), kc, m.backend().thread_pool(), m.rank_backends());
  EXPECT_EQ(st.views().size(), static_cast<size_t>(m.config().n_layer * m.tensor_parallel()));
  std::vector<std::vector<BlockId>> tables(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t b = 0; b < per_seq; ++b) tables[i].push_back(static_cast<BlockId>(i) * per_seq + b);
  }
  const int32_t V = m.config().n_vocab;
  std::vector<Run> runs(prompts.size());
  std::vector<std::vector<TokenId>> input = prompts;
  std::vector<int32_t> pos(prompts.size(), 0);
  for (int32_t step = 0; step <= steps; ++step) {
    ForwardBatch b;
    for (size_t i = 0; i < prompts.size(); ++i) b.seqs.push_back({input[i], pos[i], tables[i], LogitsMode::kLast});
    const std::span<const float> logits = m.forward(b, st.views());
    EXPECT_EQ(logits.size(), prompts.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::span<const float> row = logits.subspan(i * static_cast<size_t>(V), static_cast<size_t>(V));
      runs[i].logits.emplace_back(row.begin(), row.end());
      if (step == steps) continue;
      const TokenId next = forced ? (*forced)[i].tokens[static_cast<size_t>(step)] : argmax(row);
      runs[i].tokens.push_back(argmax(row));
      pos[i] += static_cast<int32_t>(input[i].size());
      input[i] = {next};
    }
  }
  return runs;
}

std::unique_ptr<Model> load_tp(const std::string& path, int32_t tp) {
  BackendOptions o;
  o.device = DeviceKind::kCpu;
  o.n_threads = 2;
  o.tensor_parallel = tp;
  return Model::load(path, o);
}

TEST(TensorParallel, Stories260KMatchesTheReferenceAloneAndBatched) {
  std::vector<std::vector<TokenId>> prompts, expected;
  std::ifstream in(test::shared_path("reference/stories260K-greedy.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    prompts.push_back(j["prompt_tokens"].get<std::vector<TokenId>>());
    expected.push_back(j["tokens"].get<std::vector<TokenId>>());
  }
  ASSERT_EQ(prompts.size(), 3u);
  for (int32_t tp : {2, 4}) {
    auto m = load_tp(test::shared_path("models/stories260K.gguf"), tp);
    EXPECT_EQ(m->tensor_parallel(), tp);
    EXPECT_EQ(m->kv_geometry(16, KvDtype::kF32).n_kv_heads, 4 / tp);  // KV bytes per rank drop by N
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto r = greedy(*m, {prompts[i]}, static_cast<int32_t>(expected[i].size()));
      EXPECT_EQ(r[0].tokens, expected[i]) << "TP=" << tp << " prompt " << i << " alone";
    }
    const auto together = greedy(*m, prompts, 64);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i].tokens, expected[i]) << "TP=" << tp << " prompt " << i << " batched";
  }
}

double relative_rms(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / n);
}

class TensorParallelRandom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = test::make_temp_dir("strata-tp"); }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string make(const RandomModelSpec& s, const std::string& vocab) {
    const std::string path = dir_ + "/" + s.name + ".gguf";
    auto v = GgufFile::open(test::shared_path(vocab));
    write_random_model(s, *v, path);
    return path;
  }
  // TP=N against TP=1 on the same tokens: the largest relative RMS over the steps' logits, and the
  // same argmax at every step.
  static void compare(const std::string& path, int32_t tp, double tolerance) {
    const std::vector<std::vector<TokenId>> prompts = {{1, 450, 4996, 17354, 1701}, {1, 9038, 2501, 263, 931, 727}};
    auto ref_model = load_tp(path, 1);
    const auto ref = greedy(*ref_model, prompts, 64);
    ref_model.reset();
    auto m = load_tp(path, tp);
    const auto got = greedy(*m, prompts, 64, &ref);
    double worst = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].logits.size(), ref[i].logits.size());
      for (size_t s = 0; s < ref[i].logits.size(); ++s) worst = std::max(worst, relative_rms(got[i].logits[s], ref[i].logits[s]));
      EXPECT_EQ(got[i].tokens, ref[i].tokens) << "TP=" << tp << " prompt " << i << ": greedy tokens differ";
    }
    std::printf("%s TP=%d: largest relative RMS of the logits vs TP=1 over 65 steps: %.3g\n",
                std::filesystem::path(path).filename().c_str(), tp, worst);
    EXPECT_LT(worst, tolerance) << "TP=" << tp;
    EXPECT_GT(worst, 0.0) << "TP=" << tp << ": bit-identical logits: was the split run at all?";
  }
  static std::string dir_;
};
std::string TensorParallelRandom::dir_;

RandomModelSpec gqa_spec(const std::string& name, GgmlType type) {
  RandomModelSpec s;
  s.name = name, s.n_layer = 2, s.n_embd = 128, s.n_head = 8, s.n_head_kv = 2, s.n_ff = 256, s.n_ctx = 512;
  s.dtype = type, s.seed = 11;
  return s;
}

// f32 weights: the ranks' partial sums differ from TP=1's only in f32 summation order (measured
// on this machine: ~2e-7).
constexpr double kF32Tolerance = 1e-5;
// q8_0: the same bound. The activations of every matmul are quantized to 8 bits per block of 32,
// and a value that moved by an ulp upstream could round to the next level, but the column splits
// fall on those blocks, so each block is quantized as with one rank (measured: ~2e-7 for both).
constexpr double kQ8Tolerance = 1e-5;

TEST_F(TensorParallelRandom, LlamaGqaF32TiedMatchesOneRank) {
  RandomModelSpec s = gqa_spec("llama-gqa-f32", GgmlType::kF32);
  s.tie_embeddings = true;
  const std::string path = make(s, "tokenizer/ggml-vocab-llama-spm.gguf");
  compare(path, 2, kF32Tolerance);
  compare(path, 4, kF32Tolerance);  // 2 KV heads over 4 ranks: replicated
}

TEST_F(TensorParallelRandom, Qwen2WithBiasesMatchesOneRank) {
  RandomModelSpec s = gqa_spec("qwen2-f32", GgmlType::kF32);
  s.arch = "qwen2";
  s.rope_freq_base = 1000000.0f;
  const std::string path = make(s, "tokenizer/ggml-vocab-llama-spm.gguf");
  compare(path, 2, kF32Tolerance);
  compare(path, 4, kF32Tolerance);
}

TEST_F(TensorParallelRandom, LlamaQ8_0MatchesOneRank) {
  const std::string path = make(gqa_spec("llama-gqa-q8_0", GgmlType::kQ8_0), "tokenizer/ggml-vocab-llama-spm.gguf");
  compare(path, 2, kQ8Tolerance);
  compare(path, 4, kQ8Tolerance);
}

TEST_F(TensorParallelRandom, RefusesAColumnSplitThatCutsQ4KBlocks) {
  RandomModelSpec s = gqa_spec("llama-q4_k", GgmlType::kQ4_K);
  s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 512;  // wo: 256 columns, 128 per rank
  const std::string path = make(s, "tokenizer/ggml-vocab-llama-spm.gguf");
  try {
    load_tp(path, 2);
    ADD_FAILURE() << "a Q4_K attn_output split into 128-column halves was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("blk.0.attn_output.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("block boundaries"), std::string::npos) << what;
  }
  // One rank: no split, it loads.
  EXPECT_NO_THROW(load_tp(path, 1));
}

TEST(TensorParallel, ARankThatThrowsFailsThePassWithoutHanging) {
  auto m = load_tp(test::shared_path("models/stories260K.gguf"), 4);
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  // One good pass, then rank 2 fails on the next one (before any collective: the other ranks wait
  // for it in the embedding's all-reduce until the abort wakes them).
  EXPECT_NO_THROW(greedy(*m, {prompt}, 0));
  m->fail_rank_for_test(2);
  try {
    greedy(*m, {prompt}, 0);
    ADD_FAILURE() << "the failed rank's pass returned";
  } catch (const CommAborted&) {
    ADD_FAILURE() << "the error is the communicator's, not the failed rank's";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 of 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
  // The model is unusable afterwards, and says so.
  try {
    greedy(*m, {prompt}, 0);
    ADD_FAILURE() << "a pass after a failed rank returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("earlier forward pass"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, CudaRanksAreRefusedWithTheReason) {
  if (cuda_device_count() >= 2) GTEST_SKIP() << "2 GPUs here: CUDA ranks run (tests/cuda/cuda_tensor_parallel_test.cpp)";
  BackendOptions o;
  o.device = DeviceKind::kCuda;
  o.tensor_parallel = 2;
  try {
    Model::load(test::shared_path("models/stories260K.gguf"), o);
    ADD_FAILURE() << "CUDA tensor parallelism accepted";
  } catch (const Error& e) {
    // Either this build has no CUDA or no GPU (resolve_device says so), or the message counts them.
    const std::string what = e.what();
    EXPECT_TRUE(what.find("needs 2 GPUs") != std::string::npos || what.find("CUDA") != std::string::npos) << what;
  }
}

}  // namespace
}  // namespace strata
