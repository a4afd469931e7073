// The bytes of one pool of KV blocks: for each layer one K and one V array laid out
// [num_blocks][block_size][n_kv_heads][head_dim] in the pool's dtype, indexed by BlockId.
// Thread-safety: the arena is written by the forward pass on the engine thread; views are plain
// pointers into it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/anon_memory.h"
#include "kv/kv_types.h"

namespace strata {

struct KvGeometry {
  int32_t n_layer = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  KvDtype dtype = KvDtype::kF16;

  // K and V of one block across all layers.
  uint64_t bytes_per_block() const {
    return uint64_t{2} * static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(block_size) *
           static_cast<uint64_t>(n_kv_heads) * static_cast<uint64_t>(head_dim) * kv_dtype_size(dtype);
  }
  uint64_t bytes_per_token() const { return bytes_per_block() / static_cast<uint64_t>(block_size); }
};

class KvArena {
 public:
  // Allocates num_blocks blocks (zeroed); throws strata::Error when the memory cannot be had.
  KvArena(const KvGeometry& g, int32_t num_blocks);
  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  const KvGeometry& geometry() const { return geometry_; }
  int32_t num_blocks() const { return num_blocks_; }
  uint64_t bytes() const { return bytes_; }

  KvLayerView layer(int32_t l) const;
  std::vector<KvLayerView> layers() const;

 private:
  KvGeometry geometry_;
  int32_t num_blocks_;
  uint64_t bytes_;
  uint64_t layer_bytes_;  // one of K or V of one layer
  AnonymousMemory memory_;
};

}  // namespace strata
