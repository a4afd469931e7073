// See quant_groups.h for the layout.
#include "backend/cpu/quant_groups.h"

#include <cstring>

#include "gguf/quant_blocks.h"

namespace strata::cpu {
namespace {

constexpr uint64_t kBlock = sizeof(BlockQ4_K);
static_assert(kBlock == 144 && offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);
static_assert(kQ4KGroupBlock == kQuantGroupRows * kBlock && kQ4KGroupDmin + 2 * kQuantGroupRows == kQ4KGroupBlock);

// Where byte i of row j's block lies in its group super-block.
uint64_t grouped_offset(uint64_t i, uint64_t j) {
  if (i < 2) return kQ4KGroupD + 2 * j + i;
  if (i < 4) return kQ4KGroupDmin + 2 * j + (i - 2);
  if (i < 16) return kQ4KGroupScales + 64 * ((i - 4) / 4) + 4 * j + (i - 4) % 4;
  return 64 * ((i - 16) / 4) + 4 * j + (i - 16) % 4;
}

}  // namespace

bool quant_groups_supported(GgmlType type, int64_t cols) { return type == GgmlType::kQ4_K && cols > 0 && cols % 256 == 0; }

uint64_t quant_group_bytes(const WeightMatrix& host) {
  const auto rows = static_cast<uint64_t>(host.rows > 0 ? host.rows : 0);
  const auto g = static_cast<uint64_t>(kQuantGroupRows);
  return (rows + g - 1) / g * g * host.row_bytes;
}

void write_quant_groups(const WeightMatrix& host, uint8_t* dst, uint64_t g0, uint64_t g1) {
  const auto rows = static_cast<uint64_t>(host.rows);
  const auto G = static_cast<uint64_t>(kQuantGroupRows);
  const uint64_t nsb = host.row_bytes / kBlock;
  for (uint64_t g = g0; g < g1; ++g) {
    uint8_t* group = dst + g * G * host.row_bytes;
    for (uint64_t s = 0; s < nsb; ++s) {
      uint8_t* out = group + s * kQ4KGroupBlock;
      for (uint64_t j = 0; j < G; ++j) {
        const uint64_t r = g * G + j;
        if (r >= rows) {
          for (uint64_t i = 0; i < kBlock; i += 2) std::memset(out + grouped_offset(i, j), 0, 2);
          continue;
        }
        const uint8_t* blk = host.data + r * host.row_bytes + s * kBlock;
        for (uint64_t i = 0; i < kBlock; i += 2) std::memcpy(out + grouped_offset(i, j), blk + i, 2);
      }
    }
  }
}

void read_quant_group_row(const WeightMatrix& w, int64_t r, uint8_t* out) {
  const auto G = static_cast<uint64_t>(kQuantGroupRows);
  const uint64_t g = static_cast<uint64_t>(r) / G, j = static_cast<uint64_t>(r) % G;
  const uint8_t* group = w.data + g * G * w.row_bytes;
  const uint64_t nsb = w.row_bytes / kBlock;
  for (uint64_t s = 0; s < nsb; ++s) {
    for (uint64_t i = 0; i < kBlock; i += 2) std::memcpy(out + s * kBlock + i, group + s * kQ4KGroupBlock + grouped_offset(i, j), 2);
  }
}

}  // namespace strata::cpu
