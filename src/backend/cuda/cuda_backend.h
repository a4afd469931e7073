// The CUDA backend: the Backend interface (backend/backend.h) on one NVIDIA GPU. Weights are
// uploaded once in their GGUF bytes (quantized ones stay quantized: the kernels read their
// blocks), activations and KV arenas live in device memory, every op is enqueued on one CUDA
// stream and returns at once; copy_to_host and synchronize() wait. 16-bit and quantized matmuls
// of more than kGemvMaxRows rows go through cuBLAS (activations rounded to half for F16 and
// quantized weights, which are dequantized to half one matrix at a time into a scratch buffer;
// for BF16 weights split into bf16 hi + lo halves and multiplied by both); smaller ones (decode)
// through our own GEMV kernels that read each weight byte once.
//
// The small host arrays an op takes (token ids, positions, KV slots, block tables) are copied to
// the device through a pinned staging ring with the op; an array equal to the last one of its
// kind (positions for every layer's RoPE, the attention batch for every layer) is copied once.
//
// Thread-safety: as Backend: one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::cuda {
struct AttnBatch;
}  // namespace strata::cuda

namespace strata {

class CudaBackend final : public Backend {
 public:
  // Uses GPU `device` (CUDA ordinal). Throws strata::Error when it cannot be used.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;

  // Whether a CUDA GPU is usable (a driver, a device, a context can be made); why not in *why.
  static bool usable(std::string* why = nullptr);
  // GPUs the runtime sees (0 when none or no driver).
  static int device_count();

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string description() const override;
  bool host_visible() const override { return false; }
  ThreadPool* thread_pool() override { return nullptr; }
  void synchronize() override;
  void bind_thread() override;
  int device_ordinal() const override;

  std::unique_ptr<DeviceBuffer> allocate(uint64_t bytes, MemoryUse use) override;
  void copy_to_device(void* dst_device, const void* src_host, uint64_t bytes) override;
  void copy_to_host(void* dst_host, const void* src_device, uint64_t bytes) override;

  bool supports_matmul(GgmlType type) const override;
  WeightMatrix upload_matrix(const WeightMatrix& host) override;
  const float* upload_vector(const float* host, int64_t n) override;

  void embed(const WeightMatrix& table, std::span<const TokenId> tokens, ActView out) override;
  void matmul(const WeightMatrix& w, ActView x, ActView y) override;
  void matmul_multi(std::span<const MatmulOut> outs, ActView x) override;
  void rms_norm(ActView x, const float* weight, ActView y, float eps) override;
  void rope(ActView x, std::span<const int32_t> pos, int32_t n_heads, int32_t head_dim, const RopeParams& p) override;
  void silu_mul(ActView gate, ActView up) override;
  void matmul_silu_mul(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView x, ActView gate,
                       ActView up) override;
  void add(ActView y, ActView x) override;
  void add_bias(ActView y, const float* bias) override;
  void gather_rows(ActView src, std::span<const int32_t> rows, ActView dst) override;

  void add_rms_norm(ActView x, ActView d, const float* weight, ActView h, float eps) override;
  bool supports_lazy_norm(int64_t rows) const override;
  PendingNorm matmul_add_rms_norm(const WeightMatrix& w, ActView in, ActView d, ActView x, const float* weight, ActView h,
                                  float eps, bool lazy) override;
  void resolve_norm(ActView h, PendingNorm& norm) override;
  void matmul_multi_normed(std::span<const MatmulOut> outs, ActView h, PendingNorm& norm) override;
  void matmul_silu_mul_normed(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView h, PendingNorm& norm,
                              ActView gate, ActView up) override;
  void rope_kv_store(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head, int32_t n_kv_head,
                     int32_t head_dim, const RopeParams& p, const KvLayerView& kv,
                     std::span<const int32_t> slots) override;

  void kv_store(const KvLayerView& kv, ActView k, ActView v, std::span<const int32_t> slots) override;
  void paged_attention(ActView q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                       float scale, ActView out) override;
  void rope_kv_store_attention(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head,
                               int32_t n_kv_head, int32_t head_dim, const RopeParams& p, const KvLayerView& kv,
                               std::span<const int32_t> slots, std::span<const AttentionSeq> seqs, float scale,
                               ActView out) override;
  bool decode_layers(const DecodeLayersArgs& a) override;
  void kv_copy_block(const KvLayerView& kv, BlockId src, BlockId dst) override;
  void kv_warm_encode(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks, uint8_t* k_slot,
                      uint8_t* v_slot) override;
  void kv_warm_encode_many(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks,
                           std::span<const int32_t> dst_slots) override;
  void kv_warm_decode(const KvLayerView& kv, BlockId id, ActView k, ActView v) override;
  bool reports_attention_importance() const override { return true; }
  void collect_importance() override;
  void finish_importance() override;
  void kv_move_rows(const KvLayerView& kv, std::span<const int32_t> src, std::span<const int32_t> dst) override;
  void kv_read_rows(std::span<const KvLayerView> views, std::span<const int32_t> slots, uint8_t* out) override;

  double measure_read_bandwidth_gbs(uint64_t bytes, int reps) override;
  // KV block transfers: cuda::KvTransfer (backend/cuda/kv_transfer.h), a copy stream of their own.
  uint64_t kv_blocks_to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) override;
  uint64_t kv_blocks_to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) override;
  uint64_t copy_to_device_async(std::span<const TransferPiece> pieces) override;
  void transfer_fence(uint64_t ticket) override;
  void transfer_wait(uint64_t ticket) override;
  TransferStats transfer_stats() override;
  double measure_transfer_bandwidth_gbs(bool to_device, uint64_t bytes, int reps) override;
  std::optional<uint64_t> free_memory_bytes() override;
  bool supports_device_picks() const override { return true; }
  void greedy_pick(ActView logits) override;
  void embed_picked(const WeightMatrix& table, ActView out) override;
  uint64_t collect_picks(int64_t n) override;
  std::span<const TokenId> picks(uint64_t ticket) override;
  float* host_result_buffer(size_t n) override;
  bool begin_replay(const ReplayShape& shape) override;
  void end_replay() override;

  // Decode passes decode_layers took (fused into one kernel) since the backend was made.
  int64_t fused_decode_passes() const;
  // Side-stream L2 prefetches recorded into decode graphs (STRATA_CUDA_SIDE_PREFETCH; 0 when off).
  int64_t side_prefetch_forks() const;
  // Device memory free and total, in bytes (cudaMemGetInfo).
  void memory_info(uint64_t* free_bytes, uint64_t* total_bytes) const;

 private:
  struct Impl;
  cuda::AttnBatch stage_attention(const KvLayerView& kv, std::span<const AttentionSeq> seqs, int64_t q_rows,
                                  int32_t n_head);
  // Attention importance around one layer's attention (see cuda_backend.cpp): begin (before the
  // attention launch: stages the per-sequence arrays, and for decode batches points b at this
  // layer's slice of the score buffers the decode kernel fills), end (after it: the mass kernel of
  // a prefill layer, or of the gathered decode layers when their slices are full). begin returns
  // false when no sequence asked (then end must not be called).
  struct ImpLayer;
  bool importance_begin(const KvLayerView& kv, std::span<const AttentionSeq> seqs, cuda::AttnBatch& b, int32_t n_head,
                        ImpLayer& il);
  void importance_end(const float* q, const KvLayerView& kv, const cuda::AttnBatch& b, int32_t n_head, float scale,
                      const ImpLayer& il);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
