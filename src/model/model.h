// A loaded model (config + weights held by its backend) and its batched forward pass over paged
// KV, written once against the Backend interface (backend/backend.h). Thread-safety: forward()
// is called by one thread at a time (the engine thread); it uses the backend's threads and the
// model's activation buffers.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_file.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace strata {

class Model {
 public:
  // Opens and validates the model and uploads its weights to `backend` (on CPU they stay in the
  // file's mapping); throws strata::Error naming the problem. The model owns the backend.
  static std::unique_ptr<Model> load(const std::string& path, std::unique_ptr<Backend> backend);
  // The same on make_backend(o) (--device, --threads); throws strata::Error for an unusable device.
  static std::unique_ptr<Model> load(const std::string& path, const BackendOptions& o);
  // On the CPU backend with n_threads threads (<= 0: one per physical core).
  static std::unique_ptr<Model> load(const std::string& path, int n_threads = 0);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const ModelWeights& weights() const { return weights_; }
  // The backend the model runs on; its thread_pool() is what the KV manager borrows.
  Backend& backend() { return *backend_; }

  // Identifies the weights and the tokenization, computed once at load: KV caches (the prefix
  // cache, the cold tier) are keyed by it so they never mix models.
  uint64_t fingerprint() const { return fingerprint_; }

  // Bytes of weight matrices streamed by one decode step (for bandwidth accounting).
  uint64_t step_weight_bytes() const { return weights_.matrix_bytes; }

  // Runs the batch: writes each new token's K and V into its slot (through the block tables) and
  // returns logits [batch.n_logit_rows()][n_vocab], rows in the order of batch.seqs, valid until
  // the next call. They are host memory: on a host-visible backend (CPU) the span points at the
  // backend's output buffer; a device backend copies them back here, the one device -> host copy
  // of a step.
  // Preconditions: kv_layers.size() == n_layer, in the backend's memory; every block table covers
  // its positions; positions are below n_ctx the KV was sized for.
  std::span<const float> forward(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers);

 private:
  Model(std::unique_ptr<GgufFile> file, std::unique_ptr<Backend> backend);
  void ensure_buffers(int64_t n_tokens, int64_t n_logit_rows);
  void copy_queries(const ForwardBatch& batch);  // query_mem_ -> the ForwardSeq::query buffers

  std::unique_ptr<Backend> backend_;  // first: destroyed after everything it allocated
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  uint64_t fingerprint_ = 0;
  RopeParams rope_;

  // Activations in backend memory, [capacity][width] each; grown on demand, never shrunk.
  int64_t capacity_tokens_ = 0;
  int64_t capacity_logit_rows_ = 0;
  std::unique_ptr<DeviceBuffer> act_mem_, logit_mem_;
  ActView x_, h_, q_, k_, v_, attn_, gate_, up_, out_;
  ActView logit_in_, logits_;
  std::vector<float> logits_host_;  // only for backends that are not host-visible
  // ForwardSeq::query on a backend that is not host-visible: the rows gathered per layer into
  // query_mem_ ([n_layer][query rows][q_dim], grown on demand) and copied back once after the pass.
  std::unique_ptr<DeviceBuffer> query_mem_;
  int64_t query_capacity_rows_ = 0;
  std::vector<int32_t> query_rows_;
  std::vector<float> query_host_;

  // The batch flattened, host memory.
  std::vector<TokenId> tokens_;
  std::vector<int32_t> pos_, slots_, logit_rows_;
  std::vector<AttentionSeq> attn_seqs_;
};

}  // namespace strata
