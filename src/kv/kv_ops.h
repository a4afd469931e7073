// The KV operations a step plans (KvManager) and the KV storage executes (KvStorage::execute), in
// list order: plain values naming slots by tier and index, so a plan can be inspected and tested
// without any bytes. A slot is a hot block, a warm slot (warm_span sub-blocks) or a cold slot.
// Also the sizes both sides agree on (KvCapacity). Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_types.h"

namespace strata {

enum class KvTier : uint8_t { kHot, kWarm, kCold };
std::string_view kv_tier_name(KvTier t);

struct KvSlot {
  KvTier tier = KvTier::kHot;
  int32_t slot = -1;
  friend bool operator==(const KvSlot&, const KvSlot&) = default;
};

// One token's K and V rows (every layer) moved from one hot block's slot to another's (compaction).
struct KvTokenMove {
  BlockId src_block = kNoBlock;
  int32_t src_slot = 0;
  BlockId dst_block = kNoBlock;
  int32_t dst_slot = 0;
  friend bool operator==(const KvTokenMove&, const KvTokenMove&) = default;
};

struct KvOp {
  enum class Kind : uint8_t {
    kCopy,      // hot block src -> hot block dst (copy-on-write)
    kReencode,  // hot blocks `hot` (warm_span of them, in order) -> warm slot dst
    kSpill,     // RAM slot src (hot or warm) -> cold slot dst
    kFetch,     // cold slot src -> RAM slot dst (of the tier the cold slot's content came from)
    kLoad,      // `bytes` (a block fetched from the remote pool) -> RAM slot dst (a hot block or a one-block warm slot)
    kPublish,   // RAM slot src (a hot block, or a warm slot of one block) -> the remote pool, as `hash`
    kCompact,   // `moves`: token rows between hot blocks of one sequence (eviction within a sequence)
    kDemote,    // hot block src -> host cold slot dst, which attention then reads in place (--kv-offload):
                // a spill whose bytes must be in host memory before the next forward pass
    kMigrate,   // host cold slot src -> file cold slot dst, the same block (its frame re-sealed for the
                // new slot): a cold block moves down a part to free its host slot (`content`: the tier
                // its bytes came from)
  };
  Kind kind = Kind::kCopy;
  KvSlot src;                // kCopy, kSpill, kFetch, kPublish, kDemote, kMigrate
  KvSlot dst;                // every kind but kPublish
  std::vector<BlockId> hot;  // kReencode only
  BlockHash hash;            // kPublish: the block's prefix-cache hash
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // kLoad: the block's bytes
  std::vector<KvTokenMove> moves = {};  // kCompact only: no source is the destination of another move
  KvTier content = KvTier::kHot;        // kMigrate only: a hot block or a warm slot

  friend bool operator==(const KvOp&, const KvOp&) = default;
};
std::string_view kv_op_kind_name(KvOp::Kind k);
std::ostream& operator<<(std::ostream& os, const KvSlot& s);  // "hot 3" (test output, logs)
std::ostream& operator<<(std::ostream& os, const KvOp& op);   // "spill hot 3 -> cold 0"

// The outcome of one op. Only fetches and loads fail by themselves (the cold tier reported an
// error, or the bytes were short or failed their checksum; a load's bytes of the wrong size); an
// op whose input was lost earlier in the same list (or a fetch of a cold slot whose spill was
// skipped for that reason) reports kSourceLost. Either way the op's destination holds no valid
// content. A publish never fails (the remote pool counts its own losses); of lost content it
// reports kSourceLost and publishes nothing.
enum class KvOpStatus : uint8_t { kOk, kReadFailed, kSourceLost };

// What a KvStorage holds (KvStorage::capacity()): the sizes the KV manager's pools mirror.
struct KvCapacity {
  int32_t hot_blocks = 0;
  int32_t warm_slots = 0;  // 0 without a warm tier
  int32_t warm_span = 1;   // blocks per warm slot
  int32_t cold_slots = 0;  // 0 without a cold tier
  int32_t cold_host_slots = 0;  // the first cold slots, in host memory (taken first); the rest are in a file
  uint64_t hot_block_bytes = 0;  // one hot block, all layers, K and V
  uint64_t warm_slot_bytes = 0;  // one warm slot, all layers, K and V
  uint64_t cold_slot_bytes = 0;  // one cold slot as the store sizes it (frame header included)

  int64_t ram_tokens(int32_t block_size) const {
    return (int64_t{hot_blocks} + int64_t{warm_slots} * warm_span) * block_size;
  }
};

}  // namespace strata
