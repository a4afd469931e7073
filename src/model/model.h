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
#include "backend/communicator.h"
#include "gguf/gguf_file.h"
#include "kv/kv_arena.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/rank_group.h"
#include "model/tensor_parallel.h"

namespace strata {

class Model {
 public:
  // Opens and validates the model and uploads its weights to `backend` (on CPU they stay in the
  // file's mapping); throws strata::Error naming the problem. The model owns the backend.
  static std::unique_ptr<Model> load(const std::string& path, std::unique_ptr<Backend> backend);
  // The same on make_backend(o) (--device, --threads); throws strata::Error for an unusable device.
  // With o.tensor_parallel N > 1: N ranks (model/tensor_parallel.h), each driven by a thread of
  // its own (rank 0: the caller of forward()): CPU backends of max(1, threads / N) threads with the
  // host communicator, or with --device cuda GPU r for rank r with NCCL (compiled, not yet run on
  // several GPUs). Throws strata::Error for a model that does not split N ways, and for --device cuda
  // with fewer than N GPUs.
  static std::unique_ptr<Model> load(const std::string& path, const BackendOptions& o);
  // On the CPU backend with n_threads threads (<= 0: one per physical core).
  static std::unique_ptr<Model> load(const std::string& path, int n_threads = 0);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const ModelWeights& weights() const { return weights_; }
  // The backend the model runs on (rank 0's under tensor parallelism); its thread_pool() is what
  // the KV manager borrows.
  Backend& backend() { return ranks_.empty() ? *backend_ : ranks_[0]->backend(); }

  // Tensor parallelism: the rank count (1 without), each rank's backend in rank order (the KV
  // storage allocates each rank's arenas on its own), and the KV cache's geometry per rank (its
  // KV heads: model/tensor_parallel.h). forward() then takes the KV views of every rank, rank after
  // rank ([rank][layer]).
  int32_t tensor_parallel() const { return ranks_.empty() ? 1 : static_cast<int32_t>(ranks_.size()); }
  std::vector<Backend*> rank_backends();
  KvGeometry kv_geometry(int32_t block_size, KvDtype dtype) const;
  // Test hook: the forward pass number `step` (0 = the next one) of rank `rank` throws
  // strata::Error before its first collective (the other ranks then fail with CommAborted and
  // forward() rethrows the rank's error). Also set at load by STRATA_TEST_TP_FAIL="RANK[@STEP]".
  void fail_rank_for_test(int32_t rank, int64_t step = 0);
  // Rank 0's collectives so far (Communicator::stats): count and wall seconds, waiting for the
  // other ranks included; zero without tensor parallelism. Call between forward passes.
  Communicator::Stats collective_stats() const { return comm_ ? comm_->stats(0) : Communicator::Stats{}; }

  // Identifies the weights and the tokenization, computed once at load: KV caches (the prefix
  // cache, the cold tier) are keyed by it so they never mix models.
  uint64_t fingerprint() const { return fingerprint_; }

  // Bytes of weight matrices streamed by one decode step (for bandwidth accounting; every rank's).
  uint64_t step_weight_bytes() const;

  // Runs the batch: writes each new token's K and V into its slot (through the block tables) and
  // returns logits [batch.n_logit_rows()][n_vocab], rows in the order of batch.seqs, valid until
  // the next call. They are host memory: on a host-visible backend (CPU) the span points at the
  // backend's output buffer; a device backend copies them back here, the one device -> host copy
  // of a step.
  // Preconditions: kv_layers.size() == n_layer * tensor_parallel(), in the backends' memory; every
  // block table covers its positions; positions are below n_ctx the KV was sized for; under tensor
  // parallelism no sequence asks for importance or queries (--kv-evict is refused).
  // Under tensor parallelism a failed rank makes forward() throw its error (the others are woken
  // by the communicator's abort), and every later call throws too: the model is unusable.
  std::span<const float> forward(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers);

  // A decode pass whose tokens are picked greedily (the lowest index of the largest logit, as
  // sample/logit_kernels.h's max_logit + argmax_index) where its logits are: on a backend with
  // device picks the pass ends in Backend::greedy_pick and returns at once, without waiting for the
  // device; elsewhere forward() runs and the model picks on the host. Returns a ticket: picked(t)
  // waits for the pass and gives one token per sequence, in batch order, -1 where the largest logit
  // is not finite (the sampler's "no token can be sampled"; from_picks embeds it as token 0).
  // from_picks: sequence i's token is token i of the last forward_pick (its `tokens` span holds
  // one placeholder, not read), which on a device need not have reached the host: a decode loop
  // enqueues step t + 1 before it reads step t's tokens.
  // Preconditions: every sequence has one token and LogitsMode::kLast, asks for no importance and
  // no query; with from_picks, no more sequences than the last forward_pick had.
  uint64_t forward_pick(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers, bool from_picks);
  // Whether forward_pick picks on the device (no logits copied to the host): a backend with device
  // picks, no tensor parallelism.
  bool picks_on_device() const { return ranks_.empty() && shard_ == nullptr && backend_ && backend_->supports_device_picks(); }
  // The tokens of a ticket of forward_pick, valid until the next forward_pick; the last
  // Backend::kPickTickets tickets can be read (an older one: an error).
  std::span<const TokenId> picked(uint64_t ticket);

 private:
  // What a pass does with its logits: returns them (forward), or picks on the device (forward_pick).
  struct PickMode {
    bool pick = false;        // end in Backend::greedy_pick; forward_impl then returns no logits
    bool from_picks = false;  // the tokens are the device's last picks (Backend::embed_picked)
  };
  std::span<const float> forward_impl(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers, PickMode pm);
  Model(std::unique_ptr<GgufFile> file, std::unique_ptr<Backend> backend);
  // Rank shard.rank of a tensor-parallel model: its weights from `file` (owned by the parent).
  Model(const GgufFile& file, const ModelConfig& whole, const TpShard& shard, Communicator& comm,
        std::unique_ptr<Backend> backend);
  Model(std::unique_ptr<GgufFile> file, const BackendOptions& o);  // the parent of o.tensor_parallel ranks
  std::span<const float> forward_ranks(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers);
  void ensure_buffers(int64_t n_tokens, int64_t n_logit_rows);
  void copy_queries(const ForwardBatch& batch);  // query_mem_ -> the ForwardSeq::query buffers

  std::unique_ptr<Backend> backend_;  // first: destroyed after everything it allocated (null in a TP parent)
  std::unique_ptr<GgufFile> owned_file_;  // null in a rank of a TP model: the parent's
  const GgufFile* file_ = nullptr;
  ModelConfig config_;  // a rank's: its shard's (TpShard::config)
  ModelWeights weights_;
  uint64_t fingerprint_ = 0;
  RopeParams rope_;
  std::vector<DecodeLayer> decode_layers_;  // Backend::decode_layers' layers, made at the first such pass

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

  // Tensor parallelism. In the parent: the ranks, their communicator and threads. In a rank: its
  // shard and the communicator (the parent's).
  std::vector<std::unique_ptr<Model>> ranks_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<RankGroup> group_;
  int32_t fail_rank_ = -1;   // fail_rank_for_test
  int64_t fail_step_ = 0;
  int64_t rank_steps_ = 0;   // forward passes of the ranks so far
  bool ranks_failed_ = false;
  const TpShard* shard_ = nullptr;  // in a rank: its shard (shard_storage_)
  TpShard shard_storage_;
  Communicator* comm_of_rank_ = nullptr;
  ActView logits_all_;  // a rank's gathered logits [rows][n_vocab]
  std::vector<TokenId> local_tokens_;  // a rank's embedding rows: its vocabulary slice, else its zero row

  // forward_pick's tickets: the last Backend::kPickTickets, ticket % kPickTickets: whether the
  // device picked (then the backend's ticket) or the host (then the tokens).
  struct PickTicket {
    bool device = false;
    uint64_t backend_ticket = 0;
    std::vector<TokenId> host;
  };
  PickTicket pick_tickets_[Backend::kPickTickets];
  uint64_t pick_next_ = 0;      // the next ticket
  bool last_pick_device_ = false;  // the last ticket's picks are in the backend's pick buffer
  int64_t last_pick_rows_ = 0;
  std::vector<float> pick_block_max_;  // host picks: max_logit's per-block maxima
  std::vector<TokenId> pick_tokens_;   // a host pass's tokens taken from the last picks

  // The batch flattened, host memory.
  std::vector<TokenId> tokens_;
  std::vector<int32_t> pos_, slots_, logit_rows_;
  std::vector<AttentionSeq> attn_seqs_;
};

}  // namespace strata
