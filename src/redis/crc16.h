// Redis Cluster key slots: CRC16-XMODEM (polynomial 0x1021, initial value 0) of the key, or of its
// hash tag (the bytes between the first '{' and the next '}', when non-empty), modulo 16384.
// Thread-safety: pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::redis {

inline constexpr int kClusterSlots = 16384;

uint16_t crc16(std::string_view bytes);

// The part of the key that is hashed: its hash tag when it has a non-empty one, else the whole key.
std::string_view hash_tag(std::string_view key);

// crc16(hash_tag(key)) % 16384.
uint16_t key_slot(std::string_view key);

}  // namespace strata::redis
