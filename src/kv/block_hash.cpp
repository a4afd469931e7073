#include "kv/block_hash.h"

#define XXH_STATIC_LINKING_ONLY  // for XXH3_state_t on the stack
#include <xxhash.h>

namespace strata {

BlockHash chain_block_hash(const BlockHash& parent, std::span<const TokenId> tokens, uint64_t extra) {
  XXH3_state_t state;
  XXH3_128bits_reset_withSeed(&state, extra);
  XXH3_128bits_update(&state, &parent.lo, sizeof parent.lo);
  XXH3_128bits_update(&state, &parent.hi, sizeof parent.hi);
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  BlockHash out{h.low64, h.high64};
  if (out.empty()) out.lo = 1;  // the empty hash means "no hash"
  return out;
}

}  // namespace strata
