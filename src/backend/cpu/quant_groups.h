// Q4_K rows in groups of 16 (WeightMatrix::kQuantGroup, internal to backend/cpu): the layout that
// CpuBackend::upload_matrix copies Q4_K matrices into, so that the one-token kernel holds 16 rows
// in the lanes of its vectors (matmul_quant_groups-inl.h) instead of unpacking each row's scales
// and summing its lanes. The same bytes as the GGUF blocks, only reordered: group g (rows 16g ..
// 16g + 15) starts at data + 16 g · row_bytes, and its super-block s (columns 256 s ..) is kGroupBlock
// bytes at offset s · kGroupBlock, row j's 144-byte block spread over it as
//   [0, 2048)     qs:     32-bit word v (v = 0..31: bytes 4v .. 4v + 3 of the block's qs) at 64 v + 4 j
//   [2048, 2240)  scales: word w (w = 0..2 of the 12 packed scale/min bytes) at 2048 + 64 w + 4 j
//   [2240, 2272)  d:      the f16 at 2240 + 2 j
//   [2272, 2304)  dmin:   the f16 at 2272 + 2 j
// so that one 64-byte line holds the same word of 16 rows. Rows past the last of the matrix (the
// last group's padding) are zero: a zero scale, no contribution, never stored.
// Thread-safety: pure functions over caller memory.
#pragma once

#include <cstdint>

#include "backend/op_types.h"

namespace strata::cpu {

constexpr int64_t kQuantGroupRows = WeightMatrix::kQuantGroup;
constexpr uint64_t kQ4KGroupBlock = 16 * 144;  // one super-block of 16 rows
constexpr uint64_t kQ4KGroupScales = 2048, kQ4KGroupD = 2240, kQ4KGroupDmin = 2272;

// Whether a matrix of this type and shape can be copied into groups (Q4_K, whole super-blocks).
bool quant_groups_supported(GgmlType type, int64_t cols);

// Bytes of the grouped copy of `host` (rows rounded up to whole groups).
uint64_t quant_group_bytes(const WeightMatrix& host);

// Writes groups [g0, g1) of `host` (rows as stored) into dst, the start of the grouped copy.
// Precondition: quant_groups_supported(host.type, host.cols).
void write_quant_groups(const WeightMatrix& host, uint8_t* dst, uint64_t g0, uint64_t g1);

// Row r of a grouped matrix (w.row_group == kQuantGroup) as stored in the GGUF file: w.row_bytes
// bytes into out.
void read_quant_group_row(const WeightMatrix& w, int64_t r, uint8_t* out);

}  // namespace strata::cpu
