#include "kv/remote_block.h"

#include <fmt/format.h>

#include <cstring>

#include "core/check.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

namespace {

constexpr char kMagic[4] = {'S', 'T', 'K', 'V'};

template <typename T>
void put(std::string& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(std::string_view in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

std::string_view format_name(const RemoteBlockFormat& f, KvTier content) {
  return content == KvTier::kHot ? kv_dtype_name(f.hot_dtype) : warm_format_name(f.warm_format);
}

uint64_t checksum(const BlockHash& h, const uint8_t* p, size_t n) { return XXH3_64bits_withSeed(p, n, h.lo); }

}  // namespace

uint64_t RemoteBlockFormat::payload_bytes(KvTier content) const {
  if (content == KvTier::kHot) return hot_bytes;
  if (content == KvTier::kWarm && warm_format != WarmFormat::kNone) return warm_bytes;
  return 0;
}

std::string remote_block_key(const RemoteBlockFormat& f, KvTier content, const BlockHash& h) {
  STRATA_CHECK(content != KvTier::kCold);
  return fmt::format("strata:kv:v{}:{:016x}:{}:b{}:{:016x}{:016x}", kRemoteFormatVersion, f.model_fingerprint,
                     format_name(f, content), f.block_size, h.hi, h.lo);
}

std::string encode_remote_block(const RemoteBlockFormat& f, KvTier content, const BlockHash& h, std::span<const uint8_t> payload) {
  std::string v(kRemoteHeaderBytes + payload.size(), '\0');
  std::memcpy(v.data(), kMagic, 4);
  put<uint32_t>(v, 4, kRemoteFormatVersion);
  put<uint8_t>(v, 8, content == KvTier::kHot ? 0 : 1);
  put<uint32_t>(v, 12, static_cast<uint32_t>(f.block_size));
  put<uint64_t>(v, 16, h.lo);
  put<uint64_t>(v, 24, h.hi);
  put<uint64_t>(v, 32, f.model_fingerprint);
  put<uint64_t>(v, 40, payload.size());
  put<uint64_t>(v, 48, checksum(h, payload.data(), payload.size()));
  if (!payload.empty()) std::memcpy(v.data() + kRemoteHeaderBytes, payload.data(), payload.size());
  return v;
}

std::string_view remote_decode_name(RemoteDecode d) {
  switch (d) {
    case RemoteDecode::kOk: return "ok";
    case RemoteDecode::kBadHeader: return "bad header";
    case RemoteDecode::kBadLength: return "bad length";
    case RemoteDecode::kBadChecksum: return "bad checksum";
  }
  return "?";
}

RemoteDecode decode_remote_block(const RemoteBlockFormat& f, KvTier content, const BlockHash& h, std::string_view value,
                                 std::vector<uint8_t>* payload) {
  if (value.size() < kRemoteHeaderBytes || std::memcmp(value.data(), kMagic, 4) != 0 ||
      get<uint32_t>(value, 4) != kRemoteFormatVersion || get<uint8_t>(value, 8) != (content == KvTier::kHot ? 0 : 1) ||
      get<uint32_t>(value, 12) != static_cast<uint32_t>(f.block_size) || get<uint64_t>(value, 16) != h.lo ||
      get<uint64_t>(value, 24) != h.hi || get<uint64_t>(value, 32) != f.model_fingerprint) {
    return RemoteDecode::kBadHeader;
  }
  const uint64_t expected = f.payload_bytes(content);
  const uint64_t n = get<uint64_t>(value, 40);
  if (expected == 0 || n != expected || value.size() - kRemoteHeaderBytes != n) return RemoteDecode::kBadLength;
  const auto* p = reinterpret_cast<const uint8_t*>(value.data() + kRemoteHeaderBytes);
  if (get<uint64_t>(value, 48) != checksum(h, p, n)) return RemoteDecode::kBadChecksum;
  payload->assign(p, p + n);
  return RemoteDecode::kOk;
}

}  // namespace strata
