// The backend interface: everything the forward pass and the KV storage need from a device —
// memory (activations, KV arenas, weights), the ops of a forward pass and the KV block operations
// — behind one abstract class, chosen once at start-up (--device cpu|cuda|auto) by make_backend().
//
// Why a class with virtual functions rather than a C-style function table: a backend has state
// (the CPU's thread pool and kernel scratch, a GPU's stream and allocator), and a vtable is exactly
// the "function table chosen once" of DESIGN.md with the state attached, checked by the compiler
// (a missing op is a compile error in the implementation, not a null pointer at run time). One
// virtual call per op per layer costs nanoseconds against kernels of microseconds or more.
//
// Memory model. A backend hands out memory (allocate, upload_matrix, upload_vector) whose
// addresses may be device addresses: code outside the backend stores them, offsets them (ActView
// rows, KvLayerView blocks) and passes them back, but never dereferences them unless
// host_visible() says they are host memory (true on CPU). Small index arrays that describe a batch
// (token ids, positions, KV slots, attention block tables) are host memory: the CPU reads them in
// place and a device backend copies them up with the op that needs them. Results come back with
// copy_to_host (the model does so for the logits only; on CPU that copy is skipped because the
// logits are already host memory).
//
// Ops run in call order. On a device backend they may be asynchronous: copy_to_host (and
// synchronize()) waits for every op issued before it. Preconditions on shapes are checked at the
// op's boundary (STRATA_CHECK), never in the inner loops.
//
// Thread-safety: a backend is used by one thread at a time (the engine thread): ops, allocation and
// thread_pool() work. Buffers may be destroyed on any thread once no op uses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/op_types.h"
#include "core/check.h"
#include "core/types.h"
#include "kv/kv_types.h"

namespace strata {

class ThreadPool;
enum class WarmFormat : uint8_t;

// --- Choosing a backend ----------------------------------------------------------------------

enum class DeviceKind : uint8_t {
  kAuto,  // CUDA when this build has it and a GPU is usable, else CPU
  kCpu,
  kCuda,
};

std::string_view device_kind_name(DeviceKind d);                   // "auto", "cpu", "cuda"
std::optional<DeviceKind> device_kind_from_name(std::string_view name);

struct BackendOptions {
  DeviceKind device = DeviceKind::kAuto;
  int n_threads = 0;  // CPU compute threads (host threads of a GPU backend); <= 0: one per physical core
  // --tensor-parallel: ranks the model is split over (Model::load; make_backend makes one backend).
  int tensor_parallel = 1;
  int device_index = 0;  // the GPU (CUDA ordinal) of a CUDA backend: tensor-parallel rank r uses GPU r
  // CPU: compute from the GGUF file's mapping instead of a copy of the weights in huge pages
  // (--mmap-weights; CpuBackend::upload_matrix).
  bool mapped_weights = false;
};

// GPUs this build can use on this machine (0 without CUDA or without a usable device).
int cuda_device_count();

// The concrete device `d` stands for in this build on this machine: kAuto becomes kCuda when a GPU
// is usable, else kCpu. Throws strata::Error when `d` cannot be had ("this strata was built
// without CUDA", "no usable CUDA device").
DeviceKind resolve_device(DeviceKind d);

// Whether this build has the CUDA backend (CMake STRATA_CUDA).
bool built_with_cuda();

// The devices this build can run on this machine, CPU first (the op tests run on each).
std::vector<DeviceKind> available_devices();

class Backend;
// Creates the backend for resolve_device(o.device). Throws strata::Error as resolve_device.
std::unique_ptr<Backend> make_backend(const BackendOptions& o);

// --- Memory ----------------------------------------------------------------------------------

enum class MemoryUse : uint8_t {
  kActivations,  // scratch of the forward pass: contents undefined on allocation
  kKvCache,      // KV arenas: zeroed; may be committed lazily (pages on first touch on CPU)
  // Host memory a device copies to and from at full speed (page-locked on a GPU: cudaHostAlloc,
  // portable and mapped; ordinary anonymous memory on CPU), for the host KV tier
  // (kv/host_cold_store.h). Its data() is a HOST pointer on every backend, whatever
  // host_visible() says. Contents undefined on allocation (zero on CPU).
  kPinnedHost,
};

// Memory owned by a backend; freed when the object is destroyed. data() is a device address (see
// the memory model above; a host address for MemoryUse::kPinnedHost), 64-byte aligned.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual uint8_t* data() const = 0;
  virtual uint64_t bytes() const = 0;
};

// A row-major f32 matrix [rows][cols] (rows contiguous, stride cols) in backend memory: the form
// of every activation the ops read and write.
struct ActView {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t size() const { return rows * cols; }
  // Rows [r0, r0 + n) (address arithmetic only: valid on device addresses too).
  ActView row_range(int64_t r0, int64_t n) const { return {data + r0 * cols, n, cols}; }
};

// One weight matrix of a fused matmul and where its output goes: y [x.rows][w->rows].
struct MatmulOut {
  const WeightMatrix* w = nullptr;
  ActView y;
};

// A norm left pending by Backend::matmul_add_rms_norm (the "lazy norm" of decode steps):
// RMSNorm(x) ⊙ g = r · (x ⊙ g) with one scalar r = 1 / sqrt(mean(x²) + eps) per row, so the
// backend may leave h holding x ⊙ g (not yet times r) and keep, in memory of its own, partial sums
// of squares of x per row from which the ops that read h compute r and scale their products.
// Every op that reads such an h must be given the PendingNorm (matmul_multi_normed,
// matmul_silu_mul_normed), or resolve_norm() must turn h into the normed rows first. Null parts:
// nothing pending (h holds the normed rows). Valid until the next matmul_add_rms_norm call.
struct PendingNorm {
  const float* parts = nullptr;  // backend memory, [rows][n_parts]: the rows' partial sums of x²
  int32_t n_parts = 0;
  float eps = 0;
  bool pending() const { return parts != nullptr; }
};

// --- Fused decode passes (Backend::decode_layers) -----------------------------------------------

// One layer's weights as the model holds them (backend memory); biases null unless the
// architecture has them (qwen2).
struct DecodeLayer {
  const WeightMatrix* wq = nullptr;
  const WeightMatrix* wk = nullptr;
  const WeightMatrix* wv = nullptr;
  const WeightMatrix* wo = nullptr;
  const WeightMatrix* w_gate = nullptr;
  const WeightMatrix* w_up = nullptr;
  const WeightMatrix* w_down = nullptr;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
};

struct DecodeLayersArgs {
  std::span<const DecodeLayer> layers;
  std::span<const KvLayerView> kv;  // one per layer
  ActView x;                        // [1][n_embd]: the residual stream, in and out
  std::span<const int32_t> pos;     // [1]: the token's RoPE position
  std::span<const int32_t> slots;   // [1]: its KV slot
  std::span<const AttentionSeq> seqs;  // [1], n_q == 1
  int32_t n_head = 0, n_kv_head = 0, head_dim = 0, n_ff = 0;
  RopeParams rope;
  float eps = 0, scale = 0;
};

// --- KV block transfers ------------------------------------------------------------------------

// One KV block to move between the arenas and host memory: hot block `index` (warm == false) or
// warm slot `index` of every layer; `mem` is where its bytes go (to the host) or come from.
struct KvBlockTransfer {
  bool warm = false;
  int32_t index = 0;
  uint8_t* mem = nullptr;
};

// A block's bytes, "its own bytes": for each layer in order, the block's K bytes then its V bytes
// (block_stride_bytes each for a hot block; warm_k_slot_bytes, warm_v_slot_bytes for a warm slot)
// — what KvStorage spills to its cold tier. Appends (arena address, bytes) per piece to `out`.
struct KvBlockPiece {
  uint8_t* at = nullptr;
  int64_t bytes = 0;
};
// (Inline: the backends, which strata_backend depends on, use them.)
inline void kv_block_pieces(std::span<const KvLayerView> layers, bool warm, int32_t index, std::vector<KvBlockPiece>& out) {
  for (const KvLayerView& v : layers) {
    if (warm) {
      out.push_back({v.warm_k + int64_t{index} * v.warm_k_slot_bytes, v.warm_k_slot_bytes});
      out.push_back({v.warm_v + int64_t{index} * v.warm_v_slot_bytes, v.warm_v_slot_bytes});
    } else {
      const int64_t bs = v.block_stride_bytes();
      out.push_back({v.k + int64_t{index} * bs, bs});
      out.push_back({v.v + int64_t{index} * bs, bs});
    }
  }
}

inline uint64_t kv_block_bytes(std::span<const KvLayerView> layers, bool warm) {
  uint64_t n = 0;
  for (const KvLayerView& v : layers) {
    n += static_cast<uint64_t>(warm ? v.warm_k_slot_bytes + v.warm_v_slot_bytes : 2 * v.block_stride_bytes());
  }
  return n;
}

// A plain copy of `bytes` bytes (copy_to_device_async).
struct TransferPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

// Totals of a backend's transfers (Backend::transfer_stats): bytes issued each way, seconds the
// copies of finished transfers took on the copy stream, seconds the op stream waited for them.
struct TransferStats {
  uint64_t bytes_to_host = 0;
  uint64_t bytes_to_device = 0;
  double seconds_to_host = 0;
  double seconds_to_device = 0;
  double compute_wait_seconds = 0;
};

// --- The interface ---------------------------------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind kind() const = 0;
  // For logs and bench reports, e.g. "cpu (AVX3_DL, 2 threads)".
  virtual std::string description() const = 0;
  // True when the addresses this backend hands out are host memory (CPU): callers may then read
  // results in place instead of copying them with copy_to_host.
  virtual bool host_visible() const = 0;
  // Host threads for work around the backend: the CPU kernels' pool, which the KV manager also
  // uses to re-encode blocks between steps (never while an op runs). Null when there are none.
  virtual ThreadPool* thread_pool() = 0;
  // Waits for every op issued so far (no-op on CPU).
  virtual void synchronize() = 0;
  // Makes the calling thread ready to issue this backend's ops and allocations (CUDA: selects its
  // GPU, which the runtime keeps per thread). Tensor parallelism's rank threads call it before a
  // pass, and the KV storage before each rank's ops; one GPU or the CPU need nothing.
  virtual void bind_thread() {}
  // The GPU this backend runs on (CUDA ordinal), -1 on the CPU.
  virtual int device_ordinal() const { return -1; }

  // Memory. Throws strata::Error when the memory cannot be had.
  virtual std::unique_ptr<DeviceBuffer> allocate(uint64_t bytes, MemoryUse use) = 0;
  // Host -> device and device -> host copies of `bytes` bytes (plain memcpy on CPU, skipped when
  // dst == src). Used for KV blocks moving between the device and host tiers, and for results.
  virtual void copy_to_device(void* dst_device, const void* src_host, uint64_t bytes) = 0;
  virtual void copy_to_host(void* dst_host, const void* src_device, uint64_t bytes) = 0;

  // Weights. `host` points into the model file's mapping (or a copy the model keeps), which
  // outlives the backend's use of the result; a backend returns it unchanged (the CPU backend with
  // BackendOptions::mapped_weights) or copies it to memory it owns until it is destroyed (a device
  // backend; the CPU backend into huge pages).
  virtual bool supports_matmul(GgmlType type) const = 0;
  virtual WeightMatrix upload_matrix(const WeightMatrix& host) = 0;
  // A table that is only row-gathered (Backend::embed), never multiplied by: the CPU backend leaves
  // it in the mapping (a few rows per token), a device backend uploads it as a matrix.
  virtual WeightMatrix upload_table(const WeightMatrix& host) { return upload_matrix(host); }
  virtual const float* upload_vector(const float* host, int64_t n) = 0;

  // --- Ops of the forward pass. Every ActView is backend memory. ---

  // out[t][:] = row tokens[t] of `table` as f32. out: [tokens.size()][table.cols].
  virtual void embed(const WeightMatrix& table, std::span<const TokenId> tokens, ActView out) = 0;
  // y[x.rows][w.rows] = x · wᵀ for any supports_matmul() type, accumulated in f32 (quantized
  // types: activations quantized to 8 bits per block, as ggml). A row's result does not depend on
  // the other rows of x. Preconditions: x.cols == w.cols; x and y do not overlap.
  virtual void matmul(const WeightMatrix& w, ActView x, ActView y) = 0;
  // Several matrices over the same x in one launch (Q/K/V, gate/up), each output as matmul()
  // computes it. Preconditions: as matmul() for each; all have cols == x.cols; outputs disjoint.
  virtual void matmul_multi(std::span<const MatmulOut> outs, ActView x) = 0;
  // y[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight; weight [x.cols]; y may equal x.
  virtual void rms_norm(ActView x, const float* weight, ActView y, float eps) = 0;
  // Rotary embedding in place: x [n_tokens][n_heads * head_dim], row t at position pos[t]
  // (llama3 frequency factors and linear scaling through p). pos: host, [x.rows].
  virtual void rope(ActView x, std::span<const int32_t> pos, int32_t n_heads, int32_t head_dim,
                    const RopeParams& p) = 0;
  // gate = silu(gate) * up, element-wise; same shapes.
  virtual void silu_mul(ActView gate, ActView up) = 0;
  // y += x, element-wise (residual connections); same shapes.
  virtual void add(ActView y, ActView x) = 0;
  // y[r] += bias for every row r; bias [y.cols] (backend memory).
  virtual void add_bias(ActView y, const float* bias) = 0;
  // dst[i] = src[rows[i]] (picks the rows that need logits). rows: host; dst: [rows.size()][src.cols].
  virtual void gather_rows(ActView src, std::span<const int32_t> rows, ActView dst) = 0;

  // --- Fused forms of op sequences the forward pass repeats. The defaults call the ops one by
  // one (the CPU backend keeps them); a device backend may do each in one pass, with the same
  // results as the sequence. ---

  // add(x, d), then rms_norm(x, weight, h, eps): the residual add of one block and the norm that
  // opens the next.
  virtual void add_rms_norm(ActView x, ActView d, const float* weight, ActView h, float eps) {
    add(x, d);
    rms_norm(x, weight, h, eps);
  }
  // matmul_multi({w_gate -> gate, w_up -> up}, x), then silu_mul(gate, up): the SiLU-gated
  // feed-forward input. The result is in gate; up is scratch (unspecified afterwards).
  virtual void matmul_silu_mul(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView x, ActView gate,
                               ActView up) {
    const MatmulOut outs[] = {{&w_gate, gate}, {&w_up, up}};
    matmul_multi(outs, x);
    silu_mul(gate, up);
  }
  // Whether matmul_add_rms_norm may leave the norm pending for batches of `rows` token rows (CUDA:
  // decode-sized batches with STRATA_CUDA_LAZY_NORM=1). False: it never does.
  virtual bool supports_lazy_norm(int64_t rows) const {
    (void)rows;
    return false;
  }
  // matmul(w, in, d), then add_rms_norm(x, d, weight, h, eps): a projection, the residual add and the
  // norm that opens the next block. With `lazy` (callers pass supports_lazy_norm(x.rows)) the backend
  // may leave the norm pending and return it (see PendingNorm; d is then unspecified, x is exactly
  // x + d as add() computes it); otherwise it returns nothing pending and h holds the normed rows.
  [[nodiscard]] virtual PendingNorm matmul_add_rms_norm(const WeightMatrix& w, ActView in, ActView d, ActView x,
                                                        const float* weight, ActView h, float eps, bool lazy) {
    (void)lazy;
    matmul(w, in, d);
    add_rms_norm(x, d, weight, h, eps);
    return {};
  }
  // Makes h the normed rows of a pending norm (h *= r per row) and clears `norm`; nothing when none
  // is pending. A backend that leaves norms pending overrides it.
  virtual void resolve_norm(ActView h, PendingNorm& norm) {
    (void)h;
    STRATA_CHECK(!norm.pending(), "this backend leaves no norm pending");
  }
  // matmul_multi(outs, h) where h may hold a pending norm (the products of the normed rows). The
  // default resolves the norm first (clearing `norm`); a backend may instead scale each product.
  virtual void matmul_multi_normed(std::span<const MatmulOut> outs, ActView h, PendingNorm& norm) {
    resolve_norm(h, norm);
    matmul_multi(outs, h);
  }
  // matmul_silu_mul(w_gate, w_up, h, gate, up) where h may hold a pending norm: silu(r a) · (r b).
  virtual void matmul_silu_mul_normed(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView h,
                                      PendingNorm& norm, ActView gate, ActView up) {
    resolve_norm(h, norm);
    matmul_silu_mul(w_gate, w_up, h, gate, up);
  }
  // rope(q, pos, n_head, head_dim, p), rope(k, pos, n_kv_head, head_dim, p), then
  // kv_store(kv, k, v, slots).
  virtual void rope_kv_store(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head,
                             int32_t n_kv_head, int32_t head_dim, const RopeParams& p, const KvLayerView& kv,
                             std::span<const int32_t> slots) {
    rope(q, pos, n_head, head_dim, p);
    rope(k, pos, n_kv_head, head_dim, p);
    kv_store(kv, k, v, slots);
  }
  // rope_kv_store(q, k, v, ...), then paged_attention(q, kv, seqs, n_head, scale, out): the attention
  // block of a layer from its raw projections. q and k are unspecified afterwards (a backend may
  // rotate copies of them). A device backend may do a decode batch in one kernel, with the same
  // results.
  virtual void rope_kv_store_attention(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head,
                                       int32_t n_kv_head, int32_t head_dim, const RopeParams& p,
                                       const KvLayerView& kv, std::span<const int32_t> slots,
                                       std::span<const AttentionSeq> seqs, float scale, ActView out) {
    rope_kv_store(q, k, v, pos, n_head, n_kv_head, head_dim, p, kv, slots);
    paged_attention(q, kv, seqs, n_head, scale, out);
  }

  // Every layer of a decode pass of one sequence and one token in one call (a backend may run them
  // as one persistent kernel): from x (the embedded token) to x after the last layer, exactly what
  // the model's layer loop computes (rms_norm, the projections, rope_kv_store_attention, the
  // feed-forward block and the residual adds), within rounding. Returns false, having done
  // nothing, where the backend does not take the pass (the model then runs the layer loop).
  virtual bool decode_layers(const DecodeLayersArgs& a) {
    (void)a;
    return false;
  }

  // --- KV ops. KvLayerView pointers are backend memory (allocate(..., kKvCache)). ---

  // Writes the new tokens' K and V (f32, [n][n_kv_heads * head_dim]) into their slots
  // (slot = block * block_size + offset; slots: host, [k.rows]) in the view's dtype.
  virtual void kv_store(const KvLayerView& kv, ActView k, ActView v, std::span<const int32_t> slots) = 0;
  // out[t][h] = softmax(q[t][h] · Kᵀ * scale) · V over each sequence's keys, causally, through its
  // block table (hot ids and warm sub-block ids); kv head = h / (n_head / n_kv_heads).
  // q, out: [n_tokens][n_head * head_dim]. Preconditions: n_head % n_kv_heads == 0; tables cover
  // their positions.
  virtual void paged_attention(ActView q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                               float scale, ActView out) = 0;
  // Whether paged_attention fills AttentionSeq::importance (the attention mass per key slot) and
  // keys may sit in slots other than their positions (eviction policies, --kv-evict). Backends
  // that return false ignore the buffer; the engine and the CLI refuse a policy on them.
  virtual bool reports_attention_importance() const { return false; }
  // The attention mass of the last forward pass into the host buffers of the sequences that asked
  // for it (AttentionSeq::importance), in two calls: the model calls collect_importance once after
  // each pass (it may only enqueue work: a device backend sums in its own memory and starts the
  // copy of its sums to the host), then finish_importance (it waits for that copy and adds the sums
  // into the buffers; after the logits' copy_to_host, which waited on the same stream, it costs no
  // second wait). The buffers hold the pass's mass once finish_importance returns, not before:
  // nothing reads them in between. The CPU kernels add into the host buffers directly (nothing to
  // do in either).
  virtual void collect_importance() {}
  virtual void finish_importance() {}
  // Copies token rows (K and V of every kv head, one layer) from hot slot src[i] to hot slot dst[i]
  // (slot = block * block_size + offset; host spans of one length), in any order: no source is the
  // destination of another (the compaction of a sequence after eviction within it).
  virtual void kv_move_rows(const KvLayerView& kv, std::span<const int32_t> src, std::span<const int32_t> dst) = 0;
  // Copies the token rows of hot slots `slots` (slot = block * block_size + offset) of every layer
  // of `views` to host memory `out`: per layer, the K rows of the slots in order, then their V
  // rows (each kv.token_stride_bytes(); out holds views.size() * 2 * slots.size() rows). Returns
  // when `out` is written (the demotion of evicted tokens, --kv-recall).
  virtual void kv_read_rows(std::span<const KvLayerView> views, std::span<const int32_t> slots, uint8_t* out) = 0;
  // Copies hot block src to hot block dst, K and V, in one layer (copy-on-write).
  virtual void kv_copy_block(const KvLayerView& kv, BlockId src, BlockId dst) = 0;
  // Encodes `blocks` (warm_span(f, block_size) full hot blocks of one layer) into one warm slot,
  // K into k_slot and V into v_slot (kv/warm_format.h layouts; backend memory).
  virtual void kv_warm_encode(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks, uint8_t* k_slot,
                              uint8_t* v_slot) = 0;
  // Encodes dst_slots.size() warm slots of one layer: slot dst_slots[i] (K at
  // hot.warm_k + slot * hot.warm_k_slot_bytes, V likewise) from the warm_span(f, block_size) hot
  // blocks blocks[i * span, (i + 1) * span), as kv_warm_encode would one by one. The default calls
  // kv_warm_encode per slot (which checks the span); a device backend does the whole list in one
  // launch. (Inline: an out-of-line virtual would make backend.cpp the home of Backend's vtable and
  // type info, which libraries below strata_backend then fail to link against.)
  virtual void kv_warm_encode_many(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks,
                                   std::span<const int32_t> dst_slots) {
    if (dst_slots.empty()) return;
    const size_t span = blocks.size() / dst_slots.size();
    for (size_t i = 0; i < dst_slots.size(); ++i) {
      kv_warm_encode(f, hot, blocks.subspan(i * span, span), hot.warm_k + dst_slots[i] * hot.warm_k_slot_bytes,
                     hot.warm_v + dst_slots[i] * hot.warm_v_slot_bytes);
    }
  }
  // Decodes warm sub-block `id` (>= kv.n_hot_blocks) of one layer to f32 K and V rows:
  // k, v: [block_size][n_kv_heads * head_dim] (the values attention reads).
  virtual void kv_warm_decode(const KvLayerView& kv, BlockId id, ActView k, ActView v) = 0;

  // --- KV block transfers between the KV arenas and host memory (the host tier below HBM) ---
  //
  // A block moves in its own bytes (kv_block_pieces): on a device backend the transfers run on a
  // copy stream of their own, in call order among themselves, never on the stream of the ops, and
  // each returns a ticket (increasing, > 0) to fence or wait on; on the CPU they are memcpy, done
  // on return (ticket 0). They are issued between passes, never inside begin_replay/end_replay.

  // Copies each block, as every op issued so far leaves it, to its `mem` (kv_block_bytes bytes,
  // host memory; page-locked memory, MemoryUse::kPinnedHost, is copied fastest). Ops issued after
  // this call may overwrite the blocks at once: the backend holds them back (on the device) until
  // the copy has read the blocks, not until the bytes reach the host. `mem` must stay valid, and
  // the host must not read it, until the ticket is done (transfer_wait).
  virtual uint64_t kv_blocks_to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) = 0;
  // Copies each block's bytes from its `mem` (host memory, or memory of this backend: a read-ahead
  // area) into the block, after every op issued so far is done with the block's old content. Ops
  // issued later see the new bytes only after transfer_fence(ticket). `mem` must stay unchanged
  // until the ticket is done. Preconditions (both directions): indices in range of `layers`; to
  // the device, no block twice in one call (its pieces are copied in no particular order).
  virtual uint64_t kv_blocks_to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) = 0;
  // Copies host memory to memory of this backend on the copy stream (reads ahead). Ordered with
  // the other transfers only: a later kv_blocks_to_device reading `dst` sees the bytes.
  virtual uint64_t copy_to_device_async(std::span<const TransferPiece> pieces) = 0;
  // Makes every op issued after this call wait, on the device (the host goes on), for transfer
  // `ticket` and the ones before it. No-op on the CPU and for tickets done.
  virtual void transfer_fence(uint64_t ticket) { (void)ticket; }
  // Waits on the host for transfer `ticket` and the ones before it (the rare synchronous case).
  virtual void transfer_wait(uint64_t ticket) { (void)ticket; }
  // Totals of the transfers done so far (zero on the CPU, whose copies are not transfers).
  virtual TransferStats transfer_stats() { return {}; }
  // Host <-> device copy bandwidth in GB/s over page-locked host memory (the PCIe limit transfers
  // are measured against), copies of `bytes`, best of `reps`; 0 where there is no device (CPU).
  virtual double measure_transfer_bandwidth_gbs(bool to_device, uint64_t bytes, int reps) = 0;

  // --- Replayable steps (CUDA graphs on a GPU) ---
  //
  // A forward pass whose shape repeats (decode steps) may be recorded once and replayed: the model
  // calls begin_replay(shape) before its ops and end_replay() after them (before copying results
  // back). When begin_replay returns true, the ops between must be called exactly as for any other
  // pass of the same shape (same ops, same sizes, same device buffers: the key says which), and the
  // backend may then only stage their host arrays and replay what it recorded; their results are
  // the same. Host arrays of attention are laid out padded to `max_blocks` per sequence. Backends
  // without the facility return false and run every op as it comes (the CPU).
  struct ReplayShape {
    uint64_t key = 0;        // everything that must match: sizes, buffer addresses, KV arenas
    int32_t n_tokens = 0;
    int32_t n_seqs = 0;
    int32_t max_blocks = 0;  // block-table length each sequence's table is padded to
    // Longest context of the pass (KV slots attended, the new tokens included); 0: unknown. A
    // backend may keep one recording per range of it (CUDA: the decode attention's launch plan).
    int32_t max_ctx = 0;
  };
  virtual bool begin_replay(const ReplayShape&) { return false; }
  virtual void end_replay() {}

  // --- Greedy picks on the device (decode loops that need the tokens, not the logits) ---
  //
  // A backend that supports them picks each logit row's token where the logits are, and the next
  // pass can embed those tokens from there, so a decode loop enqueues step t + 1 before it reads
  // step t's tokens back (Model::forward_pick). The pick is max_logit + argmax_index's
  // (sample/logit_kernels.h): the lowest index of the largest value, NaN never the largest; -1 when
  // that value is not finite (every value -inf or NaN, or a +inf: the sampler's "no token can be
  // sampled"), which embed_picked embeds as token 0. Backends without them (the CPU: the logits are
  // in host memory already) return false, and the model picks on the host.
  virtual bool supports_device_picks() const { return false; }
  // The pick of each row of `logits` into the backend's pick buffer, rows [0, logits.rows). An op
  // of the pass (recorded and replayed with it).
  virtual void greedy_pick(ActView logits) {
    (void)logits;
    STRATA_CHECK(false, "greedy_pick on a backend without device picks");
  }
  // out's rows = the embedding rows of the pick buffer's first out.rows tokens (the last
  // greedy_pick's, which picked at least that many rows). An op of the pass.
  virtual void embed_picked(const WeightMatrix& table, ActView out) {
    (void)table;
    (void)out;
    STRATA_CHECK(false, "embed_picked on a backend without device picks");
  }
  // After a pass (after end_replay): enqueues the copy of the pick buffer's first n tokens to the
  // host and returns its ticket, without waiting.
  virtual uint64_t collect_picks(int64_t n) {
    (void)n;
    STRATA_CHECK(false, "collect_picks on a backend without device picks");
  }
  // Waits for a ticket's copy and returns its tokens; valid until kPickTickets later collect_picks
  // calls (a ticket older than that: an error).
  static constexpr int kPickTickets = 4;
  virtual std::span<const TokenId> picks(uint64_t ticket) {
    (void)ticket;
    STRATA_CHECK(false, "picks on a backend without device picks");
  }

  // Host memory of at least n floats that copy_to_host fills fastest (pinned memory on a GPU), for
  // results copied back every step (the logits); valid until the next call. Null: use your own.
  virtual float* host_result_buffer(size_t n) {
    (void)n;
    return nullptr;
  }

  // Bytes of device memory free now, for sizing the KV cache by default; nullopt on the CPU (whose
  // KV cache has a fixed default size, kv/kv_config.h).
  virtual std::optional<uint64_t> free_memory_bytes() { return std::nullopt; }

  // Read bandwidth of the device's memory in GB/s (the decode-speed limit `bench model` reports),
  // measured over a buffer of `bytes`, best of `reps`.
  virtual double measure_read_bandwidth_gbs(uint64_t bytes, int reps) = 0;
};

}  // namespace strata
