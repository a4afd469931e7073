#include "kv/kv_arena.h"

#include "core/check.h"
#include "core/error.h"
#include "core/units.h"

namespace strata {

KvArena::KvArena(const KvGeometry& g, int32_t num_blocks)
    : geometry_(g),
      num_blocks_(num_blocks),
      bytes_(g.bytes_per_block() * static_cast<uint64_t>(num_blocks)),
      layer_bytes_(g.bytes_per_block() / (2 * static_cast<uint64_t>(g.n_layer)) * static_cast<uint64_t>(num_blocks)),
      memory_(bytes_) {
  STRATA_CHECK(g.n_layer > 0 && g.block_size > 0);
}

KvLayerView KvArena::layer(int32_t l) const {
  STRATA_CHECK(l >= 0 && l < geometry_.n_layer);
  KvLayerView v;
  uint8_t* base = memory_.data() + static_cast<uint64_t>(l) * 2 * layer_bytes_;
  v.k = base;
  v.v = base + layer_bytes_;
  v.dtype = geometry_.dtype;
  v.block_size = geometry_.block_size;
  v.n_kv_heads = geometry_.n_kv_heads;
  v.head_dim = geometry_.head_dim;
  return v;
}

std::vector<KvLayerView> KvArena::layers() const {
  std::vector<KvLayerView> out;
  for (int32_t l = 0; l < geometry_.n_layer; ++l) out.push_back(layer(l));
  return out;
}

}  // namespace strata
