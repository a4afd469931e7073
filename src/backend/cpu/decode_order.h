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

#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

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
// step meets them: one matrix after another, each split over the pool's threads), the median of
// nine passes per order, alternated (three times the matmuls of the earlier best of three, which
// took ~30-60 ms; on the Zen 3 VM a load measuring Q4_K and Q6_K then took 0.18-1.3 s against
// 0.10-0.27 s with the order set, mostly the first touch of each 64 MiB buffer). Leaves the orders
// in use as they were. Throws std::invalid_argument for another value of the variable or a type
// without a choice.
DecodeOrder choose_decode_order(ThreadPool& pool, GgmlType type, int64_t cols);

// One token over rows in groups (WeightMatrix::row_group: F16/BF16 in groups of 4 rows, one
// sequential stream and 4 FMA chains; the quantized types of quant_groups.h in groups of 16, one
// stream): kSoftware prefetches the layout's own distance ahead (floats: 4 groups, at most 64 KB, as
// the tiles of rows as stored do; quant groups: 8 KiB, where 4, 8 and 16 KiB measured level on the
// Xeon VM), kSoftware16K and kSoftware4K that many bytes ahead of the stream, kHardware leaves the
// stream to the hardware prefetchers. The same bits either way. On the H200 machine's Xeon F16
// decode ran 1.5-1.7x faster with the software prefetch; on the Zen 3 VM the two were within its
// noise; on the Zen 5 VM 64 KB ahead lost to hardware alone, and 4-16 KB ahead beat both; on the
// Zen 4 VM hardware alone streamed Q8_0, Q4_K and Q6_K 5-25 points of the limit faster than any
// software distance (docs/PERFORMANCE.md, issue 17). So CpuBackend measures them at load, per type
// (choose_group_prefetch).
// Process-wide, one per type in groups (group_prefetch_slot); kSoftware until set.
enum class GroupPrefetch : uint8_t { kSoftware = 0, kHardware = 1, kSoftware16K = 2, kSoftware4K = 3 };
inline constexpr GroupPrefetch kGroupPrefetches[] = {GroupPrefetch::kSoftware, GroupPrefetch::kHardware,
                                                     GroupPrefetch::kSoftware16K, GroupPrefetch::kSoftware4K};
// F32 0, F16 1, BF16 2 (their decode_order_slot), then the types of quant groups: Q2_K 3 .. Q6_K 7,
// Q8_0 8, Q4_0 9, Q4_1 10, Q5_0 11, Q5_1 12; -1 for a type never in groups.
constexpr int kGroupPrefetchSlots = 13;
constexpr int group_prefetch_slot_or_none(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0: return 8;
    case GgmlType::kQ4_0: return 9;
    case GgmlType::kQ4_1: return 10;
    case GgmlType::kQ5_0: return 11;
    case GgmlType::kQ5_1: return 12;
    default: return decode_order_slot_or_none(type);
  }
}
extern std::atomic<uint8_t> g_group_prefetch[kGroupPrefetchSlots];  // by slot (read by the kernels of every target)
// Throw std::invalid_argument for a type never in groups. set_group_prefetch also turns off the
// type's retuning (enable_group_prefetch_retuning, below).
void set_group_prefetch(GgmlType type, GroupPrefetch p);
GroupPrefetch group_prefetch(GgmlType type);
// "software", "hardware", "software-16k", "software-4k"; parse_group_prefetch is its inverse
// (std::nullopt for another name).
const char* group_prefetch_name(GroupPrefetch p);
std::optional<GroupPrefetch> parse_group_prefetch(std::string_view name);
// As choose_decode_order, for rows in groups: STRATA_CPU_GROUP_PREFETCH=software|software-16k|
// software-4k|hardware (every type), or (unset or "auto") the fastest of them on 64 MiB of `type`
// matrices of `cols` columns in groups (rounded down to a multiple of 64 bytes' elements for
// F16/BF16, of the quantized type's unit otherwise): the fastest software distance, or hardware
// where it is at least 5% faster than that. Leaves the choice in use as it was. Throws
// std::invalid_argument for another value of the variable or a type never in groups (F32 too).
GroupPrefetch choose_group_prefetch(ThreadPool& pool, GgmlType type, int64_t cols);
// Retuning while decoding: from here on, the one-token matmuls over `type` in groups (matmul_multi,
// with every job of that type) choose its GroupPrefetch themselves, from their own timings
// (PrefetchRetuner, below), starting from the one in use. The same bits whichever runs. For hosts
// whose bandwidth swings with their neighbours' (the Zen 4 VM: hardware prefetch alone streamed
// quantized groups at 45-51 GB/s when the others were quiet, 8 KiB ahead ~30, and a measurement at
// load chose either), where no choice made at load stays right. set_group_prefetch turns it off
// again (what was measured kept for the next enable). Throws std::invalid_argument for a type never
// in groups.
void enable_group_prefetch_retuning(GgmlType type);

// The retuning's choice for one type (matmul.cpp keeps one per slot, under a mutex). One-token
// matmuls are counted in epochs of kEpochCalls calls (about one decode step of llama-1b: 16 layers
// of 4 dispatches and the LM head, so that every epoch holds the same mix of shapes), each run with
// one variant: the best, or another one explored, always between two epochs of the best, and
// measured against them (its seconds per byte over their mean), so that a host whose bandwidth
// drifts compares variants within the same few steps. Each other variant is explored once at the
// start (every other epoch), then in turn every kExploreEvery-th epoch. One that measures at most
// kSwitch of the best is explored again at once (between two new epochs of the best), and becomes
// the best if it does so twice in a row: one epoch caught in a neighbour's burst switches nothing.
// Not thread-safe.
class PrefetchRetuner {
 public:
  static constexpr uint32_t kEpochCalls = 64, kExploreEvery = 32;
  static constexpr double kSwitch = 0.95;
  // Starts a new epoch (after a pause: retuning off and on again); before any epoch was measured,
  // `in_use` becomes the best.
  void restart(GroupPrefetch in_use);
  // The variant for the next call (the epoch's).
  GroupPrefetch pick() const { return kGroupPrefetches[variant_]; }
  // That call's weight bytes and seconds.
  void record(double bytes, double secs);
  GroupPrefetch best() const { return kGroupPrefetches[best_]; }
  uint32_t epochs() const { return epoch_; }

 private:
  static constexpr size_t kN = std::size(kGroupPrefetches);
  static constexpr uint8_t kNone = 0xff;
  void choose();  // the next epoch's variant
  void finish_best_epoch(double rate);

  std::array<bool, kN> measured_{};  // each variant explored (or the best) at least once
  uint8_t best_ = 0, variant_ = 0, explored_ = 0;  // indices into kGroupPrefetches
  uint8_t pending_ = kNone;  // the variant explored in the last epoch, waiting for the best's next one
  uint8_t confirm_ = kNone;  // a variant to explore again at once (it measured at most kSwitch)
  double pending_rate_ = 0, best_rate_ = 0;  // seconds per byte: pending_'s epoch, the best's last epoch (0: none)
  uint32_t epoch_ = 0, calls_ = 0;
  double bytes_ = 0, secs_ = 0;
};
// Whether STRATA_CPU_GROUP_PREFETCH leaves the choice to measurements (unset or "auto").
bool group_prefetch_measured();
// Whether `type`'s GroupPrefetch is being retuned (enable_group_prefetch_retuning); false for a
// type never in groups.
bool group_prefetch_retuning(GgmlType type);

}  // namespace strata::cpu
