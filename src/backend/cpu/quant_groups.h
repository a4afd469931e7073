// Q2_K .. Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 rows in groups of 16 (WeightMatrix::kQuantGroup, internal to backend/cpu): the
// layout that CpuBackend::upload_matrix copies such matrices into, so that the kernels hold 16 rows
// in the lanes of their vectors (matmul_quant_groups-inl.h) instead of unpacking each row's scales
// and summing its lanes. The same bytes as the GGUF blocks, only reordered (Q5_0, Q5_1, Q5_K, Q6_K: their quants recoded, below): group g (rows 16g ..
// 16g + 15) starts at data + 16 g · row_bytes, and its super-block s (columns 256 s ..; the types
// with blocks of 32: its pair of blocks s, columns 64 s ..) is 16 × (unit bytes) at offset s times that, with the same 32-bit word of the 16 rows side by side
// (row j's copy of a word at 4 j in a 64-byte line). Q2_K (84-byte blocks, 1,344 per group):
//   [0, 1024)     qs:     word v (v = 0..15: bytes 4v .. 4v + 3 of the block's qs) at 64 v + 4 j
//   [1024, 1280)  scales: word w (0..3 of the 16 scale/min bytes) at 1024 + 64 w + 4 j
//   [1280, 1312)  d:      the f16 at 1280 + 2 j
//   [1312, 1344)  dmin:   the f16 at 1312 + 2 j
// Q3_K (110-byte blocks, 1,760 per group):
//   [0, 1024)     qs:     word v (v = 0..15: bytes 4v .. 4v + 3 of the block's qs) at 64 v + 4 j
//   [1024, 1536)  hmask:  word v (0..7) at 1024 + 64 v + 4 j
//   [1536, 1728)  scales: word w (0..2 of the 12 packed 6-bit scales) at 1536 + 64 w + 4 j
//   [1728, 1760)  d:      the f16 at 1728 + 2 j
// Q4_K (144-byte blocks, 2,304 per group; the scales first, so that the kernel, which reads them
// first, reads each unit's lines in ascending order):
//   [0, 192)      scales: word w (w = 0..2 of the 12 packed scale/min bytes) at 64 w + 4 j
//   [192, 224)    d:      the f16 at 192 + 2 j
//   [224, 256)    dmin:   the f16 at 224 + 2 j
//   [256, 2304)   qs:     word v (v = 0..31: bytes 4v .. 4v + 3 of the block's qs) at 256 + 64 v + 4 j
// Q5_K (176-byte blocks, 2,816 per group): Q4_K's layout with qs and qh recoded so that no weight
// needs more than one shift (quant_groups.cpp's write_q5k); per pair c of sub-blocks (columns
// 64 c ..) and word q (0..7) of its 32 bytes l = 4 q + i:
//   [0, 2048)     X: byte i = the low sub-block's 5-bit weight (bits 0-4) and bits 2-4 of the high
//                 one's (bits 5-7), at 64 (8 c + q) + 4 j
//   [2048, 2560)  y: byte i = bits 0-1 of the high sub-block's weight of pair c at bits 2c, 2c + 1,
//                 word q at 2048 + 64 q + 4 j
//   [2560, 2752)  scales: word w (0..2) at 2560 + 64 w + 4 j
//   [2752, 2784)  d:      the f16 at 2752 + 2 j
//   [2784, 2816)  dmin:   the f16 at 2784 + 2 j
// Q6_K (210-byte blocks, 3,360 per group): the bits of ql and qh recoded so that the kernel
// unpacks each 6-bit weight with fewer operations (3 masks and 3 shifts a word of 4 runs instead of
// 4 masks, 4 selects and 5 shifts); per half h (0, 1) and word q (0..7) of the half's runs, the
// three words side by side (q6k_line: the kernel reads lines 0, 1, 2, ... in order):
//   [0, 3072)     A: weights w0 (bits 0-5) and bits 0-1 of w2 (bits 6-7) at 64 (3 (8 h + q)) + 4 j;
//                 B: w1 and bits 2-3 of w2 at 64 (3 (8 h + q) + 1) + 4 j;
//                 C: w3 and bits 4-5 of w2 at 64 (3 (8 h + q) + 2) + 4 j
//   [3072, 3328)  scales: int8 scale s (0..15) at 3072 + 16 s + j (16 rows side by side)
//   [3328, 3360)  d:      the f16 at 3328 + 2 j
//   where byte i of the words holds the weights (0..63) of columns 128 h + 4 q + i + 32 k of run k,
//   w_k (GGUF's ql/qh bits, quant_groups.cpp's write_q6k; Q5_K and Q6_K are the types whose bits are recoded).
// Q8_0 (34-byte blocks of 32, in pairs: 1,088 bytes per group and pair of blocks, so that the
// quants' lines stay 64-byte aligned; rows of an even number of blocks):
//   [0, 512)      qs of the pair's first block:  word v (0..7) at 64 v + 4 j
//   [512, 1024)   qs of its second block:        word v at 512 + 64 v + 4 j
//   [1024, 1056)  d of the first block:  the f16 at 1024 + 2 j
//   [1056, 1088)  d of the second block: the f16 at 1056 + 2 j
// Q4_0 (18-byte blocks of 32, in pairs as Q8_0's: 576 bytes per group and pair of blocks, 9 lines):
//   [0, 256)      qs of the pair's first block:  word v (0..3) at 64 v + 4 j
//   [256, 512)    qs of its second block:        word v at 256 + 64 v + 4 j
//   [512, 544)    d of the first block:  the f16 at 512 + 2 j
//   [544, 576)    d of the second block: the f16 at 544 + 2 j
// Q4_1 (20-byte blocks of 32, in pairs: 640 bytes per group and pair, 10 lines): Q4_0's, then the mins
//   [576, 608)    m of the first block:  the f16 at 576 + 2 j
//   [608, 640)    m of the second block: the f16 at 608 + 2 j
// Q5_0 (22-byte blocks, in pairs: 704 bytes, 11 lines): Q4_0's, then the qh words
//   [576, 640)    qh of the first block:  the word at 576 + 4 j
//   [640, 704)    qh of the second block: the word at 640 + 4 j
// Q5_1 (24-byte blocks, in pairs: 768 bytes, 12 lines): Q4_1's, then the qh words at [640, 704) and [704, 768)
// Q5_0's and Q5_1's qs and qh are recoded in place (quant_groups.cpp's encode_q5_block), as Q5_K's:
// byte i of qs word v = column 4v + i's 5-bit weight (bits 0-4) and bits 2-4 of column 16 + 4v + i's
// (bits 5-7); byte i of the qh word = that weight's bits 0-1 at bits 2v, 2v + 1 (v = 0..3).
// Rows past the last of the matrix (the last group's padding) are zero: a zero scale, no
// contribution, never stored. read_quant_group_row gives back the GGUF bytes of every type.
// Thread-safety: pure functions over caller memory.
#pragma once

#include <cstdint>

#include "backend/op_types.h"

namespace strata::cpu {

constexpr int64_t kQuantGroupRows = WeightMatrix::kQuantGroup;
constexpr uint64_t kQ2KGroupBlock = 16 * 84;  // one super-block of 16 rows
constexpr uint64_t kQ2KGroupScales = 1024, kQ2KGroupD = 1280, kQ2KGroupDmin = 1312;
constexpr uint64_t kQ3KGroupBlock = 16 * 110;
constexpr uint64_t kQ3KGroupHmask = 1024, kQ3KGroupScales = 1536, kQ3KGroupD = 1728;
constexpr uint64_t kQ4KGroupBlock = 16 * 144;
constexpr uint64_t kQ4KGroupScales = 0, kQ4KGroupD = 192, kQ4KGroupDmin = 224, kQ4KGroupQs = 256;
constexpr uint64_t kQ5KGroupBlock = 16 * 176;
constexpr uint64_t kQ5KGroupQh = 2048, kQ5KGroupScales = 2560, kQ5KGroupD = 2752, kQ5KGroupDmin = 2784;
constexpr uint64_t kQ6KGroupBlock = 16 * 210;
constexpr uint64_t kQ6KGroupScales = 3072, kQ6KGroupD = 3328;
// Q6_K's word q (0..7) of half h (0, 1): its A, B and C lines side by side (k = 0, 1, 2), so that the
// kernel, taking them in that order, reads each unit's 48 lines of weights as one ascending stream.
constexpr uint64_t q6k_line(int h, int q, int k) { return 64 * (3 * (8 * static_cast<uint64_t>(h) + q) + k); }
constexpr uint64_t kQ8GroupPair = 16 * 2 * 34;  // two blocks of 32 of 16 rows
constexpr uint64_t kQ8GroupD = 1024;
constexpr uint64_t kQ40GroupPair = 16 * 2 * 18;  // two blocks of 32 of 16 rows
constexpr uint64_t kQ40GroupD = 512;
constexpr uint64_t kQ41GroupPair = 16 * 2 * 20;
constexpr uint64_t kQ41GroupD = 512, kQ41GroupM = 576;
constexpr uint64_t kQ50GroupPair = 16 * 2 * 22;
constexpr uint64_t kQ50GroupD = 512, kQ50GroupQh = 576;
constexpr uint64_t kQ51GroupPair = 16 * 2 * 24;
constexpr uint64_t kQ51GroupD = 512, kQ51GroupM = 576, kQ51GroupQh = 640;

// Whether a matrix of this type and shape can be copied into groups (a K-quant of whole
// super-blocks, the types with blocks of 32 of whole pairs of blocks).
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
