// CpuBackend (cpu_backend.h): each op checks its shapes and calls the kernel of kernels.h with
// host pointers; no op copies activations.

#include "backend/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string_view>
#include <new>

#include "backend/cpu/bandwidth.h"
#include "backend/cpu/decode_order.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_float.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/profile.h"
#include "backend/cpu/quant_groups.h"
#include "core/anon_memory.h"
#include "core/check.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/tensor_type.h"
#include "kv/warm_format.h"

namespace strata {
namespace {

constexpr std::align_val_t kBufferAlign{64};

// Activations: uninitialised, cache-line aligned heap memory.
class HeapBuffer final : public DeviceBuffer {
 public:
  explicit HeapBuffer(uint64_t bytes)
      : data_(static_cast<uint8_t*>(::operator new(static_cast<size_t>(std::max<uint64_t>(bytes, 1)), kBufferAlign))),
        bytes_(bytes) {}
  ~HeapBuffer() override { ::operator delete(data_, kBufferAlign); }
  uint8_t* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  uint8_t* data_;
  uint64_t bytes_;
};

// KV arenas: zeroed anonymous memory, pages committed on first touch, in huge pages (attention
// streams K and V rows: decode at depth 2,048 / 8,192 ran 9% / 12-17% faster than on 4 KiB pages
// on a 2-core EPYC, docs/PERFORMANCE.md issue 17).
class AnonBuffer final : public DeviceBuffer {
 public:
  explicit AnonBuffer(uint64_t bytes) : memory_(bytes, AnonymousMemory::Pages::kHuge) {}
  uint8_t* data() const override { return memory_.data(); }
  uint64_t bytes() const override { return memory_.size(); }

 private:
  AnonymousMemory memory_;
};

// Times the rest of the enclosing scope under `name` when STRATA_CPU_PROFILE is set (profile.h).
#define STRATA_CPU_OP(name) const cpu::ProfileScope profile_scope([&] { return std::string(name); })

std::string matmul_name(const WeightMatrix& w, int64_t n) {
  return fmt::format("matmul {} {}x{}{}", ggml_type_name(w.type), w.rows, w.cols, n == 1 ? "" : " n>1");
}

void check_same_shape(ActView a, ActView b, const char* op) {
  STRATA_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: shapes [{}][{}] and [{}][{}] differ", op, a.rows, a.cols,
               b.rows, b.cols);
}

// STRATA_CPU_ROW_GROUPS=0 keeps copied F16/BF16 rows one after the other (cpu_backend.h).
bool row_groups_from_env() {
  const char* env = std::getenv("STRATA_CPU_ROW_GROUPS");
  if (env == nullptr || std::string_view(env).empty() || std::string_view(env) == "1") return true;
  if (std::string_view(env) == "0") return false;
  fail("STRATA_CPU_ROW_GROUPS={}: expected 0 (rows one after the other) or 1 (rows in groups of {} or {}, the default)",
       env, WeightMatrix::kRowGroup, WeightMatrix::kQuantGroup);
}

// STRATA_CPU_DECODE_CHUNKS=guided|fixed: how few-token matmuls share rows among threads (kernels.h).
void decode_chunks_from_env() {
  const char* env = std::getenv("STRATA_CPU_DECODE_CHUNKS");
  if (env == nullptr || std::string_view(env).empty()) return;
  if (std::string_view(env) == "guided") return cpu::set_decode_chunks(cpu::DecodeChunks::kGuided);
  if (std::string_view(env) == "fixed") return cpu::set_decode_chunks(cpu::DecodeChunks::kFixed);
  fail("STRATA_CPU_DECODE_CHUNKS={}: expected guided (chunks shrinking to the end of each matmul, the default) or fixed", env);
}

// STRATA_CPU_TARGET=NAME: every kernel on that one SIMD target (kernels.h: restrict_simd_target);
// unset, empty or "auto": the best this CPU supports.
void simd_target_from_env() {
  const char* env = std::getenv("STRATA_CPU_TARGET");
  if (env == nullptr || std::string_view(env).empty() || std::string_view(env) == "auto") return;
  try {
    cpu::restrict_simd_target(env);
  } catch (const std::invalid_argument& e) {
    fail("STRATA_CPU_TARGET={}: {}", env, e.what());
  }
}

}  // namespace

CpuBackend::CpuBackend(int n_threads, bool mapped_weights)
    : mapped_weights_(mapped_weights),
      row_groups_(row_groups_from_env()),
      pool_(std::make_unique<ThreadPool>(n_threads > 0 ? n_threads : ThreadPool::physical_cores())),
      scratch_(std::make_unique<cpu::KernelScratch>()) {
  decode_chunks_from_env();
  simd_target_from_env();
}

CpuBackend::~CpuBackend() { cpu::profile_report(); }

bool CpuBackend::groups_rows(const WeightMatrix& host) const {
  return !mapped_weights_ && row_groups_ && (host.type == GgmlType::kF16 || host.type == GgmlType::kBF16) &&
         host.row_bytes % 64 == 0 && host.rows > 0 && host.data != nullptr;
}

bool CpuBackend::groups_quant_rows(const WeightMatrix& host) const {
  return !mapped_weights_ && row_groups_ && cpu::quant_groups_supported(host.type, host.cols) && host.rows > 0 &&
         host.data != nullptr;
}

WeightMatrix CpuBackend::upload_matrix(const WeightMatrix& host) {
  const bool grouped = groups_rows(host);
  const bool quant_grouped = groups_quant_rows(host);
  for (size_t i = 0; i < kQuantGroupTypes.size(); ++i) quant_grouped_[i] |= quant_grouped && host.type == kQuantGroupTypes[i];
  // How one token walks the matrix, measured at the first matrix of each type with a choice of at
  // least 512 columns, once per process and type: F32/F16/BF16 rows as stored and the K-quants, the
  // order (cpu::DecodeOrder); F16/BF16 rows in groups (always 4-row tiles) and quant groups, the
  // prefetch (GroupPrefetch). Below that size (toy models of the tests) the weights stay in cache and
  // neither matters; the defaults then.
  static std::once_flag group_prefetch_once[cpu::kGroupPrefetchSlots];
  if (quant_grouped && host.cols >= 512) {
    const auto slot = static_cast<size_t>(cpu::group_prefetch_slot_or_none(host.type));
    std::call_once(group_prefetch_once[slot], [&] {
      cpu::set_group_prefetch(host.type, cpu::choose_group_prefetch(*pool_, host.type, host.cols));
      if (cpu::group_prefetch_measured()) cpu::enable_group_prefetch_retuning(host.type);
    });
    for (size_t i = 0; i < kQuantGroupTypes.size(); ++i) quant_prefetch_chosen_[i] |= host.type == kQuantGroupTypes[i];
  }
  if (cpu::has_decode_order(host.type) && !quant_grouped) {  // (in quant groups one token has one order)
    const auto slot = static_cast<size_t>(cpu::decode_order_slot(host.type));
    if (grouped) grouped_types_[slot] = true;
    if (host.cols >= 512) {
      static std::once_flag order_once[cpu::kDecodeOrderSlots];
      if (grouped) {
        std::call_once(group_prefetch_once[slot], [&] {
          cpu::set_group_prefetch(host.type, cpu::choose_group_prefetch(*pool_, host.type, host.cols));
          if (cpu::group_prefetch_measured()) cpu::enable_group_prefetch_retuning(host.type);
        });
        group_prefetch_chosen_[slot] = true;
      } else {
        std::call_once(order_once[slot], [&] {
          cpu::set_decode_order(host.type, cpu::choose_decode_order(*pool_, host.type, host.cols));
        });
        decode_order_chosen_[slot] = true;
      }
    }
  }
  const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(host.rows, 0));
  constexpr uint64_t kG = WeightMatrix::kRowGroup;
  const uint64_t groups = (rows + kG - 1) / kG;
  const uint64_t bytes = quant_grouped ? cpu::quant_group_bytes(host) : host.row_bytes * (grouped ? groups * kG : rows);
  // The types measured faster from huge pages (docs/PERFORMANCE.md, issue 17): 16/32-bit floats
  // (+16-45% decode on a 2-core EPYC) and Q8_0 (+8-23% there and on a Xeon); and the K-quants,
  // level with the mapping or a little ahead (Zen 3 one row at a time, four alternated runs: Q4_K
  // median +6%, Q6_K +1%; the Xeon in tiles: level), copied so that they are read from the pages
  // their one-token order was measured on (choose_decode_order); Q4_0, Q4_1, Q5_0 and Q5_1 for their
  // groups of 16 rows (quant_grouped). Their rows without a whole pair of blocks were not measured:
  // they stay mapped.
  const bool copies = host.type == GgmlType::kF32 || host.type == GgmlType::kF16 || host.type == GgmlType::kBF16 ||
                      host.type == GgmlType::kQ8_0 || cpu::quant_act_block(host.type) == 256 ||  // 256: the K-quants
                      quant_grouped;
  if (mapped_weights_ || !copies || host.data == nullptr || bytes == 0) return host;
  constexpr uint64_t kArenaBytes = uint64_t{64} << 20, kAlign = 64;
  uint64_t at = (arena_used_ + kAlign - 1) & ~(kAlign - 1);
  if (weight_arenas_.empty() || at + bytes > weight_arenas_.back().size()) {
    weight_arenas_.emplace_back(std::max(kArenaBytes, bytes), AnonymousMemory::Pages::kHuge);
    at = 0;
  }
  uint8_t* dst = weight_arenas_.back().data() + at;
  // Copied by the pool's threads, a contiguous part each (memory-bound; `strata generate -n 1` on a
  // 256 MB F16 model, 2-core VM: 0.28-0.60 s, median 0.40, against 0.24 s with --mmap-weights).
  const auto threads = static_cast<uint64_t>(pool_->size());
  if (quant_grouped) {
    const auto qgroups = bytes / (host.row_bytes * static_cast<uint64_t>(cpu::kQuantGroupRows));
    pool_->run([&](int t) {
      cpu::write_quant_groups(host, dst, qgroups * static_cast<uint64_t>(t) / threads,
                              qgroups * static_cast<uint64_t>(t + 1) / threads);
    });
  } else if (grouped) {
    // Group by group (op_types.h): line c of the group's row j at line kG * c + j; rows past the
    // last are zero.
    const uint64_t lines = host.row_bytes / 64;
    pool_->run([&](int t) {
      const uint64_t g0 = groups * static_cast<uint64_t>(t) / threads;
      const uint64_t g1 = groups * static_cast<uint64_t>(t + 1) / threads;
      for (uint64_t g = g0; g < g1; ++g) {
        uint8_t* out = dst + g * kG * host.row_bytes;
        for (uint64_t j = 0; j < kG; ++j) {
          const uint64_t r = g * kG + j;
          for (uint64_t c = 0; c < lines; ++c) {
            uint8_t* line = out + (kG * c + j) * 64;
            if (r < rows) std::memcpy(line, host.data + r * host.row_bytes + c * 64, 64);
            else std::memset(line, 0, 64);
          }
        }
      }
    });
  } else {
    pool_->run([&](int t) {
      const uint64_t b = bytes * static_cast<uint64_t>(t) / threads, e = bytes * static_cast<uint64_t>(t + 1) / threads;
      if (e > b) std::memcpy(dst + b, host.data + b, e - b);
    });
  }
  arena_used_ = at + bytes;
  WeightMatrix w = host;
  w.data = dst;
  w.row_group = quant_grouped ? WeightMatrix::kQuantGroup : grouped ? WeightMatrix::kRowGroup : 0;
  return w;
}

std::string CpuBackend::description() const {
  std::string orders;
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ2_K,
                            GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    const auto i = static_cast<size_t>(cpu::decode_order_slot(type));
    if (i < grouped_types_.size() && grouped_types_[i]) {
      orders += fmt::format("{}{} in groups of {} rows", orders.empty() ? "" : ", ", ggml_type_name(type),
                            WeightMatrix::kRowGroup);
      if (group_prefetch_chosen_[i]) {
        orders += fmt::format(" ({} prefetch{})", cpu::group_prefetch_name(cpu::group_prefetch(type)),
                              cpu::group_prefetch_retuning(type) ? " at load, retuned while decoding" : "");
      }
    }
    if (!decode_order_chosen_[i]) continue;
    orders += fmt::format("{}{} in {}", orders.empty() ? "" : ", ", ggml_type_name(type),
                          cpu::decode_order_name(cpu::decode_order(type)));
  }
  for (size_t i = 0; i < kQuantGroupTypes.size(); ++i) {
    if (!quant_grouped_[i]) continue;
    orders += fmt::format("{}{} in groups of {} rows", orders.empty() ? "" : ", ", ggml_type_name(kQuantGroupTypes[i]),
                          WeightMatrix::kQuantGroup);
    if (quant_prefetch_chosen_[i]) {
      orders += fmt::format(" ({} prefetch{})", cpu::group_prefetch_name(cpu::group_prefetch(kQuantGroupTypes[i])),
                            cpu::group_prefetch_retuning(kQuantGroupTypes[i]) ? " at load, retuned while decoding" : "");
    }
  }
  if (orders.empty()) return fmt::format("cpu ({}, {} threads)", cpu::simd_target_name(), pool_->size());
  return fmt::format("cpu ({}, {} threads, one-token matmuls: {})", cpu::simd_target_name(), pool_->size(), orders);
}

std::unique_ptr<DeviceBuffer> CpuBackend::allocate(uint64_t bytes, MemoryUse use) {
  if (use == MemoryUse::kKvCache || use == MemoryUse::kPinnedHost) return std::make_unique<AnonBuffer>(bytes);
  try {
    return std::make_unique<HeapBuffer>(bytes);
  } catch (const std::bad_alloc&) {
    fail("cannot allocate {} bytes of activation memory", bytes);
  }
}

void CpuBackend::copy_to_device(void* dst_device, const void* src_host, uint64_t bytes) {
  if (dst_device != src_host && bytes > 0) std::memcpy(dst_device, src_host, static_cast<size_t>(bytes));
}

void CpuBackend::copy_to_host(void* dst_host, const void* src_device, uint64_t bytes) {
  if (dst_host != src_device && bytes > 0) std::memcpy(dst_host, src_device, static_cast<size_t>(bytes));
}

bool CpuBackend::supports_matmul(GgmlType type) const { return cpu::matmul_supports(type); }

void CpuBackend::embed(const WeightMatrix& table, std::span<const TokenId> tokens, ActView out) {
  STRATA_CPU_OP("embed");
  STRATA_CHECK(out.rows == static_cast<int64_t>(tokens.size()) && out.cols == table.cols, "embed: output shape");
  for (size_t t = 0; t < tokens.size(); ++t) {
    STRATA_CHECK(tokens[t] >= 0 && tokens[t] < table.rows, "embed: token id {} out of range", tokens[t]);
    cpu::get_row(table, tokens[t], out.data + static_cast<int64_t>(t) * out.cols);
  }
}

void CpuBackend::matmul(const WeightMatrix& w, ActView x, ActView y) {
  STRATA_CPU_OP(matmul_name(w, x.rows));
  STRATA_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, "matmul: x [{}][{}], w [{}][{}], y [{}][{}]",
               x.rows, x.cols, w.rows, w.cols, y.rows, y.cols);
  cpu::matmul(w, x.data, x.rows, y.data, *pool_, *scratch_);
}

void CpuBackend::matmul_multi(std::span<const MatmulOut> outs, ActView x) {
  STRATA_CPU_OP([&] {
    fmt::memory_buffer name;
    fmt::format_to(std::back_inserter(name), "matmul_multi");
    for (const MatmulOut& o : outs) fmt::format_to(std::back_inserter(name), " {}", std::string_view(matmul_name(*o.w, x.rows)).substr(7));
    return fmt::to_string(name);
  }());
  constexpr size_t kMaxJobs = 8;  // Q/K/V and gate/up need 3 and 2
  STRATA_CHECK(outs.size() <= kMaxJobs, "matmul_multi: at most {} matrices", kMaxJobs);
  cpu::MatmulJob jobs[kMaxJobs];
  for (size_t i = 0; i < outs.size(); ++i) {
    const WeightMatrix& w = *outs[i].w;
    const ActView y = outs[i].y;
    STRATA_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows,
                 "matmul_multi: x [{}][{}], w [{}][{}], y [{}][{}]", x.rows, x.cols, w.rows, w.cols, y.rows, y.cols);
    jobs[i] = {&w, y.data};
  }
  cpu::matmul_multi(std::span<const cpu::MatmulJob>(jobs, outs.size()), x.data, x.rows, *pool_, *scratch_);
}

void CpuBackend::rms_norm(ActView x, const float* weight, ActView y, float eps) {
  STRATA_CPU_OP("rms_norm");
  check_same_shape(x, y, "rms_norm");
  cpu::rms_norm(x.data, weight, y.data, x.rows, x.cols, eps);
}

void CpuBackend::rope(ActView x, std::span<const int32_t> pos, int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  STRATA_CPU_OP("rope");
  STRATA_CHECK(static_cast<int64_t>(pos.size()) == x.rows && x.cols == int64_t{n_heads} * head_dim, "rope: shapes");
  cpu::rope(x.data, pos.data(), x.rows, n_heads, head_dim, p);
}

void CpuBackend::silu_mul(ActView gate, ActView up) {
  STRATA_CPU_OP("silu_mul");
  check_same_shape(gate, up, "silu_mul");
  cpu::silu_mul(gate.data, up.data, gate.size());
}

void CpuBackend::add(ActView y, ActView x) {
  STRATA_CPU_OP("add");
  check_same_shape(y, x, "add");
  cpu::add_inplace(y.data, x.data, y.size());
}

void CpuBackend::add_bias(ActView y, const float* bias) {
  STRATA_CPU_OP("add_bias");
  for (int64_t r = 0; r < y.rows; ++r) cpu::add_inplace(y.data + r * y.cols, bias, y.cols);
}

void CpuBackend::gather_rows(ActView src, std::span<const int32_t> rows, ActView dst) {
  STRATA_CPU_OP("gather_rows");
  STRATA_CHECK(dst.rows == static_cast<int64_t>(rows.size()) && dst.cols == src.cols, "gather_rows: shapes");
  const auto row_bytes = static_cast<size_t>(src.cols) * sizeof(float);
  for (size_t i = 0; i < rows.size();) {
    // Runs of consecutive rows (a prompt's logits) are one copy.
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    STRATA_CHECK(rows[i] >= 0 && rows[j - 1] < src.rows, "gather_rows: row out of range");
    if (dst.data + static_cast<int64_t>(i) * dst.cols != src.data + int64_t{rows[i]} * src.cols) {
      std::memmove(dst.data + static_cast<int64_t>(i) * dst.cols, src.data + int64_t{rows[i]} * src.cols,
                   (j - i) * row_bytes);
    }
    i = j;
  }
}

void CpuBackend::kv_store(const KvLayerView& kv, ActView k, ActView v, std::span<const int32_t> slots) {
  STRATA_CPU_OP("kv_store");
  check_same_shape(k, v, "kv_store");
  STRATA_CHECK(static_cast<int64_t>(slots.size()) == k.rows && k.cols == int64_t{kv.n_kv_heads} * kv.head_dim,
               "kv_store: shapes");
  cpu::kv_store(kv, k.data, v.data, slots.data(), k.rows);
}

void CpuBackend::paged_attention(ActView q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                                 float scale, ActView out) {
  STRATA_CPU_OP("paged_attention");
  check_same_shape(q, out, "paged_attention");
  STRATA_CHECK(q.cols == int64_t{n_head} * kv.head_dim && n_head % kv.n_kv_heads == 0, "paged_attention: shapes");
  cpu::paged_attention(q.data, kv, seqs, n_head, scale, out.data, *pool_, *scratch_);
}

void CpuBackend::kv_move_rows(const KvLayerView& kv, std::span<const int32_t> src, std::span<const int32_t> dst) {
  STRATA_CHECK(src.size() == dst.size(), "kv_move_rows: {} sources, {} destinations", src.size(), dst.size());
  const int64_t ts = kv.token_stride_bytes();
  for (size_t i = 0; i < src.size(); ++i) {
    std::memcpy(kv.k + int64_t{dst[i]} * ts, kv.k + int64_t{src[i]} * ts, static_cast<size_t>(ts));
    std::memcpy(kv.v + int64_t{dst[i]} * ts, kv.v + int64_t{src[i]} * ts, static_cast<size_t>(ts));
  }
}

void CpuBackend::kv_read_rows(std::span<const KvLayerView> views, std::span<const int32_t> slots, uint8_t* out) {
  for (const KvLayerView& kv : views) {
    const int64_t ts = kv.token_stride_bytes();
    for (const uint8_t* arena : {kv.k, kv.v}) {
      for (int32_t slot : slots) {
        STRATA_CHECK(slot >= 0 && slot / kv.block_size < kv.n_hot_blocks, "kv_read_rows: slot {} is not hot", slot);
        std::memcpy(out, arena + int64_t{slot} * ts, static_cast<size_t>(ts));
        out += ts;
      }
    }
  }
}

void CpuBackend::kv_copy_block(const KvLayerView& kv, BlockId src, BlockId dst) {
  STRATA_CHECK(src >= 0 && dst >= 0 && src < kv.n_hot_blocks && dst < kv.n_hot_blocks, "kv_copy_block: not hot ids");
  const int64_t bs = kv.block_stride_bytes();
  std::memcpy(kv.k + dst * bs, kv.k + src * bs, static_cast<size_t>(bs));
  std::memcpy(kv.v + dst * bs, kv.v + src * bs, static_cast<size_t>(bs));
}

void CpuBackend::kv_warm_encode(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks,
                                uint8_t* k_slot, uint8_t* v_slot) {
  STRATA_CHECK(static_cast<int32_t>(blocks.size()) == warm_span(f, hot.block_size), "kv_warm_encode: span");
  warm_encode(f, hot, blocks.data(), static_cast<int32_t>(blocks.size()), k_slot, v_slot);
}

void CpuBackend::kv_warm_decode(const KvLayerView& kv, BlockId id, ActView k, ActView v) {
  const int32_t H = kv.n_kv_heads, D = kv.head_dim;
  check_same_shape(k, v, "kv_warm_decode");
  STRATA_CHECK(k.rows == kv.block_size && k.cols == int64_t{H} * D, "kv_warm_decode: shapes");
  STRATA_CHECK(id >= kv.n_hot_blocks && kv.warm_format != WarmFormat::kNone, "kv_warm_decode: {} is not a warm id", id);
  const int64_t w = id - kv.n_hot_blocks;
  const int64_t slot = w / kv.warm_span;
  const int32_t t0 = static_cast<int32_t>(w % kv.warm_span) * kv.block_size;
  const uint8_t* ks = kv.warm_k + slot * kv.warm_k_slot_bytes;
  const uint8_t* vs = kv.warm_v + slot * kv.warm_v_slot_bytes;
  for (int32_t s = 0; s < kv.block_size; ++s) {
    for (int32_t h = 0; h < H; ++h) {
      float* kr = k.data + int64_t{s} * k.cols + int64_t{h} * D;
      float* vr = v.data + int64_t{s} * v.cols + int64_t{h} * D;
      warm_decode_row(kv.warm_format, false, ks, kv.warm_span, kv.block_size, H, D, t0 + s, h, kr);
      warm_decode_row(kv.warm_format, true, vs, kv.warm_span, kv.block_size, H, D, t0 + s, h, vr);
    }
  }
}

uint64_t CpuBackend::kv_blocks_to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  std::vector<KvBlockPiece> pieces;
  for (const KvBlockTransfer& b : blocks) {
    pieces.clear();
    kv_block_pieces(layers, b.warm, b.index, pieces);
    uint8_t* p = b.mem;
    for (const KvBlockPiece& c : pieces) {
      std::memcpy(p, c.at, static_cast<size_t>(c.bytes));
      p += c.bytes;
    }
  }
  return 0;
}

uint64_t CpuBackend::kv_blocks_to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  std::vector<KvBlockPiece> pieces;
  for (const KvBlockTransfer& b : blocks) {
    pieces.clear();
    kv_block_pieces(layers, b.warm, b.index, pieces);
    const uint8_t* p = b.mem;
    for (const KvBlockPiece& c : pieces) {
      std::memcpy(c.at, p, static_cast<size_t>(c.bytes));
      p += c.bytes;
    }
  }
  return 0;
}

uint64_t CpuBackend::copy_to_device_async(std::span<const TransferPiece> pieces) {
  for (const TransferPiece& c : pieces) {
    if (c.dst != c.src) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
  }
  return 0;
}

double CpuBackend::measure_read_bandwidth_gbs(uint64_t bytes, int reps) {
  return cpu::measure_read_bandwidth_gbs(*pool_, static_cast<size_t>(bytes), reps);
}

}  // namespace strata
