// How one token's matmul walks a weight matrix's rows (internal to backend/cpu): the choice and its
// measurement at load, for the types whose one-token kernels can go either way.
//
// kTiles reads 4 rows side by side (4 independent chains in flight, the call and the final lane
// sums paid once per 4 rows; F16/BF16/F32 and the K-quants' tiles prefetch in software); kRows reads
// one row after the other (a single sequential stream). Both give the same bits: per output the
// arithmetic is the same sequence either way. Which is faster depends on the machine and the type:
//   F32/F16/BF16 (matmul_float.cpp): on the Zen 5 VM kRows 1.1-1.6x faster (its prefetchers lose
//     short interleaved streams); on the H200 machine's Xeon kTiles 1.5-2x faster (one FMA chain's
//     latency bounds a row); on the Zen 3 VM within its noise. F16/BF16 rows in groups
//     (WeightMatrix::row_group) ignore it: one token always takes their 4-row tiles (one stream and
//     4 chains), with or without software prefetch (GroupPrefetch, matmul_float.h).
//   Q2_K..Q6_K (matmul_quant.cpp): on the Zen 5 VM kTiles ~10% faster (bound by their unpacking
//     instructions); on the Zen 3 VM kRows 10-28% faster from memory (docs/PERFORMANCE.md, issue 17).
// So CpuBackend measures both at load for each such type it loads (choose_decode_order). Q8_0 and
// the other 32-weight block types always go one row at a time (measured faster on every machine).
// Process-wide, one order per type; kTiles until set.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"
#include "gguf/tensor_type.h"

namespace strata::cpu {

enum class DecodeOrder : uint8_t { kTiles = 0, kRows = 1 };

// F32 0, F16 1, BF16 2, Q2_K 3, Q3_K 4, Q4_K 5, Q5_K 6, Q6_K 7; -1 for a type without a choice.
constexpr int kDecodeOrderSlots = 8;
constexpr int decode_order_slot_or_none(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ2_K: return 3;
    case GgmlType::kQ3_K: return 4;
    case GgmlType::kQ4_K: return 5;
    case GgmlType::kQ5_K: return 6;
    case GgmlType::kQ6_K: return 7;
    default: return -1;
  }
}
// decode_order_slot_or_none(type); throws std::invalid_argument for a type without a choice.
int decode_order_slot(GgmlType type);
// Whether `type` has a one-token row order to choose.
inline bool has_decode_order(GgmlType type) { return decode_order_slot_or_none(type) >= 0; }

// The orders in use, by slot (read by the kernels of every target).
extern std::atomic<uint8_t> g_decode_order[kDecodeOrderSlots];
void set_decode_order(GgmlType type, DecodeOrder order);
DecodeOrder decode_order(GgmlType type);
const char* decode_order_name(DecodeOrder order);

// The order to use here for `type` (one with a choice): STRATA_CPU_DECODE_ORDER=rows|tiles (every
// type), or (unset or "auto") whichever runs faster on this machine through matmul over 64 MiB of
// `type` matrices of `cols` columns (rounded down to the type's block), 2 MiB each (as a decode
// step meets them: one matrix after another, each split over the pool's threads), the best of
// three passes per order, alternated (~30-60 ms of matmuls; on the Zen 3 VM a load measuring Q4_K
// and Q6_K took 0.18-1.3 s against 0.10-0.27 s with the order set, mostly the first touch of each
// 64 MiB buffer). Leaves the orders in use as they were. Throws
// std::invalid_argument for another value of the variable or a type without a choice.
DecodeOrder choose_decode_order(ThreadPool& pool, GgmlType type, int64_t cols);

}  // namespace strata::cpu
