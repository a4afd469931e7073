// Models beyond stories260K checked against llama.cpp (b4748) as the outside reference: a Qwen2
// shape (NEOX rope, QKV biases, tied embeddings) and a Llama-3 shape (rope_freqs scaling, GQA 4:1,
// tied embeddings), random weights in F16, Q8_0, Q4_K and Q6_K. The data under
// tests/data/reference/ was written by scripts/reference/make_model_refs.sh:
//   - digests-<type>.json: the tensors of llama-quantize --pure's output: our quantizers must give
//     the same bytes (and make-random the same F16 file);
//   - greedy-<type>.jsonl: llama.cpp's prompt tokens, greedy tokens and top-8 logits per step. We
//     feed the same tokens (prompt, then llama.cpp's greedy tokens one at a time, as it decoded
//     them) and compare our logits with its top-8 at a tolerance per weight type, and our argmax
//     with its token wherever its top two are further apart than twice that tolerance.
// Tolerances: llama.cpp rounds activations to the weights' dot type (f16 for F16, q8_0 for Q8_0,
// q8_K for K-quants) before each product; we keep f32 for F16 and quantize to 8 bits for the
// others, rounding differently. The logits here span about ±1.5, and
// the largest differences measured are in the test's output (kTolerance states the bounds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/quantize_model.h"
#include "gguf/random_model.h"
#include "kv/kv_arena.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

// Must match scripts/reference/make_model_refs.sh (the F16 digests check that it does).
RandomModelSpec spec_of(const std::string& name) {
  RandomModelSpec s;
  s.n_layer = 2, s.n_embd = 256, s.n_head = 4, s.n_ctx = 1024, s.tie_embeddings = true, s.seed = 7;
  s.dtype = GgmlType::kF16;
  if (name == "qwen2-small") {
    s.arch = "qwen2", s.name = "random-qwen2", s.n_head_kv = 2, s.n_ff = 512;
    s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f;
  } else {
    s.arch = "llama", s.name = "random-llama", s.n_head_kv = 1, s.n_ff = 768;
    s.rope_freq_base = 500000.0f, s.llama3_rope_factor = 32.0f;
  }
  return s;
}

std::string vocab_of(const std::string& name) {
  return name == "qwen2-small" ? "tokenizer/ggml-vocab-starcoder.gguf" : "tokenizer/ggml-vocab-llama-spm.gguf";
}

// Largest |ours - llama.cpp| allowed on a logit, per weight type.
float tolerance_of(const std::string& type) {
  if (type == "f16") return 2e-3f;
  return 3e-2f;  // q8_0, q4_k, q6_k: the 8-bit activations differ in rounding on each side
}

std::string ref_path(const std::string& model, const std::string& file) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/data/reference/" + model + "/" + file;
}

std::map<std::string, std::string> read_digests(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto j = nlohmann::json::parse(in);
  std::map<std::string, std::string> out;
  for (auto& [k, v] : j.items()) out[k] = v.get<std::string>();
  return out;
}

struct Case {
  std::string model, type;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " " << c.type; }
};

class LlamaReference : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("strata-llama-ref");
    for (const std::string m : {"qwen2-small", "llama3-small"}) {
      auto vocab = GgufFile::open(test::shared_path(vocab_of(m)));
      write_random_model(spec_of(m), *vocab, dir_ + "/" + m + "-f16.gguf");
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string model_file(const Case& c) {
    const std::string path = dir_ + "/" + c.model + "-" + c.type + ".gguf";
    if (!std::filesystem::exists(path)) {
      auto f16 = GgufFile::open(dir_ + "/" + c.model + "-f16.gguf");
      quantize_model(*f16, *ggml_type_from_name(c.type), path);
    }
    return path;
  }
  static std::string dir_;
};
std::string LlamaReference::dir_;

TEST_P(LlamaReference, TensorsMatchLlamaQuantize) {
  const Case c = GetParam();
  const auto expected = read_digests(ref_path(c.model, "digests-" + c.type + ".json"));
  auto file = GgufFile::open(model_file(c));
  const auto got = tensor_digests(*file);
  ASSERT_EQ(got.size(), expected.size());
  int quantized = 0;
  for (const auto& [name, hex] : got) {
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << name;
    EXPECT_EQ(hex, it->second) << c.model << " " << c.type << ": tensor " << name << " differs from llama.cpp's";
    if (file->find_tensor(name)->n_dims >= 2) ++quantized;
  }
  EXPECT_GE(quantized, 15);  // token_embd + 7 matrices per layer
}

TEST_P(LlamaReference, LogitsAndGreedyTokensMatchLlamaCpp) {
  const Case c = GetParam();
  const std::string path = model_file(c);
  auto model = Model::load(path, 2);
  auto gguf = GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(*gguf);
  const ModelConfig& cfg = model->config();
  const float tol = tolerance_of(c.type);

  std::ifstream in(ref_path(c.model, "greedy-" + c.type + ".jsonl"));
  ASSERT_TRUE(in) << "missing reference data";
  std::string line;
  int cases = 0, checked_argmax = 0, steps = 0;
  float worst = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    const auto prompt = j["prompt_tokens"].get<std::vector<TokenId>>();
    const auto tokens = j["tokens"].get<std::vector<TokenId>>();
    const auto& tops = j["top_logits"];
    ASSERT_EQ(tops.size(), tokens.size());
    // Our tokenizer gives llama.cpp's prompt tokens.
    EXPECT_EQ(tok->encode(j["prompt"].get<std::string>(), true, false), prompt) << j["prompt"];

    const int32_t block_size = 16;
    const int32_t n_total = static_cast<int32_t>(prompt.size() + tokens.size());
    KvArena arena(KvGeometry{cfg.n_layer, cfg.n_head_kv, cfg.head_dim, block_size, KvDtype::kF32},
                  (n_total + block_size - 1) / block_size);
    const auto views = arena.layers();
    std::vector<BlockId> blocks(static_cast<size_t>(arena.num_blocks()));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<BlockId>(i);

    ForwardBatch b;
    b.seqs.push_back({prompt, 0, blocks, LogitsMode::kLast});
    std::span<const float> logits = model->forward(b, views);
    int32_t pos = static_cast<int32_t>(prompt.size());
    for (size_t s = 0; s < tokens.size(); ++s) {
      ASSERT_EQ(logits.size(), static_cast<size_t>(cfg.n_vocab));
      const auto& top = tops[s];
      for (const auto& e : top) {
        const int id = e[0].get<int>();
        const float want = e[1].get<float>();
        worst = std::max(worst, std::abs(logits[static_cast<size_t>(id)] - want));
        EXPECT_NEAR(logits[static_cast<size_t>(id)], want, tol)
            << c.model << " " << c.type << " prompt " << cases << " step " << s << " token " << id;
      }
      const float gap = top[0][1].get<float>() - top[1][1].get<float>();
      if (gap > 2 * tol) {
        const auto ours = std::max_element(logits.begin(), logits.end()) - logits.begin();
        EXPECT_EQ(ours, tokens[s]) << c.model << " " << c.type << " prompt " << cases << " step " << s;
        ++checked_argmax;
      }
      ++steps;
      ForwardBatch d;
      d.seqs.push_back({std::span<const TokenId>(&tokens[s], 1), pos, blocks, LogitsMode::kLast});
      logits = model->forward(d, views);
      ++pos;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 4);
  // Most steps are not near a tie, so the greedy tokens are really compared.
  EXPECT_GE(checked_argmax, steps * 3 / 4) << checked_argmax << " of " << steps;
  std::printf("[ %s %s ] largest |logit - llama.cpp| = %.5f (tolerance %.5f), argmax checked at %d of %d steps\n",
              c.model.c_str(), c.type.c_str(), worst, tol, checked_argmax, steps);
}

// Tensors only: the remaining types our quantizers write.
class LlamaQuantizeOnly : public LlamaReference {};
TEST_P(LlamaQuantizeOnly, TensorsMatchLlamaQuantize) {
  const Case c = GetParam();
  const auto expected = read_digests(ref_path(c.model, "digests-" + c.type + ".json"));
  auto file = GgufFile::open(model_file(c));
  const auto got = tensor_digests(*file);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, hex] : got) EXPECT_EQ(hex, expected.at(name)) << c.type << ": tensor " << name;
}

INSTANTIATE_TEST_SUITE_P(Types, LlamaQuantizeOnly,
                         ::testing::Values(Case{"llama3-small", "bf16"}, Case{"llama3-small", "q4_0"},
                                           Case{"llama3-small", "q4_1"}, Case{"llama3-small", "q5_0"},
                                           Case{"llama3-small", "q5_1"}, Case{"llama3-small", "q2_k"},
                                           Case{"llama3-small", "q3_k"}, Case{"llama3-small", "q5_k"}),
                         [](const auto& info) { return info.param.type; });

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const std::string m : {"qwen2-small", "llama3-small"}) {
    for (const std::string t : {"f16", "q8_0", "q4_k", "q6_k"}) v.push_back({m, t});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaReference, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  std::string n = info.param.model + "_" + info.param.type;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

}  // namespace
}  // namespace strata
