// Micro-benchmarks of the CPU kernels: matmul throughput per weight type and shape, in GB/s of
// weights for decode-sized batches (n = 1, 8: weights stream from memory, so each iteration uses
// the next of enough copies to overflow the caches) and in GFLOP/s for n = 8, 64, 512; paged
// attention in GFLOP/s; and the read-bandwidth probe, to compare against in the same run.
// Threads: STRATA_THREADS (default: physical cores). STRATA_BENCH_HOT=1: weights stay in cache.
// STRATA_CPU_DECODE_ORDER=rows|tiles: one token's F32/F16/BF16 matmuls walk the rows in that order
// (as in the backend; unset or auto: measured here at start, as the backend does at load).
// STRATA_BENCH_ROW_GROUPS=1: F16/BF16 matrices (rows a multiple of 4 and of 64 bytes) are read as
// rows in groups of 4 (WeightMatrix::row_group, as CpuBackend copies them; the bytes are random
// either way), one token's prefetch chosen as the backend does (STRATA_CPU_GROUP_PREFETCH or measured);
// Q4_K/Q6_K/Q8_0 matrices (rows a multiple of 16) in groups of 16 rows (quant_groups.h, as CpuBackend copies them).
//   build/bin/matmul_bench --benchmark_filter='F16/768x768'
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <span>
#include <random>
#include <vector>

#include "backend/cpu/bandwidth.h"
#include "core/anon_memory.h"
#include "hwy/targets.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_float.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/quant_groups.h"
#include "core/fp16.h"
#include "gguf/quant_blocks.h"
#include "gguf/tensor_type.h"

namespace strata::cpu {
namespace {

// STRATA_BENCH_TARGET=AVX2 (a Highway target name, e.g. AVX3, SCALAR): the kernels run that target.
[[maybe_unused]] const bool kTargetSet = [] {
  const char* want = std::getenv("STRATA_BENCH_TARGET");
  if (want == nullptr) return false;
  for (int64_t t = hwy::SupportedTargets(); t != 0; t &= t - 1) {
    if (std::strcmp(hwy::TargetName(t & -t), want) == 0) {
      hwy::SetSupportedTargetsForTest(t & -t);
      return true;
    }
  }
  std::fprintf(stderr, "STRATA_BENCH_TARGET=%s: not a supported target here\n", want);
  std::exit(2);
}();

ThreadPool& pool() {
  static ThreadPool p([] {
    const char* env = std::getenv("STRATA_THREADS");
    return env ? std::atoi(env) : ThreadPool::physical_cores();
  }());
  return p;
}

// The one-token row order of each type with a choice, chosen as CpuBackend does (decode_order.h).
[[maybe_unused]] const bool kOrdersSet = [] {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const DecodeOrder o = choose_decode_order(pool(), t, 2048);
    set_decode_order(t, o);
    std::fprintf(stderr, "%.*s: one-token matmuls in %s\n", static_cast<int>(ggml_type_name(t).size()),
                 ggml_type_name(t).data(), decode_order_name(o));
  }
  return true;
}();

const bool kRowGroups = [] {
  const char* env = std::getenv("STRATA_BENCH_ROW_GROUPS");
  if (env == nullptr || std::strcmp(env, "1") != 0) return false;
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const GroupPrefetch p = choose_group_prefetch(pool(), t, 2048);
    set_group_prefetch(t, p);
    std::fprintf(stderr, "%.*s: rows in groups of %d, %s prefetch\n", static_cast<int>(ggml_type_name(t).size()),
                 ggml_type_name(t).data(), quant_groups_supported(t, 2048) ? 16 : 4, group_prefetch_name(p));
  }
  return true;
}();

// Random weights: f16 values in [-1, 1], or random quant bytes with sane f16 scales.
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const uint64_t row_bytes = ggml_row_size(type, static_cast<uint64_t>(cols));
  std::vector<uint8_t> bytes(row_bytes * static_cast<uint64_t>(rows));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {  // xorshift64*: fast enough for hundreds of MiB
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  };
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t v = next();
    std::memcpy(&bytes[i], &v, 8);
  }
  const auto traits = ggml_type_traits(type);
  const uint64_t n_blocks = bytes.size() / traits.type_size;
  const uint16_t scale = f32_to_fp16(0.004f);
  for (uint64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = bytes.data() + i * traits.type_size;
    if (type == GgmlType::kF16) {
      const uint16_t h = f32_to_fp16(static_cast<float>(static_cast<int64_t>(next() % 2001) - 1000) / 1000.0f);
      std::memcpy(blk, &h, 2);
    } else if (type == GgmlType::kBF16) {
      const uint16_t h = f32_to_bf16(static_cast<float>(static_cast<int64_t>(next() % 2001) - 1000) / 1000.0f);
      std::memcpy(blk, &h, 2);
    } else if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
      std::memcpy(blk, &scale, 2);
    } else if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
      std::memcpy(blk, &scale, 2);
      std::memcpy(blk + 2, &scale, 2);
    } else if (type == GgmlType::kQ6_K) {
      std::memcpy(blk + offsetof(BlockQ6_K, d), &scale, 2);
    }
  }
  return bytes;
}

// args: type, rows, cols, n
void RunMatmul(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const uint64_t bytes = ggml_row_size(type, static_cast<uint64_t>(cols)) * static_cast<uint64_t>(rows);
  // Decode-sized batches: rotate through copies totalling >= 256 MiB so weights come from memory
  // (STRATA_BENCH_HOT=1: one copy, so small matrices stay in cache and the kernel's compute speed shows).
  const bool hot = std::getenv("STRATA_BENCH_HOT") != nullptr;
  const int copies =
      n <= 8 && !hot ? static_cast<int>(std::max<uint64_t>(1, (uint64_t{256} << 20) / bytes + 1)) : 1;
  std::vector<std::vector<uint8_t>> data;
  data.reserve(static_cast<size_t>(copies));
  std::vector<WeightMatrix> ws;
  for (int i = 0; i < copies; ++i) {
    data.push_back(i == 0 ? random_weights(type, rows, cols, 1) : data.front());
    ws.push_back(WeightMatrix{type, rows, cols, data.back().data(), bytes / static_cast<uint64_t>(rows)});
    if (kRowGroups && quant_groups_supported(type, cols) && rows % kQuantGroupRows == 0) {
      std::vector<uint8_t> grouped(quant_group_bytes(ws.back()));
      write_quant_groups(ws.back(), grouped.data(), 0, static_cast<uint64_t>(rows / kQuantGroupRows));
      data.back() = std::move(grouped);
      ws.back().data = data.back().data();
      ws.back().row_group = WeightMatrix::kQuantGroup;
    }
    if (kRowGroups && (type == GgmlType::kF16 || type == GgmlType::kBF16) && rows % WeightMatrix::kRowGroup == 0 &&
        ws.back().row_bytes % 64 == 0) {
      ws.back().row_group = WeightMatrix::kRowGroup;
    }
  }
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  std::mt19937 rng(0);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  KernelScratch scratch;
  int i = 0;
  for (auto _ : state) {
    matmul(ws[static_cast<size_t>(i)], x.data(), n, y.data(), pool(), scratch);
    i = (i + 1) % copies;
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(rows * cols * n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(ggml_type_name(type)) + "/" + std::to_string(rows) + "x" + std::to_string(cols) +
                 "/n=" + std::to_string(n));
}

constexpr GgmlType kOtherQuant[] = {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                    GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ5_K};

void MatmulArgs(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}}) {
      for (int64_t n : {1, 8, 64, 512}) {
        if (rows == 32000 && n == 512) continue;  // the output matrix only ever sees sampled rows
        b->Args({static_cast<int64_t>(t), rows, cols, n});
      }
    }
  }
  // The other quantized types, one shape (against BM_MatmulHighway's).
  for (GgmlType t : kOtherQuant) {
    for (int64_t n : {1, 8}) b->Args({static_cast<int64_t>(t), 2048, 768, n});
  }
  // llama-1b's feed-forward shapes for one token: the same bytes as short rows and as long rows.
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8192, 2048}, {2048, 8192}}) b->Args({static_cast<int64_t>(t), rows, cols, 1});
  }
  // One token over 0.3-1.1 MB of weights: with STRATA_BENCH_HOT=1 they stay in a core's L2 (one
  // thread), so the kernel's arithmetic rate shows (what it could stream at most).
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    b->Args({static_cast<int64_t>(t), 512, 2048, 1});
  }
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16}) b->Args({static_cast<int64_t>(t), 256, 1024, 1});  // 0.5 MB
}
void BM_Matmul(benchmark::State& state) { RunMatmul(state); }
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same with the portable Highway kernels forced (matmul_quant_hwy-inl.h; on x86 the default is
// the intrinsics path): A/B against BM_Matmul's rows in the same run.
void BM_MatmulHighway(benchmark::State& state) {
  set_quant_highway_forced(true);
  RunMatmul(state);
  set_quant_highway_forced(false);
}
void MatmulHighwayArgs(benchmark::internal::Benchmark* b) {
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}}) {
      for (int64_t n : {1, 8}) b->Args({static_cast<int64_t>(t), rows, cols, n});
    }
  }
  for (GgmlType t : kOtherQuant) {
    for (int64_t n : {1, 8}) b->Args({static_cast<int64_t>(t), 2048, 768, n});
  }
}
BENCHMARK(BM_MatmulHighway)->Apply(MatmulHighwayArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();

// args: KV dtype, sequences, new tokens per sequence, cached tokens per sequence
void BM_Attention(benchmark::State& state) {
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const auto n_seqs = static_cast<int32_t>(state.range(1));
  const auto n_q = static_cast<int32_t>(state.range(2));
  const auto cached = static_cast<int32_t>(state.range(3));
  const int32_t n_head = 12, n_kv = 12, hd = 64, bs = 16;
  const int32_t blocks_per_seq = (cached + n_q + bs - 1) / bs;
  KvLayerView kv;
  kv.dtype = dtype;
  kv.block_size = bs;
  kv.n_kv_heads = n_kv;
  kv.head_dim = hd;
  std::vector<uint8_t> k(static_cast<size_t>(kv.block_stride_bytes() * blocks_per_seq * n_seqs)), v(k.size());
  std::mt19937 rng(1);
  for (size_t i = 0; i < k.size(); i += 2) {
    const uint16_t h = f32_to_fp16(std::uniform_real_distribution<float>(-1, 1)(rng));
    std::memcpy(&k[i], &h, 2);
    std::memcpy(&v[i], &h, 2);
  }
  if (dtype == KvDtype::kF32) {  // f32 patterns: small finite values
    for (size_t i = 0; i < k.size(); i += 4) {
      const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::memcpy(&k[i], &f, 4);
      std::memcpy(&v[i], &f, 4);
    }
  }
  kv.k = k.data();
  kv.v = v.data();
  std::vector<BlockId> ids(static_cast<size_t>(blocks_per_seq * n_seqs));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<AttentionSeq> seqs;
  for (int32_t s = 0; s < n_seqs; ++s) {
    seqs.push_back({s * n_q, n_q, cached, ids.data() + s * blocks_per_seq, blocks_per_seq});
  }
  std::vector<float> q(static_cast<size_t>(n_seqs) * n_q * n_head * hd), out(q.size());
  for (auto& x : q) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  KernelScratch scratch;
  for (auto _ : state) {
    paged_attention(q.data(), kv, seqs, n_head, 0.125f, out.data(), pool(), scratch);
    benchmark::ClobberMemory();
  }
  // q·k and p·v: 4·head_dim flops per (query head, visible key).
  double pairs = 0;
  for (int32_t i = 0; i < n_q; ++i) pairs += cached + i + 1;
  state.counters["GFLOP/s"] = benchmark::Counter(4e-9 * hd * n_head * n_seqs * pairs, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)
    ->Args({static_cast<int64_t>(KvDtype::kF16), 1, 512, 0})    // one 512-token prompt
    ->Args({static_cast<int64_t>(KvDtype::kF32), 1, 512, 0})
    ->Args({static_cast<int64_t>(KvDtype::kF16), 8, 1, 512})    // 8 decodes at depth 512
    ->Args({static_cast<int64_t>(KvDtype::kF16), 1, 1, 4096})   // one decode at depth 4096
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One decode step's matmuls of llama-1b (16 layers of Q/K/V, O, gate/up and down, then the LM
// head), the weights in huge pages as CpuBackend copies them (F16/BF16 in groups of 4 rows, the
// K-quants, Q8_0 and Q4_0 in groups of 16), one token, one matmul after the other with no other op between:
// the stream of a decode step. args: type, what: 0 = the matmuls, iterations alternating
// DecodeChunks::kGuided and kFixed (counters "guided" and "fixed", GB/s; "GB/s" is both), 1 = the
// bandwidth probe's read loop over the same bytes, one pool dispatch per matmul, each thread an
// even share of it (what the stream would reach with no arithmetic and perfectly even threads),
// 2 = the two interleaved iteration by iteration (the probe's loop, then the matmuls with each
// GroupPrefetch in turn, and retuned while decoding, guided chunks), with each stream's GB/s over
// the probe loop's ("X/probe"), 3 = the probe's loop cut at the matmuls (as 1) interleaved with the
// same loop over all the step's bytes in one dispatch ("whole/probe": what the cuts cost):
// on a host whose bandwidth drifts with its other tenants, only an interleaved ratio means anything.
void BM_DecodeStep(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t what = state.range(1);
  const bool grouped = type == GgmlType::kF16 || type == GgmlType::kBF16 || quant_groups_supported(type, 2048);
  if (grouped) {  // rows in groups: the prefetch as the backend chooses it
    static std::once_flag once[kGroupPrefetchSlots];
    std::call_once(once[group_prefetch_slot_or_none(type)], [&] { set_group_prefetch(type, choose_group_prefetch(pool(), type, 2048)); });
  }
  struct Shape {
    int64_t rows, cols;
  };
  std::vector<std::vector<Shape>> calls;
  for (int l = 0; l < 16; ++l) {
    calls.push_back({{2048, 2048}, {512, 2048}, {512, 2048}});
    calls.push_back({{2048, 2048}});
    calls.push_back({{8192, 2048}, {8192, 2048}});
    calls.push_back({{2048, 8192}});
  }
  calls.push_back({{32000, 2048}});
  uint64_t total = 0;
  for (const auto& c : calls) {
    for (const Shape& sh : c) total += ggml_row_size(type, static_cast<uint64_t>(sh.cols)) * static_cast<uint64_t>(sh.rows);
  }
  AnonymousMemory mem(total, AnonymousMemory::Pages::kHuge);
  std::memset(mem.data(), 0, total);  // zero weights: the same work per block as any
  std::vector<std::vector<WeightMatrix>> ws;
  uint64_t off = 0;
  for (const auto& c : calls) {
    ws.emplace_back();
    for (const Shape& sh : c) {
      const uint64_t rb = ggml_row_size(type, static_cast<uint64_t>(sh.cols));
      WeightMatrix w{type, sh.rows, sh.cols, mem.data() + off, rb};
      if (quant_groups_supported(type, sh.cols)) w.row_group = WeightMatrix::kQuantGroup;
      if ((type == GgmlType::kF16 || type == GgmlType::kBF16) && rb % 64 == 0) w.row_group = WeightMatrix::kRowGroup;
      ws.back().push_back(w);
      off += rb * static_cast<uint64_t>(sh.rows);
    }
  }
  std::vector<float> x(8192, 0.5f), y(2 * 32000);
  KernelScratch scratch;
  const GroupPrefetch chosen = grouped ? group_prefetch(type) : GroupPrefetch::kSoftware;
  // The variants the iterations cycle through (what 0: guided, fixed; 1: the probe's loop; 2: the
  // probe's loop, then the matmuls with each GroupPrefetch; 3: the probe's loop cut and whole).
  enum Variant { kGuided, kFixed, kProbe, kPrefetch0 };  // kPrefetch0 + i: kGroupPrefetches[i]; then kRetuned
  constexpr int kRetuned = kPrefetch0 + static_cast<int>(std::size(kGroupPrefetches));  // retuned while decoding
  constexpr int kProbeWhole = kRetuned + 1;
  constexpr int kVariants = kProbeWhole + 1;
  std::vector<int> variants;
  if (what == 0) variants = {kGuided, kFixed};
  if (what == 1) variants = {kProbe};
  if (what == 3) variants = {kProbe, kProbeWhole};
  if (what == 2) {
    variants = {kProbe};
    if (!grouped) variants.push_back(kGuided);
    for (int i = kPrefetch0; grouped && i <= kRetuned; ++i) variants.push_back(i);  // ... and kRetuned
  }
  double secs[kVariants] = {};
  int runs[kVariants] = {};
  std::atomic<uint64_t> sink{0};
  auto probe_loop = [&](const uint8_t* b, uint64_t len) {  // one dispatch, an even share each, cut at 4 KiB
    const auto threads = static_cast<uint64_t>(pool().size());
    pool().run([&](int t) {
      const auto u = static_cast<uint64_t>(t);
      const uint64_t b0 = len * u / threads / 4096 * 4096, b1 = u + 1 == threads ? len : len * (u + 1) / threads / 4096 * 4096;
      sink.fetch_add(sum_words(reinterpret_cast<const uint64_t*>(b + b0), (b1 - b0) / 8), std::memory_order_relaxed);
    });
  };
  size_t iter = 0;
  for (auto _ : state) {
    const int v = variants[iter++ % variants.size()];
    set_decode_chunks(v == kFixed ? DecodeChunks::kFixed : DecodeChunks::kGuided);
    if (v >= kPrefetch0 && v < kRetuned) set_group_prefetch(type, kGroupPrefetches[v - kPrefetch0]);
    if (v == kRetuned) {  // its timings carry over from its last iteration; it starts from the load's choice, as in a model
      set_group_prefetch(type, chosen);
      enable_group_prefetch_retuning(type);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (v == kProbeWhole) probe_loop(static_cast<const uint8_t*>(mem.data()), total);  // all the step's bytes at once
    for (const auto& c : ws) {
      if (v == kProbeWhole) break;
      if (v == kProbe) {
        const auto* b = static_cast<const uint8_t*>(c.front().data);
        probe_loop(b, static_cast<uint64_t>(static_cast<const uint8_t*>(c.back().data) + c.back().rows * c.back().row_bytes - b));
        continue;
      }
      MatmulJob jobs[3];
      float* out = y.data();
      for (size_t j = 0; j < c.size(); ++j) {
        jobs[j] = MatmulJob{&c[j], out};
        out += c[j].rows;
      }
      matmul_multi(std::span<const MatmulJob>(jobs, c.size()), x.data(), 1, pool(), scratch);
    }
    benchmark::ClobberMemory();
    secs[v] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs[v];
  }
  set_decode_chunks(DecodeChunks::kGuided);
  if (grouped) set_group_prefetch(type, chosen);
  const auto gbs = [&](int v) { return static_cast<double>(total) * runs[v] / secs[v] / 1e9; };
  const auto name = [](int v) -> std::string {
    return v == kProbeWhole ? "whole" : v == kRetuned ? "retuned" : v >= kPrefetch0 ? group_prefetch_name(kGroupPrefetches[v - kPrefetch0]) : v == kProbe ? "probe" : v == kFixed ? "fixed" : "guided";
  };
  if (what != 1) {
    for (const int v : variants) state.counters[name(v)] = gbs(v);
  }
  if (what == 2 || what == 3) {  // each variant's stream as a share of the probe loop's, interleaved iteration by iteration
    for (const int v : variants) {
      if (v != kProbe) state.counters[name(v) + "/probe"] = gbs(v) / gbs(kProbe);
    }
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(total) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(ggml_type_name(type)) + " llama-1b step, " +
                 (what == 0 ? "matmuls" : what == 1 ? "probe's loop" : what == 2 ? "probe's loop and matmuls interleaved" : "probe's loop cut at the matmuls and whole") +
                 (grouped ? std::string(", ") + group_prefetch_name(chosen) + " prefetch at load" : std::string()));
}
BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::kF16), static_cast<int64_t>(GgmlType::kBF16), static_cast<int64_t>(GgmlType::kQ8_0),
                    static_cast<int64_t>(GgmlType::kQ4_0), static_cast<int64_t>(GgmlType::kQ2_K), static_cast<int64_t>(GgmlType::kQ3_K), static_cast<int64_t>(GgmlType::kQ4_K), static_cast<int64_t>(GgmlType::kQ5_K),
                    static_cast<int64_t>(GgmlType::kQ6_K)},
                   {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ReadBandwidth(benchmark::State& state) {
  double gbs = 0;
  for (auto _ : state) gbs = measure_read_bandwidth_gbs(pool(), size_t{1} << 30, 3);
  state.counters["GB/s"] = gbs;
}
BENCHMARK(BM_ReadBandwidth)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::cpu

BENCHMARK_MAIN();
