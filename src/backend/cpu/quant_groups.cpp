// See quant_groups.h for the layout.
#include "backend/cpu/quant_groups.h"

#include <cstring>

#include "gguf/quant_blocks.h"

namespace strata::cpu {
namespace {

static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);
static_assert(kQ4KGroupBlock == kQuantGroupRows * sizeof(BlockQ4_K) && kQ4KGroupDmin + 2 * kQuantGroupRows == kQ4KGroupBlock);
static_assert(kQ6KGroupBlock == kQuantGroupRows * sizeof(BlockQ6_K) && kQ6KGroupD + 2 * kQuantGroupRows == kQ6KGroupBlock);

static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2 && kQ8GroupPair == kQuantGroupRows * 2 * 34);

// Bytes of the unit the layout repeats per group: a super-block, or Q8_0's pair of blocks.
uint64_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ6_K: return sizeof(BlockQ6_K);
    default: return 2 * sizeof(BlockQ8_0);
  }
}

// Where byte i (even) of row j's block lies in its group super-block (quant_groups.h).
uint64_t grouped_offset(GgmlType type, uint64_t i, uint64_t j) {
  auto word = [&](uint64_t at, uint64_t first) { return at + 64 * ((i - first) / 4) + 4 * j + (i - first) % 4; };
  if (type == GgmlType::kQ4_K) {
    if (i < 2) return kQ4KGroupD + 2 * j + i;
    if (i < 4) return kQ4KGroupDmin + 2 * j + (i - 2);
    if (i < 16) return word(kQ4KGroupScales, 4);
    return word(0, 16);
  }
  if (type == GgmlType::kQ8_0) {  // i: byte of the pair of blocks as stored (d, qs[32], d, qs[32])
    const uint64_t k = i / 34, b = i % 34;
    if (b < 2) return kQ8GroupD + 32 * k + 2 * j + b;
    return 512 * k + 64 * ((b - 2) / 4) + 4 * j + (b - 2) % 4;
  }
  if (i < 128) return word(0, 0);
  if (i < 192) return word(kQ6KGroupQh, 128);
  if (i < 208) return word(kQ6KGroupScales, 192);
  return kQ6KGroupD + 2 * j + (i - 208);
}

}  // namespace

bool quant_groups_supported(GgmlType type, int64_t cols) {
  if (type == GgmlType::kQ8_0) return cols > 0 && cols % 64 == 0;
  return (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K) && cols > 0 && cols % 256 == 0;
}

uint64_t quant_group_bytes(const WeightMatrix& host) {
  const auto rows = static_cast<uint64_t>(host.rows > 0 ? host.rows : 0);
  const auto g = static_cast<uint64_t>(kQuantGroupRows);
  return (rows + g - 1) / g * g * host.row_bytes;
}

void write_quant_groups(const WeightMatrix& host, uint8_t* dst, uint64_t g0, uint64_t g1) {
  const auto rows = static_cast<uint64_t>(host.rows);
  const auto G = static_cast<uint64_t>(kQuantGroupRows);
  const uint64_t bb = block_bytes(host.type), nsb = host.row_bytes / bb;
  for (uint64_t g = g0; g < g1; ++g) {
    uint8_t* group = dst + g * G * host.row_bytes;
    for (uint64_t s = 0; s < nsb; ++s) {
      uint8_t* out = group + s * G * bb;
      for (uint64_t j = 0; j < G; ++j) {
        const uint64_t r = g * G + j;
        const uint8_t* blk = r < rows ? host.data + r * host.row_bytes + s * bb : nullptr;
        for (uint64_t i = 0; i < bb; i += 2) {
          uint8_t* o = out + grouped_offset(host.type, i, j);
          if (blk != nullptr) std::memcpy(o, blk + i, 2);
          else std::memset(o, 0, 2);
        }
      }
    }
  }
}

void read_quant_group_row(const WeightMatrix& w, int64_t r, uint8_t* out) {
  const auto G = static_cast<uint64_t>(kQuantGroupRows);
  const uint64_t g = static_cast<uint64_t>(r) / G, j = static_cast<uint64_t>(r) % G;
  const uint8_t* group = w.data + g * G * w.row_bytes;
  const uint64_t bb = block_bytes(w.type), nsb = w.row_bytes / bb;
  for (uint64_t s = 0; s < nsb; ++s) {
    for (uint64_t i = 0; i < bb; i += 2) {
      std::memcpy(out + s * bb + i, group + s * G * bb + grouped_offset(w.type, i, j), 2);
    }
  }
}

}  // namespace strata::cpu
