// How one KV block is stored in the remote tier (kv/remote_pool.h): its key and its value.
//
// Key:   strata:kv:v<version>:<model fingerprint, 16 hex>:<format>:b<block size>:<hash, 32 hex>
//        where <format> is the hot dtype (f16, bf16, f32) or the warm encoding (int8, fp8) the
//        payload is in. The chained hash names the block's whole prefix, so equal keys mean the
//        same tokens from the start of the prompt, for the same model and format.
// Value: a 56-byte header, then the payload (the block's bytes for all layers, K and V, in the
//        layout KvStorage keeps them in its tier):
//          0  magic "STKV"            4 bytes
//          4  format version          u32 (kRemoteFormatVersion)
//          8  content                 u8  (0 hot, 1 warm), then 3 zero bytes
//         12  block size              u32
//         16  hash lo, hi             2 x u64
//         32  model fingerprint       u64
//         40  payload length          u64
//         48  checksum                u64, XXH3-64 of the payload seeded with the hash's low word
//        (little-endian). A value whose header, length or checksum disagrees with what the key
//        promises is rejected.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_ops.h"
#include "kv/kv_types.h"
#include "kv/warm_format.h"

namespace strata {

inline constexpr uint32_t kRemoteFormatVersion = 1;
inline constexpr size_t kRemoteHeaderBytes = 56;

// What a replica's blocks look like; replicas exchange blocks only when all of it agrees.
struct RemoteBlockFormat {
  uint64_t model_fingerprint = 0;
  KvDtype hot_dtype = KvDtype::kF16;
  WarmFormat warm_format = WarmFormat::kNone;  // kNone: no warm blocks are exchanged
  int32_t block_size = 16;
  uint64_t hot_bytes = 0;   // payload of one hot block
  uint64_t warm_bytes = 0;  // payload of one warm slot holding one block (0: none)

  // The payload size of `content`, 0 when this format has no such blocks.
  uint64_t payload_bytes(KvTier content) const;
};

std::string remote_block_key(const RemoteBlockFormat& f, KvTier content, const BlockHash& h);
std::string encode_remote_block(const RemoteBlockFormat& f, KvTier content, const BlockHash& h, std::span<const uint8_t> payload);

enum class RemoteDecode : uint8_t { kOk, kBadHeader, kBadLength, kBadChecksum };
std::string_view remote_decode_name(RemoteDecode d);
// Checks `value` against what the key (f, content, h) promises; on kOk, *payload holds the bytes.
RemoteDecode decode_remote_block(const RemoteBlockFormat& f, KvTier content, const BlockHash& h, std::string_view value,
                                 std::vector<uint8_t>* payload);

}  // namespace strata
