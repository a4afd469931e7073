#include "kv/kv_config.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace strata {

int32_t KvConfig::resolve_num_blocks(const KvGeometry& g) const {
  if (num_blocks) {
    if (*num_blocks <= 0) fail("--kv-blocks must be positive, got {}", *num_blocks);
    return *num_blocks;
  }
  const uint64_t bytes = memory_bytes.value_or(kDefaultKvMemoryBytes);
  const uint64_t per_block = g.bytes_per_block();
  const uint64_t n = bytes / per_block;
  if (n == 0) {
    fail("--kv-memory {} is smaller than one KV block ({} for {} tokens of this model)", format_bytes(bytes),
         format_bytes(per_block), g.block_size);
  }
  return static_cast<int32_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
}

KvConfig::PoolSizes KvConfig::resolve_pools(const KvGeometry& g) const {
  PoolSizes p;
  if (warm_format == WarmFormat::kNone) {
    p.hot_blocks = resolve_num_blocks(g);
    return p;
  }
  const int32_t span = warm_span(warm_format, g.block_size);
  const uint64_t slot_bytes = static_cast<uint64_t>(g.n_layer) *
                              static_cast<uint64_t>(warm_slot_bytes(warm_format, false, g.block_size, g.n_kv_heads, g.head_dim) +
                                                    warm_slot_bytes(warm_format, true, g.block_size, g.n_kv_heads, g.head_dim));
  uint64_t total = 0;
  if (num_blocks) {
    if (*num_blocks <= 0) fail("--kv-blocks must be positive, got {}", *num_blocks);
    total = static_cast<uint64_t>(*num_blocks) * g.bytes_per_block();
  } else {
    total = memory_bytes.value_or(kDefaultKvMemoryBytes);
  }
  const uint64_t warm_bytes = static_cast<uint64_t>(static_cast<double>(total) * warm_fraction);
  p.warm_slots = static_cast<int32_t>(std::min<uint64_t>(warm_bytes / slot_bytes, uint64_t{1} << 28));
  p.hot_blocks = static_cast<int32_t>(std::min<uint64_t>((total - warm_bytes) / g.bytes_per_block(), uint64_t{1} << 30));
  if (p.hot_blocks == 0) fail("the KV memory {} leaves no room for one hot block", format_bytes(total));
  (void)span;
  return p;
}

}  // namespace strata
