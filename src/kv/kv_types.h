// Vocabulary of the KV cache shared by kv/, model/ and backend/: block ids, element types and the
// view of one layer's K/V arena that attention kernels read through block tables.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <climits>
#include <optional>
#include <string_view>

namespace strata {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

// Element type of hot (full-precision) KV blocks.
enum class KvDtype : uint8_t { kF32, kF16, kBF16 };

inline constexpr int kv_dtype_size(KvDtype t) { return t == KvDtype::kF32 ? 4 : 2; }
std::string_view kv_dtype_name(KvDtype t);
std::optional<KvDtype> kv_dtype_from_name(std::string_view name);

enum class WarmFormat : uint8_t;

// One layer's K and V arenas. Hot block b (b < n_hot_blocks), token slot s, kv head h, dim d:
//   k + (((b * block_size + s) * n_kv_heads + h) * head_dim + d) * elem_size
// i.e. [num_blocks][block_size][n_kv_heads][head_dim] for K and for V.
// Ids >= n_hot_blocks in a block table name warm sub-blocks (see kv/warm_format.h):
//   w = id - n_hot_blocks, warm slot w / warm_span, sub-block w % warm_span; slot bytes at
//   warm_k + slot * warm_k_slot_bytes (and likewise for V).
// Ids >= host_base name host slots of the cold tier that a running sequence's blocks live in
// (--kv-offload: attended in place, from pinned host memory that the device reads over the bus):
//   slot = id - host_base; the block's rows, in the hot layout and element type, at
//   host + slot * host_slot_bytes + host_k_offset (V: host_v_offset), i.e. the bytes the block had
//   in the hot arena, as KvStorage wrote them into the slot ([layers][K block, V block], after the
//   slot's frame header on the host path). host_base > every warm id.
struct KvLayerView {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;

  int32_t n_hot_blocks = INT32_MAX;  // no warm tier unless set
  WarmFormat warm_format{};          // kNone (0) when there is no warm tier
  int32_t warm_span = 1;
  uint8_t* warm_k = nullptr;
  uint8_t* warm_v = nullptr;
  int64_t warm_k_slot_bytes = 0;
  int64_t warm_v_slot_bytes = 0;

  int32_t host_base = INT32_MAX;  // no host slots unless set
  uint8_t* host = nullptr;        // slot 0 of the host tier
  int64_t host_slot_bytes = 0;
  int64_t host_k_offset = 0;      // this layer's K block within a slot
  int64_t host_v_offset = 0;

  int64_t token_stride_bytes() const { return int64_t{n_kv_heads} * head_dim * kv_dtype_size(dtype); }
  int64_t block_stride_bytes() const { return token_stride_bytes() * block_size; }
  bool is_host(int32_t id) const { return id >= host_base; }
  // Hot-layout K (V) bytes of block `id`, hot or host (not warm).
  uint8_t* hot_k(int32_t id) const {
    return is_host(id) ? host + int64_t{id - host_base} * host_slot_bytes + host_k_offset : k + int64_t{id} * block_stride_bytes();
  }
  uint8_t* hot_v(int32_t id) const {
    return is_host(id) ? host + int64_t{id - host_base} * host_slot_bytes + host_v_offset : v + int64_t{id} * block_stride_bytes();
  }
};

}  // namespace strata
