// Full-size random-weight models on CUDA against the CPU backend (label `cuda`, slow; SKIPPED
// with the reason where no GPU is usable): the Llama-3.2-1B shape in F16 and BF16 and the
// Qwen2-0.5B shape in F16, with the llama-spm vocabulary.
//  - The CPU generates 256 greedy tokens after a 32-token prompt; the GPU, fed the same tokens
//    (one prefill of all 288, logits at every position), must pick the same next token at >= 99%
//    of the 256 positions, and its logits must be within a relative RMS error of 3e-2 (F16) or
//    6e-2 (BF16) of the CPU's at every position. The two backends accumulate in f32 in different
//    orders, and cuBLAS rounds the activations to half (bf16 hi + lo for BF16 weights) for the
//    prefill where the CPU keeps them in f32; random weights make near-ties common, hence the 99%
//    rather than 100%.
//  - Batch invariance on the GPU: a sequence decoded alone, inside a batch of 64 and after a
//    prefill in chunks of 7 gives the same greedy tokens at >= 99% of 64 positions (the CPU gives
//    bit-identical logits; the GPU takes GEMV for up to 8 rows and cuBLAS above, whose rounding
//    differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/step_runner.h"
#include "gguf/random_model.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "support/test_support.h"

namespace strata {
namespace {

TokenId argmax(std::span<const float> v) { return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin()); }

double rel_rms(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Sequences on one KV storage in the model backend's memory.
class Kv {
 public:
  explicit Kv(Model& m, int32_t blocks = 4096) : m_(m) {
    const ModelConfig& mc = m.config();
    cfg_.block_size = 16;
    cfg_.dtype = KvDtype::kF16;
    cfg_.num_blocks = blocks;
    cfg_.prefix_cache = false;
    geo_ = {mc.n_layer, mc.n_head_kv, mc.head_dim, cfg_.block_size, cfg_.dtype};
    storage_ = std::make_unique<KvStorage>(geo_, cfg_, m.backend().thread_pool(), &m.backend());
    kv_ = std::make_unique<KvManager>(geo_, cfg_, storage_->capacity(), m.fingerprint());
  }
  // One forward over `chunks`: (sequence id, its tokens so far, how many new at the end); logits of
  // every new position when all_logits, else of the last.
  std::span<const float> step(const std::vector<std::tuple<SeqId, const std::vector<TokenId>*, int32_t>>& chunks,
                              bool all_logits) {
    ForwardBatch b;
    for (const auto& [id, toks, n_new] : chunks) {
      if (!seen_.count(id)) {
        kv_->add_sequence(id);
        seen_.insert(id);
      }
      const int32_t end = static_cast<int32_t>(toks->size());
      EXPECT_TRUE(kv_->allocate(id, *toks, end));
    }
    EXPECT_TRUE(run_kv_ops(*kv_, *storage_, kv_->take_ops()).empty());
    for (const auto& [id, toks, n_new] : chunks) {
      const int32_t end = static_cast<int32_t>(toks->size());
      b.seqs.push_back({std::span<const TokenId>(*toks).subspan(static_cast<size_t>(end - n_new)), end - n_new,
                        kv_->block_table(id), all_logits ? LogitsMode::kAll : LogitsMode::kLast});
    }
    const auto logits = m_.forward(b, storage_->views());
    for (const auto& [id, toks, n_new] : chunks) kv_->commit(id, *toks, static_cast<int32_t>(toks->size()));
    return logits;
  }

 private:
  Model& m_;
  KvConfig cfg_;
  KvGeometry geo_;
  std::unique_ptr<KvStorage> storage_;
  std::unique_ptr<KvManager> kv_;
  std::set<SeqId> seen_;
};

std::vector<TokenId> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
  return t;
}

// Greedy decode of `n` tokens after `prompt` as a batch of one; returns the generated tokens.
std::vector<TokenId> greedy(Model& m, Kv& kv, SeqId id, std::vector<TokenId> toks, int n, int chunk = 0) {
  const int32_t V = m.config().n_vocab;
  std::vector<TokenId> out;
  int32_t done = 0;
  std::span<const float> logits;
  const int32_t P = static_cast<int32_t>(toks.size());
  while (done < P) {
    const int32_t len = chunk > 0 ? std::min(chunk, P - done) : P;
    std::vector<TokenId> part(toks.begin(), toks.begin() + done + len);
    logits = kv.step({{id, &part, len}}, false);
    done += len;
  }
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits.subspan(0, static_cast<size_t>(V))));
    toks.push_back(out.back());
    logits = kv.step({{id, &toks, 1}}, false);
  }
  return out;
}

struct Case {
  std::string preset;
  GgmlType dtype;
  double tol;
};

class CudaLarge : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLarge, AgreesWithTheCpuAndIsBatchInvariant) {
  try {
    (void)resolve_device(DeviceKind::kCuda);
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const Case c = GetParam();
  const std::string dir = test::make_temp_dir("strata-cuda-large");
  auto spec = random_model_preset(c.preset);
  ASSERT_TRUE(spec.has_value());
  spec->dtype = c.dtype;
  spec->seed = 3;
  auto vocab = GgufFile::open(test::shared_path("tokenizer/ggml-vocab-llama-spm.gguf"));
  const std::string path = dir + "/m.gguf";
  write_random_model(*spec, *vocab, path);
  auto cpu = Model::load(path, BackendOptions{DeviceKind::kCpu, 0});
  auto gpu = Model::load(path, BackendOptions{DeviceKind::kCuda, 1});
  const int32_t V = cpu->config().n_vocab;
  std::mt19937 rng(9);
  const auto prompt = random_tokens(rng, 32, V);

  // CPU: 256 greedy tokens.
  Kv cpu_kv(*cpu, 64);
  const auto cpu_tokens = greedy(*cpu, cpu_kv, 1, prompt, 256);
  // GPU, teacher-forced on prompt + CPU tokens: logits at every position.
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), cpu_tokens.begin(), cpu_tokens.end());
  Kv gpu_kv(*gpu);
  const auto logits = gpu_kv.step({{1, &all, static_cast<int32_t>(all.size())}}, true);
  // And the CPU's logits at the same positions, for the error.
  Kv cpu_kv2(*cpu, 64);
  const auto cpu_logits = cpu_kv2.step({{1, &all, static_cast<int32_t>(all.size())}}, true);
  int agree = 0;
  double worst = 0;
  for (int i = 0; i < 256; ++i) {
    const size_t row = static_cast<size_t>(31 + i) * V;
    const auto g = logits.subspan(row, static_cast<size_t>(V));
    agree += argmax(g) == cpu_tokens[static_cast<size_t>(i)];
    worst = std::max(worst, rel_rms(g, cpu_logits.subspan(row, static_cast<size_t>(V))));
  }
  RecordProperty("greedy_agreement", agree);
  RecordProperty("worst_rel_rms", std::to_string(worst));
  std::printf("%s %s: GPU picks the CPU's token at %d/256 positions; worst logits relative RMS error %.2e\n",
              c.preset.c_str(), ggml_type_name(c.dtype).data(), agree, worst);
  EXPECT_GE(agree, 254);
  EXPECT_LE(worst, c.tol);

  // Batch invariance on the GPU: alone, in a batch of 64, after a chunked prefill.
  Kv alone_kv(*gpu);
  const auto alone = greedy(*gpu, alone_kv, 1, prompt, 64);
  Kv chunk_kv(*gpu);
  const auto chunked = greedy(*gpu, chunk_kv, 1, prompt, 64, 7);
  Kv batch_kv(*gpu);
  std::vector<std::vector<TokenId>> seqs(64);
  seqs[0] = prompt;
  for (int s = 1; s < 64; ++s) seqs[static_cast<size_t>(s)] = random_tokens(rng, 8 + s % 40, V);
  std::vector<std::tuple<SeqId, const std::vector<TokenId>*, int32_t>> chunks;
  for (int s = 0; s < 64; ++s) chunks.emplace_back(s + 1, &seqs[static_cast<size_t>(s)], static_cast<int32_t>(seqs[static_cast<size_t>(s)].size()));
  std::vector<TokenId> batched;
  for (int i = 0; i < 64; ++i) {
    const auto lg = batch_kv.step(chunks, false);
    for (int s = 0; s < 64; ++s) seqs[static_cast<size_t>(s)].push_back(argmax(lg.subspan(static_cast<size_t>(s) * V, static_cast<size_t>(V))));
    batched.push_back(seqs[0].back());
    for (auto& ch : chunks) std::get<2>(ch) = 1;
  }
  int same_batch = 0, same_chunk = 0;
  for (int i = 0; i < 64; ++i) {
    same_batch += batched[static_cast<size_t>(i)] == alone[static_cast<size_t>(i)];
    same_chunk += chunked[static_cast<size_t>(i)] == alone[static_cast<size_t>(i)];
  }
  std::printf("%s %s: alone vs batch of 64: %d/64 equal tokens; alone vs chunked prefill: %d/64\n", c.preset.c_str(),
              ggml_type_name(c.dtype).data(), same_batch, same_chunk);
  EXPECT_GE(same_batch, 63);
  EXPECT_GE(same_chunk, 63);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLarge,
                         ::testing::Values(Case{"llama-1b", GgmlType::kF16, 3e-2}, Case{"llama-1b", GgmlType::kBF16, 6e-2},
                                           Case{"qwen2-0.5b", GgmlType::kF16, 3e-2}),
                         [](const auto& info) {
                           std::string n = info.param.preset + "_" + std::string(ggml_type_name(info.param.dtype));
                           std::replace(n.begin(), n.end(), '-', '_');
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

}  // namespace
}  // namespace strata
