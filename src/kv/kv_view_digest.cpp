#include "kv/kv_view_digest.h"

#include <xxhash.h>

namespace strata {

// A field added to KvLayerView changes its size: add it to the digest below, then here.
static_assert(sizeof(void*) != 8 || sizeof(KvLayerView) == 120, "KvLayerView changed: update kv_view_digest");

uint64_t kv_view_digest(const KvLayerView& kv, uint64_t seed) {
  const uint64_t f[] = {reinterpret_cast<uint64_t>(kv.k),
                        reinterpret_cast<uint64_t>(kv.v),
                        static_cast<uint64_t>(kv.dtype),
                        static_cast<uint64_t>(kv.block_size),
                        static_cast<uint64_t>(kv.n_kv_heads),
                        static_cast<uint64_t>(kv.head_dim),
                        static_cast<uint64_t>(kv.n_hot_blocks),
                        static_cast<uint64_t>(kv.warm_format),
                        static_cast<uint64_t>(kv.warm_span),
                        reinterpret_cast<uint64_t>(kv.warm_k),
                        reinterpret_cast<uint64_t>(kv.warm_v),
                        static_cast<uint64_t>(kv.warm_k_slot_bytes),
                        static_cast<uint64_t>(kv.warm_v_slot_bytes),
                        static_cast<uint64_t>(kv.host_base),
                        reinterpret_cast<uint64_t>(kv.host),
                        static_cast<uint64_t>(kv.host_slot_bytes),
                        static_cast<uint64_t>(kv.host_k_offset),
                        static_cast<uint64_t>(kv.host_v_offset)};
  return XXH3_64bits_withSeed(f, sizeof f, seed);
}

}  // namespace strata
