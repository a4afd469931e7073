// Content hashes of full KV blocks for prefix caching: a block's hash chains its parent's hash, its
// token ids and extra keys (the model fingerprint, the KV dtype), so equal hashes mean equal
// prefixes with overwhelming probability (XXH3, 128 bits).
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/types.h"

namespace strata {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;

  bool empty() const { return lo == 0 && hi == 0; }
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)); }
};

// hash(parent, tokens, extra). `parent` is empty for the first block of a sequence. Never returns
// the empty hash.
BlockHash chain_block_hash(const BlockHash& parent, std::span<const TokenId> tokens, uint64_t extra);

}  // namespace strata
