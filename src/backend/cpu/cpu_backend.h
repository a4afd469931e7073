// The CPU backend: the Backend interface (backend/backend.h) over the SIMD kernels of kernels.h,
// their thread pool and scratch memory. Memory is host memory (host_visible() is true): weights
// stay in the GGUF mapping, activations are 64-byte-aligned heap blocks, KV arenas anonymous
// mappings that are committed on first touch; host<->device copies are memcpy.
// Thread-safety: as Backend: one thread at a time (the engine thread).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/anon_memory.h"

namespace strata {

namespace cpu {
struct KernelScratch;
}

class CpuBackend final : public Backend {
 public:
  // n_threads <= 0: one per physical core. mapped_weights: upload_matrix returns the host matrix
  // itself (the GGUF file's mapping) instead of a copy in huge pages (see upload_matrix).
  explicit CpuBackend(int n_threads = 0, bool mapped_weights = false);
  ~CpuBackend() override;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string description() const override;
  bool host_visible() const override { return true; }
  ThreadPool* thread_pool() override { return pool_.get(); }
  void synchronize() override {}

  std::unique_ptr<DeviceBuffer> allocate(uint64_t bytes, MemoryUse use) override;
  void copy_to_device(void* dst_device, const void* src_host, uint64_t bytes) override;
  void copy_to_host(void* dst_host, const void* src_device, uint64_t bytes) override;

  bool supports_matmul(GgmlType type) const override;
  // F32/F16/BF16/Q8_0 matrices: a copy in anonymous memory advised for transparent huge pages
  // (arenas of at least 64 MiB, each matrix 64-byte aligned). Matrix-vector products stream the
  // weights from memory: on the file's 4 KiB pages every page costs a page walk and restarts the
  // hardware prefetchers, which cost F16 decode 23-35% on a 2-core EPYC (docs/PERFORMANCE.md,
  // issue 17). Other types (K-quants: 4-10% slower from the copy in five runs of six), and every
  // type with mapped_weights (--mmap-weights): the host matrix itself. The same bytes either way,
  // so the same results. Tables (upload_table) stay mapped.
  // F16/BF16 rows of a multiple of 64 bytes are copied in groups of 4 rows interleaved line by
  // line (WeightMatrix::row_group): a tile of 4 rows then reads one sequential stream, so one
  // token's matmul has both the single stream that hardware prefetchers follow and 4 FMA chains
  // in flight (docs/PERFORMANCE.md, issue 17); whether software prefetch helps that stream is
  // measured at the first such matrix of ≥ 512 columns per type (cpu::choose_group_prefetch).
  // Quantized matrices (K-quants of whole super-blocks; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 of whole pairs
  // of blocks) are copied in groups of 16 rows (WeightMatrix::kQuantGroup, cpu/quant_groups.h): their
  // kernel then keeps a row in each vector lane and unpacks the scales of 16 rows at once
  // (docs/PERFORMANCE.md, issue 17). Their arithmetic per output differs from
  // the rows-as-stored kernels' (within their error bound, not bit for bit), and is the same for
  // every batch, thread count and x86 target (and software prefetch or none); their prefetch is
  // measured as F16/BF16's, per type.
  // STRATA_CPU_ROW_GROUPS=0 keeps the rows as they are.
  // For F16/BF16 the same arithmetic per output, so the same results either way.
  WeightMatrix upload_matrix(const WeightMatrix& host) override;
  WeightMatrix upload_table(const WeightMatrix& host) override { return host; }
  const float* upload_vector(const float* host, int64_t) override { return host; }

  void embed(const WeightMatrix& table, std::span<const TokenId> tokens, ActView out) override;
  void matmul(const WeightMatrix& w, ActView x, ActView y) override;
  void matmul_multi(std::span<const MatmulOut> outs, ActView x) override;
  void rms_norm(ActView x, const float* weight, ActView y, float eps) override;
  void rope(ActView x, std::span<const int32_t> pos, int32_t n_heads, int32_t head_dim, const RopeParams& p) override;
  void silu_mul(ActView gate, ActView up) override;
  void add(ActView y, ActView x) override;
  void add_bias(ActView y, const float* bias) override;
  void gather_rows(ActView src, std::span<const int32_t> rows, ActView dst) override;

  void kv_store(const KvLayerView& kv, ActView k, ActView v, std::span<const int32_t> slots) override;
  void paged_attention(ActView q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                       float scale, ActView out) override;
  bool reports_attention_importance() const override { return true; }
  void kv_copy_block(const KvLayerView& kv, BlockId src, BlockId dst) override;
  void kv_move_rows(const KvLayerView& kv, std::span<const int32_t> src, std::span<const int32_t> dst) override;
  void kv_read_rows(std::span<const KvLayerView> views, std::span<const int32_t> slots, uint8_t* out) override;
  void kv_warm_encode(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks, uint8_t* k_slot,
                      uint8_t* v_slot) override;
  void kv_warm_decode(const KvLayerView& kv, BlockId id, ActView k, ActView v) override;

  double measure_read_bandwidth_gbs(uint64_t bytes, int reps) override;
  // KV block transfers are memcpy, done on return (ticket 0); there is no device to measure.
  uint64_t kv_blocks_to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) override;
  uint64_t kv_blocks_to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) override;
  uint64_t copy_to_device_async(std::span<const TransferPiece> pieces) override;
  double measure_transfer_bandwidth_gbs(bool, uint64_t, int) override { return 0; }

 private:
  // Whether upload_matrix copies `host` with its rows in groups.
  bool groups_rows(const WeightMatrix& host) const;
  // Whether upload_matrix copies `host` (a quantized type of quant_groups_supported) in quant groups of 16 rows.
  bool groups_quant_rows(const WeightMatrix& host) const;

  bool mapped_weights_;
  bool row_groups_;                             // STRATA_CPU_ROW_GROUPS (default on)
  std::array<bool, 3> grouped_types_{};         // per cpu::decode_order_slot: a matrix was copied in groups
  std::array<bool, 3> group_prefetch_chosen_{};  // ... and a cpu::GroupPrefetch measured for it
  static constexpr std::array<GgmlType, 10> kQuantGroupTypes = {
      GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
      GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1};
  std::array<bool, kQuantGroupTypes.size()> quant_grouped_{};  // per kQuantGroupTypes: a matrix of that type was copied in quant groups
  std::array<bool, kQuantGroupTypes.size()> quant_prefetch_chosen_{};  // ... and a cpu::GroupPrefetch measured for it
  std::array<bool, 8> decode_order_chosen_{};  // per cpu::decode_order_slot: a cpu::DecodeOrder measured
  std::vector<AnonymousMemory> weight_arenas_;  // upload_matrix's copies; the last one is being filled
  uint64_t arena_used_ = 0;                      // bytes used in weight_arenas_.back()
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<cpu::KernelScratch> scratch_;
};

}  // namespace strata
