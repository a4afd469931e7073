// A loaded model (config + weights viewed in the GGUF mapping) and its batched forward pass over
// paged KV. Thread-safety: forward() is called by one thread at a time (the engine thread); it
// uses the model's own thread pool and scratch buffers.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace strata {

class Model {
 public:
  // Opens and validates the model; throws strata::Error naming the problem.
  // n_threads <= 0 means one per physical core.
  static std::unique_ptr<Model> load(const std::string& path, int n_threads = 0);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() { return pool_; }

  // Identifies the weights and the tokenization, computed once at load: KV caches (the prefix
  // cache, the cold tier) are keyed by it so they never mix models.
  uint64_t fingerprint() const { return fingerprint_; }

  // Bytes of weight matrices streamed by one decode step (for bandwidth accounting).
  uint64_t step_weight_bytes() const { return weights_.matrix_bytes; }

  // Runs the batch: writes each new token's K and V into its slot (through the block tables) and
  // returns logits [batch.n_logit_rows()][n_vocab], rows in the order of batch.seqs.
  // Preconditions: kv_layers.size() == n_layer; every block table covers its positions; positions
  // are below n_ctx the KV was sized for.
  std::span<const float> forward(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers);

 private:
  Model(std::unique_ptr<GgufFile> file, int n_threads);
  void ensure_buffers(int64_t n_tokens, int64_t n_logit_rows);

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  uint64_t fingerprint_ = 0;
  ThreadPool pool_;
  cpu::KernelScratch scratch_;
  cpu::RopeParams rope_;

  // Activations, [n_tokens][width] each; grown on demand, never shrunk.
  int64_t capacity_tokens_ = 0;
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, out_;
  std::vector<float> logits_, logit_in_;
  std::vector<TokenId> tokens_;
  std::vector<int32_t> pos_, slots_;
  std::vector<cpu::AttentionSeq> attn_seqs_;
};

}  // namespace strata
