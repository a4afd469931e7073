// KV block transfers against the bus they cross: the pinned host <-> device bandwidth
// (Backend::measure_transfer_bandwidth_gbs), then lists of whole KV blocks (every layer, K and V,
// scattered block ids) moved by Backend::kv_blocks_to_host / kv_blocks_to_device (one gather or
// scatter kernel and one copy per run of contiguous host memory), and the same blocks copied one
// piece (layer x K/V) at a time with synchronous copies, as KvStorage's framed path does. Prints a
// table: GB/s and the share of the pinned bandwidth.
//
//   kv_transfer_bench [--device cuda|cpu] [--blocks 512] [--layers 16] [--kv-heads 8] [--head-dim 64] [--reps 5]
//
// Defaults: llama-1b's KV geometry (16 layers, 8 kv heads, head_dim 64, f16, blocks of 16 tokens:
// 512 KiB a block). Host memory is page-locked (cudaHostAlloc) on a CUDA build.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define KV_BENCH_PINNED 1
#endif

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

uint8_t* host_alloc(size_t n) {
#ifdef KV_BENCH_PINNED
  void* p = nullptr;
  if (cudaHostAlloc(&p, n, cudaHostAllocDefault) == cudaSuccess) return static_cast<uint8_t*>(p);
  (void)cudaGetLastError();
#endif
  return static_cast<uint8_t*>(std::malloc(n));
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cuda";
  int32_t blocks = 512, layers = 16, kv_heads = 8, head_dim = 64, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--device") device = argv[i + 1];
    else if (a == "--blocks") blocks = v;
    else if (a == "--layers") layers = v;
    else if (a == "--kv-heads") kv_heads = v;
    else if (a == "--head-dim") head_dim = v;
    else if (a == "--reps") reps = v;
    else {
      fmt::print(stderr, "unknown flag {}\n", a);
      return 2;
    }
  }
  const auto kind = device_kind_from_name(device);
  if (!kind) {
    fmt::print(stderr, "--device cuda|cpu\n");
    return 2;
  }
  auto be = make_backend(BackendOptions{*kind, 0});
  fmt::print("{}\n", be->description());
  const int32_t arena_blocks = 2 * blocks;  // ids are scattered over twice the blocks moved
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<KvLayerView> views;
  for (int32_t l = 0; l < layers; ++l) {
    KvLayerView v;
    v.dtype = KvDtype::kF16;
    v.block_size = 16;
    v.n_kv_heads = kv_heads;
    v.head_dim = head_dim;
    buffers.push_back(be->allocate(static_cast<uint64_t>(v.block_stride_bytes()) * arena_blocks, MemoryUse::kKvCache));
    v.k = buffers.back()->data();
    buffers.push_back(be->allocate(static_cast<uint64_t>(v.block_stride_bytes()) * arena_blocks, MemoryUse::kKvCache));
    v.v = buffers.back()->data();
    views.push_back(v);
  }
  const uint64_t block_bytes = kv_block_bytes(views, false);
  const uint64_t total = block_bytes * static_cast<uint64_t>(blocks);
  uint8_t* host = host_alloc(total);
  std::memset(host, 1, total);
  std::vector<int32_t> ids(static_cast<size_t>(arena_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  std::vector<KvBlockTransfer> list;
  for (int32_t i = 0; i < blocks; ++i) list.push_back({false, ids[static_cast<size_t>(i)], host + static_cast<uint64_t>(i) * block_bytes});

  const double pcie_d2h = be->measure_transfer_bandwidth_gbs(false, uint64_t{256} << 20, reps);
  const double pcie_h2d = be->measure_transfer_bandwidth_gbs(true, uint64_t{256} << 20, reps);
  auto best_of = [&](auto&& run) {
    run();  // warm-up
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      be->synchronize();
      const auto t0 = Clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return static_cast<double>(total) / best / 1e9;
  };
  const double down = best_of([&] {
    be->transfer_wait(be->kv_blocks_to_host(views, list));
  });
  const double up = best_of([&] {
    const uint64_t t = be->kv_blocks_to_device(views, list);
    be->transfer_fence(t);
    be->synchronize();
  });
  std::vector<KvBlockPiece> pieces;
  const double down_pieces = best_of([&] {
    for (const KvBlockTransfer& b : list) {
      pieces.clear();
      kv_block_pieces(views, false, b.index, pieces);
      uint8_t* p = b.mem;
      for (const KvBlockPiece& c : pieces) {
        be->copy_to_host(p, c.at, static_cast<uint64_t>(c.bytes));
        p += c.bytes;
      }
    }
  });
  const double up_pieces = best_of([&] {
    for (const KvBlockTransfer& b : list) {
      pieces.clear();
      kv_block_pieces(views, false, b.index, pieces);
      const uint8_t* p = b.mem;
      for (const KvBlockPiece& c : pieces) {
        be->copy_to_device(c.at, p, static_cast<uint64_t>(c.bytes));
        p += c.bytes;
      }
    }
  });
  auto share = [](double x, double limit) { return limit > 0 ? fmt::format("{:.0f}%", 100 * x / limit) : std::string("-"); };
  fmt::print("{} blocks of {} KiB ({} layers x K/V pieces of {} KiB), {:.0f} MiB each way, best of {}\n", blocks,
             block_bytes >> 10, layers, (block_bytes / (2 * static_cast<uint64_t>(layers))) >> 10,
             static_cast<double>(total) / (1 << 20), reps);
  fmt::print("| path | to host GB/s | share of pinned | to device GB/s | share of pinned |\n| --- | --- | --- | --- | --- |\n");
  fmt::print("| pinned copy of one buffer (the limit) | {:.1f} | 100% | {:.1f} | 100% |\n", pcie_d2h, pcie_h2d);
  fmt::print("| kv_blocks_to_host / kv_blocks_to_device | {:.1f} | {} | {:.1f} | {} |\n", down, share(down, pcie_d2h), up,
             share(up, pcie_h2d));
  fmt::print("| a synchronous copy per piece | {:.1f} | {} | {:.1f} | {} |\n", down_pieces, share(down_pieces, pcie_d2h),
             up_pieces, share(up_pieces, pcie_h2d));
  return 0;
}
