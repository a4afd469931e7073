#include "backend/cuda/kv_transfer.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace strata::cuda {

namespace {

constexpr size_t kArgBuffers = 4;

// Whether `p` is device memory (a read-ahead area) rather than host memory of any kind.
bool device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// False while the event's work is pending; throws on an error of that work.
bool event_done(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error of anyone's
    return false;
  }
  STRATA_CUDA(r);
  return true;
}

// Consecutive copies whose both sides continue the previous one's become one (the slots of one
// host tier buffer). Adjacent addresses may still belong to two allocations, over which the
// runtime refuses one copy of page-locked memory (cudaErrorInvalidValue): such a run is then
// copied part by part (copy_run).
struct Run {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t bytes;
  std::vector<uint64_t> parts;  // the sizes of the copies it joins
};
void add_run(std::vector<Run>& runs, uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  if (!runs.empty() && runs.back().dst + runs.back().bytes == dst && runs.back().src + runs.back().bytes == src) {
    runs.back().bytes += bytes;
    runs.back().parts.push_back(bytes);
  } else {
    runs.push_back({dst, src, bytes, {bytes}});
  }
}
void copy_run(const Run& r, cudaMemcpyKind kind, cudaStream_t s) {
  const cudaError_t e = cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, s);
  if (e != cudaErrorInvalidValue || r.parts.size() == 1) {
    STRATA_CUDA(e);
    return;
  }
  (void)cudaGetLastError();  // not sticky: clear it, then one copy per part
  uint64_t at = 0;
  for (uint64_t n : r.parts) {
    STRATA_CUDA(cudaMemcpyAsync(r.dst + at, r.src + at, n, kind, s));
    at += n;
  }
}

}  // namespace

KvTransfer::KvTransfer(cudaStream_t ops, uint64_t staging_bytes) : ops_(ops), staging_cap_(staging_bytes) {
  STRATA_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  args_.resize(kArgBuffers);
}

KvTransfer::~KvTransfer() {
  if (copy_) (void)cudaStreamSynchronize(copy_);
  if (ops_) (void)cudaStreamSynchronize(ops_);
  for (Args& a : args_) {
    if (a.host) (void)cudaFreeHost(a.host);
    if (a.dev) (void)cudaFree(a.dev);
    if (a.uploaded) (void)cudaEventDestroy(a.uploaded);
  }
  for (cudaEvent_t e : all_events_) (void)cudaEventDestroy(e);
  if (staging_) (void)cudaFree(staging_);
  if (copy_) (void)cudaStreamDestroy(copy_);
}

cudaEvent_t KvTransfer::event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  STRATA_CUDA(cudaEventCreate(&e));  // with timing: transfers and waits are measured
  all_events_.push_back(e);
  return e;
}

uint8_t* KvTransfer::staging(uint64_t at_least) {
  const uint64_t want = std::max(staging_cap_, at_least);
  if (staging_ == nullptr || staging_bytes_ < at_least) {
    STRATA_CUDA(cudaStreamSynchronize(copy_));  // copies in flight may use the old buffer
    if (staging_) STRATA_CUDA(cudaFree(staging_));
    staging_ = nullptr;
    void* p = nullptr;
    STRATA_CUDA(cudaMalloc(&p, want));
    staging_ = static_cast<uint8_t*>(p);
    staging_bytes_ = want;
  }
  return staging_;
}

const CopyPiece* KvTransfer::upload(const std::vector<CopyPiece>& pieces) {
  Args& a = args_[next_args_];
  next_args_ = (next_args_ + 1) % args_.size();
  if (a.pending) {
    STRATA_CUDA(cudaEventSynchronize(a.uploaded));  // long done in practice: kArgBuffers transfers ago
    a.pending = false;
  }
  if (a.cap < pieces.size()) {
    STRATA_CUDA(cudaStreamSynchronize(copy_));  // a kernel may still read the device side
    if (a.host) STRATA_CUDA(cudaFreeHost(a.host));
    if (a.dev) STRATA_CUDA(cudaFree(a.dev));
    a.host = nullptr;
    a.dev = nullptr;
    const size_t cap = std::max<size_t>(pieces.size(), std::max<size_t>(2 * a.cap, 1024));
    void* h = nullptr;
    void* d = nullptr;
    STRATA_CUDA(cudaHostAlloc(&h, cap * sizeof(CopyPiece), cudaHostAllocDefault));
    a.host = static_cast<CopyPiece*>(h);
    STRATA_CUDA(cudaMalloc(&d, cap * sizeof(CopyPiece)));
    a.dev = static_cast<CopyPiece*>(d);
    a.cap = cap;
    if (!a.uploaded) STRATA_CUDA(cudaEventCreateWithFlags(&a.uploaded, cudaEventDisableTiming));
  }
  std::memcpy(a.host, pieces.data(), pieces.size() * sizeof(CopyPiece));
  STRATA_CUDA(cudaMemcpyAsync(a.dev, a.host, pieces.size() * sizeof(CopyPiece), cudaMemcpyHostToDevice, copy_));
  STRATA_CUDA(cudaEventRecord(a.uploaded, copy_));
  a.pending = true;
  return a.dev;
}

void KvTransfer::ops_wait_for(cudaEvent_t on_copy_stream) {
  Wait w{event(), event()};
  STRATA_CUDA(cudaEventRecord(w.before, ops_));
  STRATA_CUDA(cudaStreamWaitEvent(ops_, on_copy_stream, 0));
  STRATA_CUDA(cudaEventRecord(w.after, ops_));
  waits_.push_back(w);
}

KvTransfer::Op KvTransfer::begin(bool to_host) {
  retire();
  Op op;
  op.ticket = next_ticket_++;
  op.to_host = to_host;
  op.start = event();
  op.end = event();
  return op;
}

uint64_t KvTransfer::finish(Op op) {
  STRATA_CUDA(cudaEventRecord(op.end, copy_));
  (op.to_host ? stats_.bytes_to_host : stats_.bytes_to_device) += op.pcie_bytes;
  ops_in_flight_.push_back(op);
  return op.ticket;
}

uint64_t KvTransfer::to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  if (blocks.empty()) return 0;
  uint64_t largest = 0;
  for (const KvBlockTransfer& b : blocks) largest = std::max(largest, kv_block_bytes(layers, b.warm));
  uint8_t* stage = staging(largest);
  Op op = begin(true);
  // The gather reads what every op issued so far leaves in the blocks.
  cudaEvent_t ready = event();
  STRATA_CUDA(cudaEventRecord(ready, ops_));
  STRATA_CUDA(cudaStreamWaitEvent(copy_, ready, 0));
  release(ready);  // a wait takes the event's state when it is issued: the event may be recorded again
  STRATA_CUDA(cudaEventRecord(op.start, copy_));
  std::vector<KvBlockPiece> block_pieces;
  std::vector<CopyPiece> pieces;
  std::vector<Run> runs;
  for (size_t i = 0; i < blocks.size();) {
    pieces.clear();
    runs.clear();
    uint64_t off = 0;
    size_t j = i;
    for (; j < blocks.size(); ++j) {
      const KvBlockTransfer& b = blocks[j];
      const uint64_t n = kv_block_bytes(layers, b.warm);
      if (off + n > staging_bytes_) break;  // never for the chunk's first block: the buffer holds the largest
      block_pieces.clear();
      kv_block_pieces(layers, b.warm, b.index, block_pieces);
      uint64_t at = off;
      for (const KvBlockPiece& p : block_pieces) {
        pieces.push_back({p.at, stage + at, static_cast<uint64_t>(p.bytes)});
        at += static_cast<uint64_t>(p.bytes);
      }
      add_run(runs, b.mem, stage + off, n);
      off += n;
    }
    if (!pieces.empty()) batched_copy(upload(pieces), static_cast<int64_t>(pieces.size()), copy_);
    if (j == blocks.size()) {  // every block read: the op stream may overwrite them from here on
      cudaEvent_t gathered = event();
      STRATA_CUDA(cudaEventRecord(gathered, copy_));
      ops_wait_for(gathered);
      release(gathered);
    }
    for (const Run& r : runs) copy_run(r, cudaMemcpyDeviceToHost, copy_);
    op.pcie_bytes += off;
    i = j;
  }
  return finish(op);
}

uint64_t KvTransfer::to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  if (blocks.empty()) return 0;
  uint64_t largest = 0;
  std::vector<uint8_t> on_device(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    on_device[i] = device_memory(blocks[i].mem);
    if (!on_device[i]) largest = std::max(largest, kv_block_bytes(layers, blocks[i].warm));
  }
  uint8_t* stage = largest > 0 ? staging(largest) : nullptr;
  Op op = begin(false);
  cudaEvent_t ready = event();  // the op stream's position: the blocks' old content is read by then
  STRATA_CUDA(cudaEventRecord(ready, ops_));
  STRATA_CUDA(cudaEventRecord(op.start, copy_));
  bool waited = false;
  std::vector<KvBlockPiece> block_pieces;
  std::vector<CopyPiece> pieces;
  std::vector<Run> runs;
  for (size_t i = 0; i < blocks.size();) {
    pieces.clear();
    runs.clear();
    uint64_t off = 0;
    size_t j = i;
    for (; j < blocks.size(); ++j) {
      const KvBlockTransfer& b = blocks[j];
      const uint64_t n = kv_block_bytes(layers, b.warm);
      const uint8_t* src = b.mem;
      if (!on_device[j]) {
        if (off + n > staging_bytes_) break;
        add_run(runs, stage + off, b.mem, n);
        src = stage + off;
        off += n;
      }
      block_pieces.clear();
      kv_block_pieces(layers, b.warm, b.index, block_pieces);
      for (const KvBlockPiece& p : block_pieces) {
        pieces.push_back({src, p.at, static_cast<uint64_t>(p.bytes)});
        src += p.bytes;
      }
    }
    for (const Run& r : runs) copy_run(r, cudaMemcpyHostToDevice, copy_);
    if (!waited) {
      STRATA_CUDA(cudaStreamWaitEvent(copy_, ready, 0));
      waited = true;
    }
    if (!pieces.empty()) batched_copy(upload(pieces), static_cast<int64_t>(pieces.size()), copy_);
    op.pcie_bytes += off;
    i = j;
  }
  release(ready);
  return finish(op);
}

uint64_t KvTransfer::copy_to_device(std::span<const TransferPiece> pieces) {
  if (pieces.empty()) return 0;
  Op op = begin(false);
  STRATA_CUDA(cudaEventRecord(op.start, copy_));
  std::vector<Run> runs;
  for (const TransferPiece& p : pieces) {
    add_run(runs, static_cast<uint8_t*>(p.dst), static_cast<const uint8_t*>(p.src), p.bytes);
    op.pcie_bytes += p.bytes;
  }
  for (const Run& r : runs) copy_run(r, cudaMemcpyHostToDevice, copy_);
  return finish(op);
}

void KvTransfer::fence(uint64_t ticket) {
  retire();
  if (ticket == 0 || ticket <= retired_) return;
  for (const Op& o : ops_in_flight_) {
    if (o.ticket >= ticket) {  // one stream: done with it means done with every earlier one
      ops_wait_for(o.end);
      return;
    }
  }
  STRATA_CHECK(false, "transfer_fence: unknown ticket {}", ticket);
}

void KvTransfer::wait(uint64_t ticket) {
  retire();
  if (ticket == 0 || ticket <= retired_) return;
  for (const Op& o : ops_in_flight_) {
    if (o.ticket >= ticket) {
      STRATA_CUDA(cudaEventSynchronize(o.end));
      retire();
      return;
    }
  }
  STRATA_CHECK(false, "transfer_wait: unknown ticket {}", ticket);
}

void KvTransfer::retire() {
  while (!ops_in_flight_.empty() && event_done(ops_in_flight_.front().end)) {
    const Op& o = ops_in_flight_.front();
    if (o.pcie_bytes > 0) {
      float ms = 0;
      STRATA_CUDA(cudaEventElapsedTime(&ms, o.start, o.end));
      (o.to_host ? stats_.seconds_to_host : stats_.seconds_to_device) += static_cast<double>(ms) * 1e-3;
    }
    retired_ = o.ticket;
    release(o.start);
    release(o.end);
    ops_in_flight_.pop_front();
  }
  while (!waits_.empty() && event_done(waits_.front().after)) {
    const Wait& w = waits_.front();
    float ms = 0;
    STRATA_CUDA(cudaEventElapsedTime(&ms, w.before, w.after));
    stats_.compute_wait_seconds += static_cast<double>(ms) * 1e-3;
    release(w.before);
    release(w.after);
    waits_.pop_front();
  }
}

TransferStats KvTransfer::stats() {
  retire();
  return stats_;
}

double KvTransfer::measure_bandwidth_gbs(bool to_device, uint64_t bytes, int reps) {
  bytes = std::max<uint64_t>(bytes, 1 << 20);
  STRATA_CUDA(cudaStreamSynchronize(copy_));
  void* host = nullptr;
  void* dev = nullptr;
  STRATA_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  const cudaError_t e = cudaMalloc(&dev, bytes);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(host);
    STRATA_CUDA(e);
  }
  std::memset(host, 0x5a, bytes);  // touch every page before timing
  const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  void* dst = to_device ? dev : host;
  const void* src = to_device ? host : dev;
  cudaEvent_t start = event(), stop = event();
  double best = 0;
  try {
    STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, copy_));  // warm-up
    for (int r = 0; r < std::max(reps, 1); ++r) {
      STRATA_CUDA(cudaEventRecord(start, copy_));
      STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, copy_));
      STRATA_CUDA(cudaEventRecord(stop, copy_));
      STRATA_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      STRATA_CUDA(cudaEventElapsedTime(&ms, start, stop));
      if (ms > 0) best = std::max(best, static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9);
    }
  } catch (...) {
    (void)cudaStreamSynchronize(copy_);
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
    throw;
  }
  release(start);
  release(stop);
  (void)cudaFreeHost(host);
  (void)cudaFree(dev);
  return best;
}

}  // namespace strata::cuda
