// The CUDA backend's KV block transfers (Backend::kv_blocks_to_host, kv_blocks_to_device,
// copy_to_device_async, transfer_fence, transfer_wait, transfer_stats): a copy stream of their
// own (non-blocking), ordered against the backend's op stream by events, never by host waits.
//
// To the host: the op stream's position is recorded and the copy stream waits for it; one
// gather kernel (cuda::batched_copy) copies every piece of every block (layers x K/V) into a
// device staging buffer, block after block in their own bytes; the op stream then waits only for
// that gather (a few microseconds of HBM traffic), not for the copies down; then one
// cudaMemcpyAsync per run of contiguous destinations moves the staging buffer to the host.
// To the device: one cudaMemcpyAsync per run of contiguous host sources into the staging buffer
// (sources in device memory, a read-ahead area, are read in place), the copy stream waits for the
// op stream's position (the blocks' old content is read by then), one scatter kernel. The op
// stream waits for that scatter at transfer_fence. The staging buffer is bounded: longer lists go
// in chunks (a chunk's copies finish before the next chunk's gather overwrites the buffer: one
// stream).
//
// Counters: bytes of PCIe copies issued each way; seconds between events around each transfer on
// the copy stream (a spill's from after its wait for the op stream; a fetch's include that wait,
// which its host copies overlap); seconds the op stream spent in its waits (events before and
// after each cudaStreamWaitEvent). Finished transfers are retired, and their
// events reused, whenever the object is called.
//
// Thread-safety: as the backend: one thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"

namespace strata::cuda {

class KvTransfer {
 public:
  // `ops`: the backend's op stream. `staging_bytes`: the staging buffer's size (allocated at the
  // first transfer; grown to one block if a block is larger).
  KvTransfer(cudaStream_t ops, uint64_t staging_bytes);
  ~KvTransfer();  // waits for the transfers in flight
  KvTransfer(const KvTransfer&) = delete;
  KvTransfer& operator=(const KvTransfer&) = delete;

  // As Backend's functions of the same names (tickets > 0; 0 for an empty list).
  uint64_t to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks);
  uint64_t to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks);
  uint64_t copy_to_device(std::span<const TransferPiece> pieces);
  void fence(uint64_t ticket);
  void wait(uint64_t ticket);
  TransferStats stats();
  double measure_bandwidth_gbs(bool to_device, uint64_t bytes, int reps);

 private:
  struct Op {
    uint64_t ticket = 0;
    cudaEvent_t start = nullptr, end = nullptr;
    bool to_host = false;
    uint64_t pcie_bytes = 0;  // 0: a device-to-device scatter only (not timed as a transfer)
  };
  struct Wait {
    cudaEvent_t before = nullptr, after = nullptr;
  };
  // Piece lists of the kernels on their way to the device: a few pinned buffers mirrored on the
  // device, used round-robin; a buffer's host side is rewritten only after its last upload is done.
  struct Args {
    CopyPiece* host = nullptr;
    CopyPiece* dev = nullptr;
    size_t cap = 0;
    cudaEvent_t uploaded = nullptr;
    bool pending = false;
  };

  cudaEvent_t event();
  void release(cudaEvent_t e) { free_events_.push_back(e); }
  uint8_t* staging(uint64_t at_least);
  const CopyPiece* upload(const std::vector<CopyPiece>& pieces);
  void ops_wait_for(cudaEvent_t on_copy_stream);  // the op stream waits (device side), timed
  Op begin(bool to_host);
  uint64_t finish(Op op);
  void retire();

  cudaStream_t ops_ = nullptr;
  cudaStream_t copy_ = nullptr;
  uint64_t staging_cap_;
  uint8_t* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;  // allocated
  std::vector<Args> args_;
  size_t next_args_ = 0;
  std::vector<cudaEvent_t> free_events_;
  std::vector<cudaEvent_t> all_events_;
  std::deque<Op> ops_in_flight_;
  std::deque<Wait> waits_;
  uint64_t next_ticket_ = 1, retired_ = 0;
  TransferStats stats_;
};

}  // namespace strata::cuda
