// See quant_groups.h for the layout.
#include "backend/cpu/quant_groups.h"

#include <cstring>
#include <span>

#include "gguf/quant_blocks.h"

namespace strata::cpu {
namespace {

static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80 &&
              offsetof(BlockQ2_K, dmin) == 82);
static_assert(kQ2KGroupBlock == kQuantGroupRows * sizeof(BlockQ2_K) && kQ2KGroupDmin + 2 * kQuantGroupRows == kQ2KGroupBlock);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 &&
              offsetof(BlockQ3_K, d) == 108);
static_assert(kQ3KGroupBlock == kQuantGroupRows * sizeof(BlockQ3_K) && kQ3KGroupD + 2 * kQuantGroupRows == kQ3KGroupBlock);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16 &&
              offsetof(BlockQ5_K, qs) == 48);
static_assert(kQ5KGroupBlock == kQuantGroupRows * sizeof(BlockQ5_K) && kQ5KGroupDmin + 2 * kQuantGroupRows == kQ5KGroupBlock);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);
static_assert(kQ4KGroupBlock == kQuantGroupRows * sizeof(BlockQ4_K) && kQ4KGroupDmin + 2 * kQuantGroupRows == kQ4KGroupQs &&
              kQ4KGroupQs + 2048 == kQ4KGroupBlock);
static_assert(kQ6KGroupBlock == kQuantGroupRows * sizeof(BlockQ6_K) && kQ6KGroupD + 2 * kQuantGroupRows == kQ6KGroupBlock);

static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2 && kQ40GroupPair == kQuantGroupRows * 2 * 18);
static_assert(sizeof(BlockQ4_1) == 20 && offsetof(BlockQ4_1, qs) == 4 && kQ41GroupPair == kQuantGroupRows * 2 * 20);
static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6 &&
              kQ50GroupPair == kQuantGroupRows * 2 * 22);
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ5_1, qs) == 8 &&
              kQ51GroupPair == kQuantGroupRows * 2 * 24);
static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2 && kQ8GroupPair == kQuantGroupRows * 2 * 34);

// Bytes of the unit the layout repeats per group: a super-block, or Q8_0's pair of blocks.
uint64_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ2_K: return sizeof(BlockQ2_K);
    case GgmlType::kQ3_K: return sizeof(BlockQ3_K);
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ5_K: return sizeof(BlockQ5_K);
    case GgmlType::kQ6_K: return sizeof(BlockQ6_K);
    case GgmlType::kQ4_0: return 2 * sizeof(BlockQ4_0);
    case GgmlType::kQ4_1: return 2 * sizeof(BlockQ4_1);
    case GgmlType::kQ5_0: return 2 * sizeof(BlockQ5_0);
    case GgmlType::kQ5_1: return 2 * sizeof(BlockQ5_1);
    default: return 2 * sizeof(BlockQ8_0);
  }
}

// A unit's bytes as stored, in runs: `count` pieces of `size` bytes (4: a word, 2: an f16) from
// `src` on, piece e of row j at dst + 64 e + size · j in the group's unit (quant_groups.h).
struct Run {
  uint32_t src, dst, size, count;
};
constexpr Run kQ2KRuns[] = {{0, kQ2KGroupScales, 4, 4}, {16, 0, 4, 16}, {80, kQ2KGroupD, 2, 1}, {82, kQ2KGroupDmin, 2, 1}};
constexpr Run kQ3KRuns[] = {{0, kQ3KGroupHmask, 4, 8}, {32, 0, 4, 16}, {96, kQ3KGroupScales, 4, 3}, {108, kQ3KGroupD, 2, 1}};
constexpr Run kQ4KRuns[] = {{0, kQ4KGroupD, 2, 1}, {2, kQ4KGroupDmin, 2, 1}, {4, kQ4KGroupScales, 4, 3}, {16, kQ4KGroupQs, 4, 32}};
// (Q5_K's qh and qs: recoded by write_q5k / read_q5k.)
constexpr Run kQ5KRuns[] = {{0, kQ5KGroupD, 2, 1}, {2, kQ5KGroupDmin, 2, 1}, {4, kQ5KGroupScales, 4, 3}};
constexpr Run kQ6KRuns[] = {{208, kQ6KGroupD, 2, 1}};  // d only: the rest is recoded (write_q6k / read_q6k)
constexpr Run kQ40Runs[] = {{0, kQ40GroupD, 2, 1}, {2, 0, 4, 4}, {18, kQ40GroupD + 32, 2, 1}, {20, 256, 4, 4}};
constexpr Run kQ41Runs[] = {{0, kQ41GroupD, 2, 1},      {2, kQ41GroupM, 2, 1},      {4, 0, 4, 4},
                             {20, kQ41GroupD + 32, 2, 1}, {22, kQ41GroupM + 32, 2, 1}, {24, 256, 4, 4}};
constexpr Run kQ50Runs[] = {{0, kQ50GroupD, 2, 1},       {2, kQ50GroupQh, 4, 1},       {6, 0, 4, 4},
                             {22, kQ50GroupD + 32, 2, 1}, {24, kQ50GroupQh + 64, 4, 1}, {28, 256, 4, 4}};
constexpr Run kQ51Runs[] = {{0, kQ51GroupD, 2, 1},  {2, kQ51GroupM, 2, 1},       {4, kQ51GroupQh, 4, 1},
                             {8, 0, 4, 4},           {24, kQ51GroupD + 32, 2, 1}, {26, kQ51GroupM + 32, 2, 1},
                             {28, kQ51GroupQh + 64, 4, 1}, {32, 256, 4, 4}};
constexpr Run kQ8Runs[] = {{0, kQ8GroupD, 2, 1}, {2, 0, 4, 8}, {34, kQ8GroupD + 32, 2, 1}, {36, 512, 4, 8}};

std::span<const Run> runs(GgmlType type) {
  switch (type) {
    case GgmlType::kQ2_K: return kQ2KRuns;
    case GgmlType::kQ3_K: return kQ3KRuns;
    case GgmlType::kQ4_K: return kQ4KRuns;
    case GgmlType::kQ5_K: return kQ5KRuns;
    case GgmlType::kQ6_K: return kQ6KRuns;
    case GgmlType::kQ4_0: return kQ40Runs;
    case GgmlType::kQ4_1: return kQ41Runs;
    case GgmlType::kQ5_0: return kQ50Runs;
    case GgmlType::kQ5_1: return kQ51Runs;
    default: return kQ8Runs;
  }
}

// Q6_K's quants of row j of one super-block (`blk`: the GGUF block, null: zeros) into the group's
// unit: per half h and word q, the three words A (where ql word 16h + q was), B (ql word 16h + 8 + q)
// and C (qh word 8h + q); per byte of them, from the GGUF bytes L0 = ql[64h + 4q + i],
// L1 = ql[64h + 32 + 4q + i], H = qh[32h + 4q + i] (the weights w0..w3 of columns 128h + 4q + i
// + 32k, k = 0..3: w0 = L0 & 15 | (H & 3) << 4, w1 = L1 & 15 | (H >> 2 & 3) << 4,
// w2 = L0 >> 4 | (H >> 4 & 3) << 4, w3 = L1 >> 4 | (H >> 6) << 4): A = w0 | (w2 & 3) << 6,
// B = w1 | (w2 >> 2 & 3) << 6, C = w3 | (w2 >> 4) << 6; then the scales transposed (scale s at
// kQ6KGroupScales + 16 s + j).
void write_q6k(const uint8_t* blk, uint8_t* unit, uint64_t j) {
  for (int h = 0; h < 2; ++h) {
    for (int q = 0; q < 8; ++q) {
      uint8_t a[4], b[4], c[4];
      for (int i = 0; i < 4; ++i) {
        const uint32_t l0 = blk != nullptr ? blk[64 * h + 4 * q + i] : 0;
        const uint32_t l1 = blk != nullptr ? blk[64 * h + 32 + 4 * q + i] : 0;
        const uint32_t hb = blk != nullptr ? blk[128 + 32 * h + 4 * q + i] : 0;
        const uint32_t w0 = (l0 & 15u) | (hb & 3u) << 4, w1 = (l1 & 15u) | (hb >> 2 & 3u) << 4;
        const uint32_t w2 = (l0 >> 4) | (hb >> 4 & 3u) << 4, w3 = (l1 >> 4) | (hb >> 6) << 4;
        a[i] = static_cast<uint8_t>(w0 | (w2 & 3u) << 6);
        b[i] = static_cast<uint8_t>(w1 | (w2 >> 2 & 3u) << 6);
        c[i] = static_cast<uint8_t>(w3 | (w2 >> 4) << 6);
      }
      std::memcpy(unit + q6k_line(h, q, 0) + 4 * j, a, 4);
      std::memcpy(unit + q6k_line(h, q, 1) + 4 * j, b, 4);
      std::memcpy(unit + q6k_line(h, q, 2) + 4 * j, c, 4);
    }
  }
  for (int sb = 0; sb < 16; ++sb) unit[kQ6KGroupScales + 16 * sb + j] = blk != nullptr ? blk[192 + sb] : 0;
}

// Two 5-bit weights in the recoded byte of Q5_0/Q5_1/Q5_K (quant_groups.h): lo in bits 0-4, bits
// 2-4 of hi in bits 5-7 (hi's bits 0-1 go to the y word); and back, from the byte and those 2 bits.
uint8_t pack5(uint32_t lo, uint32_t hi) { return static_cast<uint8_t>(lo | (hi >> 2) << 5); }
void unpack5(uint32_t x, uint32_t hi_low2, uint32_t* lo, uint32_t* hi) {
  *lo = x & 31u;
  *hi = (x >> 5) << 2 | hi_low2;
}

// Q5_K's quants of row j of one super-block (`blk`: the GGUF block, null: zeros) into the group's
// unit. Per pair c (columns 64c ..) and byte l = 4q + i of its 32: the low sub-block's weight
// lo = qs[32c + l] & 15 | (qh[l] >> 2c & 1) << 4 and the high one's hi = qs[32c + l] >> 4 |
// (qh[l] >> (2c + 1) & 1) << 4 (GGUF's bits); X = lo | (hi >> 2) << 5 at 64 (8c + q) + 4j + i, and
// y = Σ_c (hi_c & 3) << 2c at kQ5KGroupQh + 64 q + 4j + i.
void write_q5k(const uint8_t* blk, uint8_t* unit, uint64_t j) {
  for (int q = 0; q < 8; ++q) {
    for (int i = 0; i < 4; ++i) {
      const int l = 4 * q + i;
      const uint32_t qh = blk != nullptr ? blk[16 + l] : 0;
      uint32_t y = 0;
      for (int c = 0; c < 4; ++c) {
        const uint32_t qs = blk != nullptr ? blk[48 + 32 * c + l] : 0;
        const uint32_t lo = (qs & 15u) | (qh >> (2 * c) & 1u) << 4, hi = (qs >> 4) | (qh >> (2 * c + 1) & 1u) << 4;
        unit[64 * (8 * c + q) + 4 * j + static_cast<uint64_t>(i)] = pack5(lo, hi);
        y |= (hi & 3u) << (2 * c);
      }
      unit[kQ5KGroupQh + 64 * q + 4 * j + static_cast<uint64_t>(i)] = static_cast<uint8_t>(y);
    }
  }
}

// Q5_0/Q5_1 blocks recoded in place, as Q5_K's pairs (write_q5k): from a block's qs (16 bytes, the
// 4 words v at qs + vs·v) and its qh word, per word v and byte i (column e = 4v + i and e + 16,
// weights lo = qs & 15 | (qh >> e & 1) << 4, hi = qs >> 4 | (qh >> (e + 16) & 1) << 4):
// X = lo | (hi >> 2) << 5 in place of the qs byte, and y byte i's bits 2v, 2v + 1 = hi & 3 in
// place of the qh word.
void encode_q5_block(uint8_t* qs, uint64_t vs, uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  uint8_t y[4] = {};
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 4; ++i) {
      const int e = 4 * v + i;
      uint8_t& b = qs[vs * static_cast<uint64_t>(v) + static_cast<uint64_t>(i)];
      const uint32_t lo = (b & 15u) | (h >> e & 1u) << 4, hi = (b >> 4u) | (h >> (e + 16) & 1u) << 4;
      b = pack5(lo, hi);
      y[i] = static_cast<uint8_t>(y[i] | (hi & 3u) << (2 * v));
    }
  }
  std::memcpy(qh, y, 4);
}

// The inverse of encode_q5_block.
void decode_q5_block(uint8_t* qs, uint64_t vs, uint8_t* qh) {
  uint8_t y[4];
  std::memcpy(y, qh, 4);
  uint32_t h = 0;
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 4; ++i) {
      const int e = 4 * v + i;
      uint8_t& b = qs[vs * static_cast<uint64_t>(v) + static_cast<uint64_t>(i)];
      uint32_t lo, hi;
      unpack5(b, y[i] >> (2 * v) & 3u, &lo, &hi);
      b = static_cast<uint8_t>((lo & 15u) | (hi & 15u) << 4);
      h |= (lo >> 4) << e | (hi >> 4) << (e + 16);
    }
  }
  std::memcpy(qh, &h, 4);
}

// Where Q5_0's / Q5_1's pair keeps its blocks' qs and qh: in the group's unit (row j) and in the
// GGUF bytes of the pair (two blocks of bb / 2 bytes).
struct Q5Places {
  uint64_t qh, qs;  // offset of block 0's qh and qs in a GGUF block
};
Q5Places q5_places(GgmlType type) { return type == GgmlType::kQ5_0 ? Q5Places{2, 6} : Q5Places{4, 8}; }
uint64_t q5_group_qh(GgmlType type) { return type == GgmlType::kQ5_0 ? kQ50GroupQh : kQ51GroupQh; }

// The inverse of write_q5k: row j's qh and qs of the unit into blk.
void read_q5k(const uint8_t* unit, uint64_t j, uint8_t* blk) {
  for (int q = 0; q < 8; ++q) {
    for (int i = 0; i < 4; ++i) {
      const int l = 4 * q + i;
      const uint32_t y = unit[kQ5KGroupQh + 64 * q + 4 * j + static_cast<uint64_t>(i)];
      uint32_t qh = 0;
      for (int c = 0; c < 4; ++c) {
        uint32_t lo, hi;
        unpack5(unit[64 * (8 * c + q) + 4 * j + static_cast<uint64_t>(i)], y >> (2 * c) & 3u, &lo, &hi);
        blk[48 + 32 * c + l] = static_cast<uint8_t>((lo & 15u) | (hi & 15u) << 4);
        qh |= (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1);
      }
      blk[16 + l] = static_cast<uint8_t>(qh);
    }
  }
}

// The inverse of write_q6k: row j's ql, qh and scales of the unit into blk.
void read_q6k(const uint8_t* unit, uint64_t j, uint8_t* blk) {
  for (int h = 0; h < 2; ++h) {
    for (int q = 0; q < 8; ++q) {
      for (int i = 0; i < 4; ++i) {
        const uint32_t a = unit[q6k_line(h, q, 0) + 4 * j + i], b = unit[q6k_line(h, q, 1) + 4 * j + i];
        const uint32_t c = unit[q6k_line(h, q, 2) + 4 * j + i];
        const uint32_t w0 = a & 63u, w1 = b & 63u, w3 = c & 63u, w2 = (a >> 6) | (b >> 6) << 2 | (c >> 6) << 4;
        blk[64 * h + 4 * q + i] = static_cast<uint8_t>((w0 & 15u) | (w2 & 15u) << 4);
        blk[64 * h + 32 + 4 * q + i] = static_cast<uint8_t>((w1 & 15u) | (w3 & 15u) << 4);
        blk[128 + 32 * h + 4 * q + i] = static_cast<uint8_t>((w0 >> 4) | (w1 >> 4) << 2 | (w2 >> 4) << 4 | (w3 >> 4) << 6);
      }
    }
  }
  for (int sb = 0; sb < 16; ++sb) blk[192 + sb] = unit[kQ6KGroupScales + 16 * sb + j];
}

}  // namespace

bool quant_groups_supported(GgmlType type, int64_t cols) {
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 ||
      type == GgmlType::kQ5_1) {
    return cols > 0 && cols % 64 == 0;
  }
  const bool k_quant = type == GgmlType::kQ2_K || type == GgmlType::kQ3_K || type == GgmlType::kQ4_K ||
                       type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
  return k_quant && cols > 0 && cols % 256 == 0;
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
  const std::span<const Run> rs = runs(host.type);
  static constexpr uint8_t kZero[4] = {};
  for (uint64_t g = g0; g < g1; ++g) {
    uint8_t* group = dst + g * G * host.row_bytes;
    for (uint64_t s = 0; s < nsb; ++s) {
      uint8_t* out = group + s * G * bb;
      for (uint64_t j = 0; j < G; ++j) {
        const uint64_t r = g * G + j;
        const uint8_t* blk = r < rows ? host.data + r * host.row_bytes + s * bb : nullptr;
        if (host.type == GgmlType::kQ6_K) write_q6k(blk, out, j);
        if (host.type == GgmlType::kQ5_K) write_q5k(blk, out, j);
        for (const Run& run : rs) {
          uint8_t* o = out + run.dst + run.size * j;
          const uint8_t* in = blk != nullptr ? blk + run.src : nullptr;
          if (run.size == 4) {  // constant sizes: plain moves, not calls
            for (uint32_t e = 0; e < run.count; ++e) std::memcpy(o + 64 * e, in != nullptr ? in + 4 * e : kZero, 4);
          } else {
            for (uint32_t e = 0; e < run.count; ++e) std::memcpy(o + 64 * e, in != nullptr ? in + 2 * e : kZero, 2);
          }
        }
        if (host.type == GgmlType::kQ5_0 || host.type == GgmlType::kQ5_1) {  // recoded in place
          const uint64_t qh = q5_group_qh(host.type);
          for (uint64_t k = 0; k < 2; ++k) encode_q5_block(out + 256 * k + 4 * j, 64, out + qh + 64 * k + 4 * j);
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
    if (w.type == GgmlType::kQ6_K) read_q6k(group + s * G * bb, j, out + s * bb);
    if (w.type == GgmlType::kQ5_K) read_q5k(group + s * G * bb, j, out + s * bb);
    for (const Run& run : runs(w.type)) {
      for (uint32_t e = 0; e < run.count; ++e) {
        std::memcpy(out + s * bb + run.src + run.size * e, group + s * G * bb + run.dst + 64 * e + run.size * j, run.size);
      }
    }
    if (w.type == GgmlType::kQ5_0 || w.type == GgmlType::kQ5_1) {  // back from the recoding
      const Q5Places p = q5_places(w.type);
      for (uint64_t k = 0; k < 2; ++k) {
        uint8_t* blk = out + s * bb + k * (bb / 2);
        decode_q5_block(blk + p.qs, 4, blk + p.qh);
      }
    }
  }
}

}  // namespace strata::cpu
