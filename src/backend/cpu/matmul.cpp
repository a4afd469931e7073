// The matmul driver: checks shapes at the boundary, quantizes the activations once per format the
// jobs need, cuts every job's output rows into chunks and lets the pool threads take chunks from a
// shared counter until none are left (one dispatch for all jobs of a matmul_multi call).
//
// Chunk sizes: with few tokens the weights stream from memory and every thread streams at its own
// rate (on the 2-core VMs one core reads half of what two do), so the threads must end together:
// guided chunks (DecodeChunks::kGuided, kernels.h), shrinking with the rows left, down to 64 KiB of
// weights, so a call starts with a few long streams and its threads end close together.
// With many tokens a chunk's weight rows are read once per block of tokens, so they are capped to
// stay in L2 next to that block.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "backend/cpu/decode_order.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_float.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/quant_groups.h"
#include "backend/cpu/profile.h"
#include "core/anon_memory.h"
#include "core/check.h"

namespace strata::cpu {
namespace {

constexpr int64_t kChunksPerThread = 4;
constexpr int64_t kRowAlign = 16;                 // a multiple of every tile's row count
constexpr size_t kChunkBytes = 160 * 1024;        // a chunk's weight rows, with room in L2 for tokens
constexpr int64_t kManyTokens = 16;               // from here on, chunk rows are capped by kChunkBytes
constexpr int64_t kInlineQuantizeElems = 1 << 16;  // below this, quantizing on one thread is cheaper
constexpr uint64_t kGuidedMinBytes = 64 * 1024;    // the smallest guided chunk's weights (~5 µs)
constexpr double kHardwarePrefetchMargin = 0.95;  // choose_group_prefetch: hardware must be 5% faster

std::atomic<uint8_t> g_decode_chunks{static_cast<uint8_t>(DecodeChunks::kGuided)};

bool is_float_type(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Chunk {
  int32_t job;
  int64_t r0, r1;
};

}  // namespace

void set_decode_chunks(DecodeChunks chunks) { g_decode_chunks.store(static_cast<uint8_t>(chunks), std::memory_order_relaxed); }
DecodeChunks decode_chunks() { return static_cast<DecodeChunks>(g_decode_chunks.load(std::memory_order_relaxed)); }

bool matmul_supports(GgmlType type) { return is_float_type(type) || quant_act_block(type) != 0; }

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool, KernelScratch& scratch) {
  const MatmulJob job{&w, y};
  matmul_multi(std::span<const MatmulJob>(&job, 1), x, n, pool, scratch);
}

namespace {

// The live retuning of each type's GroupPrefetch (decode_order.h), by slot, under its mutex.
struct Retuning {
  std::mutex mu;
  bool on = false;
  PrefetchRetuner r;
};
Retuning g_retuners[kGroupPrefetchSlots];

// The slot of this call's type if it may be retuned (one token over matrices in groups, all of one
// type), or -1. (Whether its retuning is on is read under the slot's mutex.)
int retuned_slot(std::span<const MatmulJob> jobs, int64_t n) {
  if (n != 1 || jobs[0].w->row_group == 0) return -1;
  const GgmlType type = jobs[0].w->type;
  for (const MatmulJob& j : jobs) {
    if (j.w->type != type || j.w->row_group == 0) return -1;
  }
  return group_prefetch_slot_or_none(type);
}

void matmul_multi_impl(std::span<const MatmulJob> jobs, const float* x, int64_t n, ThreadPool& pool,
                       KernelScratch& scratch);

}  // namespace

void enable_group_prefetch_retuning(GgmlType type) {
  const int slot = group_prefetch_slot_or_none(type);
  if (slot < 0) throw std::invalid_argument(fmt::format("rows in groups: {} is never in groups", ggml_type_name(type)));
  Retuning& r = g_retuners[slot];
  std::lock_guard lock(r.mu);
  if (r.on) return;
  r.on = true;
  r.r.restart(static_cast<GroupPrefetch>(g_group_prefetch[slot].load(std::memory_order_relaxed)));
}

bool group_prefetch_retuning(GgmlType type) {
  const int slot = group_prefetch_slot_or_none(type);
  if (slot < 0) return false;
  std::lock_guard lock(g_retuners[slot].mu);
  return g_retuners[slot].on;
}

void matmul_multi(std::span<const MatmulJob> jobs, const float* x, int64_t n, ThreadPool& pool,
                  KernelScratch& scratch) {
  if (n <= 0 || jobs.empty()) return;
  const int slot = retuned_slot(jobs, n);
  if (slot < 0) return matmul_multi_impl(jobs, x, n, pool, scratch);
  Retuning& r = g_retuners[slot];
  bool on = false;
  {
    std::lock_guard lock(r.mu);
    on = r.on;
    if (on) g_group_prefetch[slot].store(static_cast<uint8_t>(r.r.pick()), std::memory_order_relaxed);
  }
  if (!on) return matmul_multi_impl(jobs, x, n, pool, scratch);
  const auto t0 = std::chrono::steady_clock::now();
  matmul_multi_impl(jobs, x, n, pool, scratch);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double bytes = 0;
  for (const MatmulJob& j : jobs) bytes += static_cast<double>(j.w->row_bytes) * static_cast<double>(j.w->rows);
  std::lock_guard lock(r.mu);
  if (r.on) r.r.record(bytes, s);
}

namespace {

void matmul_multi_impl(std::span<const MatmulJob> jobs, const float* x, int64_t n, ThreadPool& pool,
                       KernelScratch& scratch) {
  const int64_t K = jobs[0].w->cols;
  const int64_t threads = pool.size();
  int64_t total_rows = 0;
  bool need[2] = {false, false};  // activation blocks of 32, of 256
  uint64_t max_row_bytes = 0;
  bool any_slice = false;
  bool permute_x = false;  // some job takes x permuted (matmul_float_permutes_x)
  for (const MatmulJob& j : jobs) {
    const WeightMatrix& w = *j.w;
    STRATA_CHECK(matmul_supports(w.type), "matmul: unsupported weight type {}", ggml_type_name(w.type));
    STRATA_CHECK(w.cols == K, "matmul_multi: jobs differ in cols ({} vs {})", w.cols, K);
    const int32_t block = quant_act_block(w.type);
    STRATA_CHECK(block == 0 || K % block == 0, "matmul: cols {} not a multiple of {}", K, block);
    if (block == 32) need[0] = true;
    if (block == 256) need[1] = true;
    any_slice |= matmul_float_slice_floats(w, n) > 0;
    permute_x |= matmul_float_permutes_x(w);
    max_row_bytes = std::max(max_row_bytes, w.row_bytes);
    total_rows += w.rows;
  }

  int64_t chunk_rows = round_up(std::max<int64_t>(1, total_rows / (threads * kChunksPerThread)), kRowAlign);
  if (n >= kManyTokens) {
    const auto fit = static_cast<int64_t>(kChunkBytes / max_row_bytes);
    chunk_rows = std::min(chunk_rows, std::max<int64_t>(kRowAlign, fit / kRowAlign * kRowAlign));
  }
  const int64_t slice_floats = any_slice ? round_up(kFloatMaxSliceRows * K, 16) : 0;

  // Scratch: [activations q8/32][activations q8/256][one f32 slice buffer per thread][chunks][x permuted].
  const int32_t blocks[2] = {32, 256};
  size_t act_bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    if (need[i]) act_bytes[i] = (QuantActs::bytes(n, K, blocks[i]) + 63) / 64 * 64;
  }
  const size_t slice_bytes = static_cast<size_t>(slice_floats * threads) * sizeof(float);
  const size_t max_chunks = jobs.size() + static_cast<size_t>(total_rows / std::min<int64_t>(chunk_rows, kRowAlign)) + 1;
  const size_t chunk_bytes = (max_chunks * sizeof(Chunk) + 63) / 64 * 64;
  const size_t xp_bytes = permute_x ? static_cast<size_t>(n * K) * sizeof(float) : 0;
  uint8_t* mem = scratch.get(act_bytes[0] + act_bytes[1] + slice_bytes + chunk_bytes + xp_bytes);
  const bool profile = profile_enabled();
  const ProfileClock::time_point q0 = profile ? ProfileClock::now() : ProfileClock::time_point{};
  QuantActs acts[2];
  for (int i = 0; i < 2; ++i) {
    if (!need[i]) continue;
    acts[i] = QuantActs::carve(mem + (i == 0 ? 0 : act_bytes[0]), n, K, blocks[i]);
    if (n * K < kInlineQuantizeElems || threads == 1) {
      quantize_acts(x, 0, n, acts[i]);
    } else {
      pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) { quantize_acts(x, t0, t1, acts[i]); });
    }
  }
  if (profile && (need[0] || need[1])) {
    profile_record("  quantize activations", std::chrono::duration_cast<std::chrono::nanoseconds>(ProfileClock::now() - q0).count());
  }
  float* slices = reinterpret_cast<float*>(mem + act_bytes[0] + act_bytes[1]);
  float* xp = permute_x ? reinterpret_cast<float*>(mem + act_bytes[0] + act_bytes[1] + slice_bytes + chunk_bytes) : nullptr;
  if (permute_x) {  // once per call, like the quantized activations
    if (n * K < kInlineQuantizeElems || threads == 1) {
      matmul_float_permute_x(x, n, K, xp);
    } else {
      pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) { matmul_float_permute_x(x + t0 * K, t1 - t0, K, xp + t0 * K); });
    }
  }

  // Few tokens, guided (kernels.h): chunk after chunk over the jobs in order, each two thirds of
  // the rows not yet in a chunk over the thread count, rounded up to kRowAlign, at least
  // kGuidedMinBytes. (All of them over the thread count streamed as well in BM_DecodeStep but left
  // twice the tail in a model, 14-44 against 7-11 µs per matmul: a thread slowed in the first half
  // cannot be helped.)
  // Otherwise chunks of `chunk_rows`, except that (few tokens, kFixed) the last threads·chunk_rows
  // rows of the last job are cut four times finer: whichever thread finishes first takes the small
  // ones, so the threads end within a small chunk of each other instead of a big one.
  const bool guided = n < kManyTokens && decode_chunks() == DecodeChunks::kGuided;
  const int64_t guided_min_rows =
      std::max(kRowAlign, round_up(static_cast<int64_t>((kGuidedMinBytes + max_row_bytes - 1) / max_row_bytes), kRowAlign));
  const int64_t small_rows = std::max(kRowAlign, round_up(chunk_rows / 4, kRowAlign));
  auto for_each_chunk = [&](auto&& emit) {
    if (guided) {
      int64_t left = total_rows;
      for (int32_t ji = 0; ji < static_cast<int32_t>(jobs.size()); ++ji) {
        const int64_t rows = jobs[ji].w->rows;
        for (int64_t r = 0; r < rows;) {
          const int64_t end = std::min(rows, r + std::max(guided_min_rows, round_up(2 * left / (3 * threads), kRowAlign)));
          emit(Chunk{ji, r, end});
          left -= end - r;
          r = end;
        }
      }
      return;
    }
    for (int32_t ji = 0; ji < static_cast<int32_t>(jobs.size()); ++ji) {
      const int64_t rows = jobs[ji].w->rows;
      const bool last = ji + 1 == static_cast<int32_t>(jobs.size());
      const int64_t fine_from = last ? std::max<int64_t>(0, rows - threads * chunk_rows) / chunk_rows * chunk_rows : rows;
      for (int64_t r = 0; r < rows;) {
        const int64_t step = r < fine_from ? chunk_rows : small_rows;
        emit(Chunk{ji, r, std::min(rows, r + step)});
        r += step;
      }
    }
  };
  int64_t n_chunks = 0;
  for_each_chunk([&](const Chunk&) { ++n_chunks; });
  auto run_chunk = [&](const Chunk& c, float* slice) {
    const WeightMatrix& w = *jobs[c.job].w;
    float* y = jobs[c.job].y;
    const int32_t block = quant_act_block(w.type);
    if (block == 0) {
      matmul_float_rows(w, permute_x && matmul_float_permutes_x(w) ? xp : x, n, y, c.r0, c.r1,
                        matmul_float_slice_floats(w, n) > 0 ? slice : nullptr);
    } else {
      matmul_quant_rows(w, acts[block == 32 ? 0 : 1], n, y, c.r0, c.r1);
    }
  };

  Chunk* chunks = reinterpret_cast<Chunk*>(mem + act_bytes[0] + act_bytes[1] + slice_bytes);
  int64_t filled = 0;
  for_each_chunk([&](const Chunk& c) { chunks[filled++] = c; });

  if (threads == 1 || n_chunks == 1) {
    for (int64_t i = 0; i < n_chunks; ++i) run_chunk(chunks[i], slices);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&](int t) {
    float* slice = slices + slice_floats * t;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_chunks;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      run_chunk(chunks[i], slice);
    }
  };
  if (!profile) {
    pool.run(work);
    return;
  }
  // Profiled: when each thread started and finished, against the dispatch (profile.h).
  std::vector<ProfileClock::time_point> start(static_cast<size_t>(threads)), end(static_cast<size_t>(threads));
  const ProfileClock::time_point t0 = ProfileClock::now();
  pool.run([&](int t) {
    start[static_cast<size_t>(t)] = ProfileClock::now();
    work(t);
    end[static_cast<size_t>(t)] = ProfileClock::now();
  });
  const auto ns = [](ProfileClock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  profile_record("  pool wake (dispatch to last start)", ns(*std::max_element(start.begin(), start.end()) - t0));
  profile_record("  pool tail (first to last finish)",
                 ns(*std::max_element(end.begin(), end.end()) - *std::min_element(end.begin(), end.end())));
}

}  // namespace

namespace {

// Seconds of the median of nine passes of one-token matmuls over 64 MiB of `type` matrices of `cols`
// columns (a multiple of the type's block; rows as stored where row_group is 0, else in groups of
// that many: WeightMatrix::kRowGroup or kQuantGroup), for each of N variants, alternated: set(v)
// selects variant v before its passes.
template <size_t N, typename Set>
std::array<double, N> time_variants(ThreadPool& pool, GgmlType type, int64_t cols, int64_t row_group, Set&& set) {
  const auto row_bytes = static_cast<int64_t>(ggml_row_size(type, static_cast<uint64_t>(cols)));
  const int64_t rows = (int64_t{64} << 20) / row_bytes;
  AnonymousMemory mem(static_cast<uint64_t>(rows * row_bytes), AnonymousMemory::Pages::kHuge);
  const auto threads = static_cast<uint64_t>(pool.size());
  pool.run([&](int t) {  // written by the threads that will read it
    const uint64_t n = mem.size() / 4;
    auto* words = reinterpret_cast<uint32_t*>(mem.data());
    const uint64_t b = n * static_cast<uint64_t>(t) / threads, e = n * (t + 1) / threads;
    switch (type) {  // 1.0 in every float weight; quantized blocks all zero (the same work as any)
      case GgmlType::kF32: std::fill(words + b, words + e, 0x3f800000u); break;
      case GgmlType::kF16: std::fill(words + b, words + e, 0x3c003c00u); break;
      case GgmlType::kBF16: std::fill(words + b, words + e, 0x3f803f80u); break;
      default: std::fill(words + b, words + e, 0u); break;
    }
  });
  // As in a decode step: one matrix of a few MiB after another (the matrix of a model layer), each
  // split over the threads, not one long stream. (Every weight is the same, so a grouped matrix is
  // the same bytes; only its row_group and whole groups per matrix differ; all-zero quantized blocks
  // are the same in quant groups.)
  int64_t mrows = std::max<int64_t>(1, (int64_t{2} << 20) / row_bytes);
  if (row_group > 0) mrows = std::max<int64_t>(row_group, mrows / row_group * row_group);
  std::vector<WeightMatrix> ws;
  for (int64_t r = 0; r + mrows <= rows; r += mrows) {
    WeightMatrix w{type, mrows, cols, mem.data() + static_cast<uint64_t>(r * row_bytes),
                   static_cast<uint64_t>(row_bytes)};
    w.row_group = row_group;
    ws.push_back(w);
  }
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(mrows));
  KernelScratch scratch;
  // Passes alternate the variants, each round starting one variant later; each variant's median
  // pass counts, so that one lucky pass does not decide (the best of three did). On the Zen 4 VM,
  // whose bandwidth swings with its neighbours' bursts, either rule chose hardware at one load and
  // software at the next: the retuning while decoding (PrefetchRetuner) corrects that.
  constexpr int kPasses = 9;
  std::array<std::array<double, kPasses>, N> secs{};
  for (int rep = 0; rep < kPasses; ++rep) {
    for (size_t i = 0; i < N; ++i) {
      const size_t v = (i + static_cast<size_t>(rep)) % N;
      set(static_cast<int>(v));
      const auto t0 = std::chrono::steady_clock::now();
      for (const WeightMatrix& w : ws) matmul(w, x.data(), 1, y.data(), pool, scratch);
      secs[v][static_cast<size_t>(rep)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  std::array<double, N> median;
  for (size_t v = 0; v < N; ++v) {
    std::nth_element(secs[v].begin(), secs[v].begin() + kPasses / 2, secs[v].end());
    median[v] = secs[v][kPasses / 2];
  }
  return median;
}

}  // namespace

std::atomic<uint8_t> g_decode_order[kDecodeOrderSlots] = {};  // kTiles

int decode_order_slot(GgmlType type) {
  const int slot = decode_order_slot_or_none(type);
  if (slot < 0) {
    throw std::invalid_argument(
        fmt::format("one-token decode order: {} is not a 16/32-bit float type or a K-quant", ggml_type_name(type)));
  }
  return slot;
}
void set_decode_order(GgmlType type, DecodeOrder order) {
  g_decode_order[decode_order_slot(type)].store(static_cast<uint8_t>(order), std::memory_order_relaxed);
}
DecodeOrder decode_order(GgmlType type) {
  return static_cast<DecodeOrder>(g_decode_order[decode_order_slot(type)].load(std::memory_order_relaxed));
}
const char* decode_order_name(DecodeOrder order) { return order == DecodeOrder::kRows ? "rows" : "tiles"; }

DecodeOrder choose_decode_order(ThreadPool& pool, GgmlType type, int64_t cols) {
  (void)decode_order_slot(type);  // throws for a type without a choice
  const char* env = std::getenv("STRATA_CPU_DECODE_ORDER");
  const std::string_view v = env != nullptr ? env : "auto";
  if (v == "rows") return DecodeOrder::kRows;
  if (v == "tiles") return DecodeOrder::kTiles;
  if (v != "auto") throw std::invalid_argument(fmt::format("STRATA_CPU_DECODE_ORDER={}: expected rows, tiles or auto", v));
  const DecodeOrder was = decode_order(type);
  const int64_t block = quant_act_block(type) > 0 ? quant_act_block(type) : 1;
  cols = std::max<int64_t>(block, std::clamp<int64_t>(cols, 256, 16384) / block * block);
  const auto best =
      time_variants<2>(pool, type, cols, 0, [&](int o) { set_decode_order(type, static_cast<DecodeOrder>(o)); });
  set_decode_order(type, was);
  return best[1] < best[0] ? DecodeOrder::kRows : DecodeOrder::kTiles;
}

std::atomic<uint8_t> g_group_prefetch[kGroupPrefetchSlots] = {};  // kSoftware

namespace {
int group_prefetch_slot(GgmlType type) {
  const int slot = group_prefetch_slot_or_none(type);
  if (slot < 0) {
    throw std::invalid_argument(fmt::format("rows in groups: {} is never in groups", ggml_type_name(type)));
  }
  return slot;
}
}  // namespace

void set_group_prefetch(GgmlType type, GroupPrefetch p) {
  const int slot = group_prefetch_slot(type);
  {
    std::lock_guard lock(g_retuners[slot].mu);
    g_retuners[slot].on = false;  // fixed from here on, until retuning is enabled again (its averages kept)
  }
  g_group_prefetch[slot].store(static_cast<uint8_t>(p), std::memory_order_relaxed);
}
GroupPrefetch group_prefetch(GgmlType type) {
  return static_cast<GroupPrefetch>(g_group_prefetch[group_prefetch_slot(type)].load(std::memory_order_relaxed));
}
const char* group_prefetch_name(GroupPrefetch p) {
  switch (p) {
    case GroupPrefetch::kHardware: return "hardware";
    case GroupPrefetch::kSoftware16K: return "software-16k";
    case GroupPrefetch::kSoftware4K: return "software-4k";
    default: return "software";
  }
}
std::optional<GroupPrefetch> parse_group_prefetch(std::string_view name) {
  for (const GroupPrefetch p : kGroupPrefetches) {
    if (name == group_prefetch_name(p)) return p;
  }
  return std::nullopt;
}

void PrefetchRetuner::restart(GroupPrefetch in_use) {
  calls_ = 0;  // a new epoch (the one in progress is dropped; pairs of epochs may span the pause)
  bytes_ = secs_ = 0;
  if (epoch_ == 0) {
    for (uint8_t v = 0; v < kN; ++v) {
      if (kGroupPrefetches[v] == in_use) best_ = v;
    }
  }
  choose();
}

void PrefetchRetuner::choose() {
  variant_ = best_;
  // An epoch of the best after every exploration and before the first: explorations sit between two.
  if (best_rate_ == 0 || pending_ != kNone) return;
  if (confirm_ != kNone) {
    variant_ = confirm_;
    return;
  }
  for (uint8_t v = 0; v < kN; ++v) {
    if (v != best_ && !measured_[v]) {  // never measured: at the start, every other epoch
      variant_ = v;
      return;
    }
  }
  if (epoch_ % kExploreEvery == kExploreEvery - 1) {
    explored_ = static_cast<uint8_t>((explored_ + 1) % kN);
    if (explored_ == best_) explored_ = static_cast<uint8_t>((explored_ + 1) % kN);
    variant_ = explored_;
  }
}

void PrefetchRetuner::finish_best_epoch(double rate) {
  if (pending_ != kNone && best_rate_ != 0) {
    const uint8_t p = pending_;
    measured_[p] = true;
    const bool faster = pending_rate_ <= kSwitch * 0.5 * (best_rate_ + rate);  // than the best around it
    pending_ = kNone;
    if (faster && confirm_ == p) {  // twice in a row: p is the best now
      measured_[best_] = true;
      best_ = p;
      confirm_ = kNone;
      best_rate_ = pending_rate_;
      return;
    }
    confirm_ = faster ? p : kNone;
    if (faster) {  // confirmed between two new epochs of the best, not this one again
      best_rate_ = 0;
      return;
    }
  }
  pending_ = kNone;
  best_rate_ = rate;
}

void PrefetchRetuner::record(double bytes, double secs) {
  bytes_ += bytes;
  secs_ += secs;
  if (++calls_ < kEpochCalls) return;
  const double rate = secs_ / bytes_;
  if (variant_ == best_) {
    finish_best_epoch(rate);
  } else {
    pending_ = variant_;
    pending_rate_ = rate;
  }
  ++epoch_;
  calls_ = 0;
  bytes_ = secs_ = 0;
  choose();
}

bool group_prefetch_measured() {
  const char* env = std::getenv("STRATA_CPU_GROUP_PREFETCH");
  return env == nullptr || std::string_view(env) == "auto";
}

GroupPrefetch choose_group_prefetch(ThreadPool& pool, GgmlType type, int64_t cols) {
  const bool floats = type == GgmlType::kF16 || type == GgmlType::kBF16;
  if (!floats && (group_prefetch_slot_or_none(type) < 0 || !quant_groups_supported(type, 256))) {
    throw std::invalid_argument(fmt::format("rows in groups: {} is not F16, BF16 or a type of quant groups", ggml_type_name(type)));
  }
  const char* env = std::getenv("STRATA_CPU_GROUP_PREFETCH");
  const std::string_view v = env != nullptr ? env : "auto";
  if (v != "auto") {
    if (const auto p = parse_group_prefetch(v)) return *p;
    throw std::invalid_argument(fmt::format(
        "STRATA_CPU_GROUP_PREFETCH={}: expected software, software-16k, software-4k, hardware or auto", v));
  }
  const GroupPrefetch was = group_prefetch(type);
  const int64_t unit = floats ? 32 : 256;  // 64-byte rows; whole super-blocks (and pairs of 32-blocks)
  cols = std::max<int64_t>(unit, std::clamp<int64_t>(cols, 256, 16384) / unit * unit);
  constexpr size_t kN = std::size(kGroupPrefetches);
  const auto best = time_variants<kN>(pool, type, cols, floats ? WeightMatrix::kRowGroup : WeightMatrix::kQuantGroup,
                                      [&](int p) { set_group_prefetch(type, kGroupPrefetches[p]); });
  set_group_prefetch(type, was);
  static_assert(kGroupPrefetches[0] == GroupPrefetch::kSoftware);
  size_t soft = 0, hard = 0;  // the fastest software distance, and hardware's index
  for (size_t i = 1; i < kN; ++i) {
    if (kGroupPrefetches[i] == GroupPrefetch::kHardware) {
      hard = i;
    } else if (best[i] < best[soft]) {
      soft = i;
    }
  }
  // Hardware only where it wins clearly: on the H200 machine's Xeon software prefetch streamed BF16
  // at 99% of the limit and hardware at 68%, and under load from other processes this measurement
  // once chose hardware there (65% in the model); where the two are level (the Zen 3 VM) software
  // loses nothing.
  return best[hard] < kHardwarePrefetchMargin * best[soft] ? GroupPrefetch::kHardware : kGroupPrefetches[soft];
}

}  // namespace strata::cpu
