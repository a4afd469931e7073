// The KV data plane: every KV byte. The hot arena ([blocks][block_size][kv_heads][head_dim] per
// layer, K and V), the warm slots (kv/warm_format.h) and the cold tier below them (a ColdStore made
// by make_cold_store), the layer views attention reads, and the execution of the KvOps a step
// planned (kv/kv_ops.h), with one status per op. It knows nothing of sequences, reference counts
// or the prefix cache (that is KvManager); it only moves bytes where it is told.
//
// Cold slots are framed: an 8-byte checksum of the payload, seeded with the slot and its write
// generation, so torn, garbage or stale content is detected when it is fetched back.
//
// Cold slots in host memory a device copies directly (ColdStore::slot_memory), on a device backend:
// spills and fetches are the backend's KV block transfers (Backend::kv_blocks_to_host /
// kv_blocks_to_device, a copy stream of their own on a GPU), batched over each execute() call,
// not capture()/write()/read(). (On a host backend the store's own write()/read() serve them,
// unless a test routes them through the CPU backend's memcpy transfers: use_host_transfers.) Such a slot holds the payload alone, from its first byte: no checksum.
// Its bytes only ever come from this process's own DMA into memory nothing else writes, so there
// is no torn or foreign content to detect, stale content is ruled out by the write generations
// kept here, and a checksum would cost a host pass over every byte (slower than PCIe) that must
// wait for each copy: the transfers would be synchronous again. On a device backend, reads ahead
// of such slots copy them into a bounded device area steps before the fetch, which is then a
// device-side scatter (on the host the fetch copies from the slot, there is nothing to overlap).
//
// Re-encodes (host backends): execute() encodes a kReencode op spread over the thread pool's
// workers, unless start_reencodes() began it earlier on the storage's encoder thread — right after
// the commit that planned it, while the engine thread samples and emits the step's tokens. Such an
// op reads hot blocks its sequence has just released and writes a warm slot nobody reads yet; no
// KV byte is written between the two calls (every write is an op of execute() or a forward pass,
// which comes after it), so the bytes are those execute() would have encoded, and the next forward
// pass sees the same tables and bytes as without it. execute() first finishes the job (taking the
// layers the encoder thread has not started, then waiting for the ones it has) and skips the ops
// it covered. STRATA_KV_REENCODE_AHEAD=0 turns it off (every re-encode in execute(), as before).
//
// Thread-safety: engine thread only (the cold store does its I/O on its own thread; re-encoding is
// spread over the thread pool's workers inside execute(), or runs on the encoder thread between
// start_reencodes() and the next execute(), which waits for it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/anon_memory.h"
#include "kv/cold_store.h"
#include "kv/kv_arena.h"
#include "kv/kv_config.h"
#include "kv/kv_ops.h"
#include "kv/kv_stats.h"
#include "kv/kv_types.h"
#include "kv/remote_block.h"

namespace strata {

class RemoteKvPool;

class Backend;
class DeviceBuffer;
class ThreadPool;

class KvStorage {
 public:
  // Allocates the pools sized by cfg.resolve_pools(geo) and opens the cold tier (make_cold_store).
  // Memory comes from `backend` (MemoryUse::kKvCache) when given, else from anonymous memory. On a
  // backend whose memory is not host-visible (a GPU), block copies and re-encodes run as its ops
  // (kv_copy_block, kv_warm_encode) and cold-tier traffic goes through copy_to_host/copy_to_device;
  // on the host they are memcpy and warm_encode, spread over `threads` (may be null). The host
  // part of the cold tier (--kv-host-memory) is the backend's MemoryUse::kPinnedHost memory on a
  // device backend, else anonymous memory (what the CPU backend's kPinnedHost is too).
  // Throws strata::Error for impossible sizes or an unusable spill directory.
  KvStorage(const KvGeometry& geo, const KvConfig& cfg, ThreadPool* threads = nullptr, Backend* backend = nullptr);
  // Tensor parallelism (--tensor-parallel N): one arena set per rank, each from its own backend
  // (`rank_backends`, rank order; geo.n_kv_heads is a rank's KV heads), the same block ids in
  // every rank's arenas. views() then holds every rank's layer views, rank after rank, and every
  // op is executed on each rank's bytes (re-encodes too, ahead or not). --kv-memory sizes one
  // rank's pools. The cold tier (and --kv-offload) is refused with N > 1 in this first version
  // (strata::Error).
  KvStorage(const KvGeometry& geo, const KvConfig& cfg, ThreadPool* threads, std::span<Backend* const> rank_backends);
  ~KvStorage();  // waits for the cold tier's queued I/O and a re-encode started ahead
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  const KvCapacity& capacity() const { return cap_; }
  bool has_cold_tier() const { return cold_store_ != nullptr; }
  std::string cold_tier_description() const { return cold_store_ ? cold_store_->describe() : "none"; }

  // What attention reads, one per layer: hot blocks by id, warm sub-blocks by id >= hot_blocks,
  // and with cfg.offload the host slots of the cold tier by id >= KvLayerView::host_base.
  // Under tensor parallelism n_layer per rank, rank after rank ([rank][layer]).
  std::span<const KvLayerView> views() const { return views_; }
  int32_t ranks() const { return ranks_; }

  // Performs `ops` in order and returns one status per op (see KvOpStatus). Never throws for a
  // failed cold read: that op's destination is lost, and so is whatever a later op of the list
  // derives from it (a copy or re-encode of it, a spill of it: the cold slot is then marked bad,
  // so a later fetch of it fails too). Cold reads that no earlier spill of the list writes are
  // issued first (prefetch), so they overlap the rest. Preconditions: slots are in range; a
  // fetch's destination tier is the tier its cold slot's content was spilled from.
  std::vector<KvOpStatus> execute(std::span<const KvOp> ops);

  // Begins, on the encoder thread, the leading kReencode ops of `pending` (KvManager::pending_ops():
  // the ops the next execute() will get, in order), up to the first op of another kind, so that
  // they overlap what the engine thread does until then. Only on a host backend with the warm tier
  // on, KvConfig::reencode_ahead and STRATA_KV_REENCODE_AHEAD not 0; otherwise, or when nothing is pending, it does nothing.
  // Precondition: no KV byte is written until the next execute() (which finishes the job first).
  void start_reencodes(std::span<const KvOp> pending);
  bool reencodes_ahead() const { return ahead_enabled_; }

  // Waits until the cold tier's queued writes and reads are done (tests, shutdown).
  void drain_io();

  // Reads ahead: issues the reads of these cold slots (each with the tier its content came from)
  // now, so that a later execute() fetching them finds the bytes read already. A read ahead is
  // used only while its slot is not written again; reads ahead not asked for again by the next
  // call are dropped. Slots out of range or marked lost are ignored.
  void prefetch(std::span<const std::pair<int32_t, KvTier>> cold);
  int64_t prefetch_hits() const { return prefetch_hits_; }  // fetches served by a read ahead
  // The device transfer engine's totals (bytes over the bus each way, copy-stream seconds, seconds
  // the op stream waited for transfers; Backend::transfer_stats); zero on the host.
  TransferStats device_transfer_stats();
  // KV bytes copied between device and host memory since start, on a backend whose memory is not
  // host-visible (spills and publishes copy down, fetches and remote imports copy up); 0 on the host.
  uint64_t bytes_to_host() const { return bytes_to_host_; }
  uint64_t bytes_to_device() const { return bytes_to_device_; }
  // The cold-tier moves this storage did itself, timed (KvStats::transfer).
  KvTransferStats transfer_stats() const { return transfer_; }

  // Test hook: on a host backend too, host-memory cold slots go through the backend's transfers
  // (the device path's logic, on memcpy). Call before the first execute().
  void use_host_transfers() {
    host_transfers_ = true;
    if (!views_.empty() && views_[0].host != nullptr) set_host_views();  // the slots' layout changes
  }

  // Where kPublish ops send their blocks (kv/remote_pool.h); null (the default) drops them.
  // The pool must outlive this storage's execute() calls.
  void attach_remote(RemoteKvPool* remote) { remote_ = remote; }
  // The format of the blocks this storage exchanges with a remote pool, for a model fingerprint.
  RemoteBlockFormat remote_format(uint64_t model_fingerprint) const;

 private:
  uint64_t slot_bytes(KvTier content) const;
  void set_host_views();  // the host slots in the layer views (--kv-offload)
  uint64_t frame_bytes(KvTier content) const { return kColdHeaderBytes + slot_bytes(content); }
  uint64_t cold_checksum(int32_t cold_slot, const uint8_t* payload, size_t n) const;
  void capture(const KvSlot& ram, std::vector<uint8_t>& out) const;  // appends the slot's bytes
  void restore(const KvSlot& ram, const uint8_t* bytes, size_t n);
  bool read_cold(int32_t cold_slot, KvTier content, uint64_t ticket, std::vector<uint8_t>& bytes);
  // Writes a frame (kColdHeaderBytes, then the payload) to the cold store's slot: the slot becomes
  // good with a new generation, the header its checksum.
  void write_cold(int32_t cold_slot, std::vector<uint8_t> frame);
  void copy_block(BlockId src, BlockId dst);
  void compact(std::span<const KvTokenMove> moves);  // kCompact: token rows, every layer
  void reencode(const KvOp& op);
  // On a device backend, consecutive re-encodes of one execute() list are queued here and issued
  // as one kv_warm_encode_many per layer (a launch per layer instead of one per op and layer)
  // before the next op of another kind and at the end of the list: the stream order is that of
  // the list.
  std::vector<BlockId> reencode_blocks_;
  std::vector<int32_t> reencode_slots_;
  void flush_reencodes();
  void encode_layer(const KvOp& op, int32_t layer);

  // Re-encodes started ahead (start_reencodes): one task per (op, layer), taken in order by the
  // encoder thread and, in finish_ahead(), by the engine thread.
  struct AheadJob {
    std::vector<KvOp> ops;
    int64_t n_tasks = 0;
    std::atomic<int64_t> next{0};  // the next task to take
    std::atomic<int64_t> done{0};  // tasks finished
  };
  bool ahead_enabled_ = false;
  std::thread encoder_;
  std::mutex ahead_mutex_;
  std::condition_variable ahead_cv_;  // a job posted, a job done, or stop
  std::unique_ptr<AheadJob> ahead_job_;   // the job posted (shared with the encoder thread under the mutex)
  bool ahead_posted_ = false;            // the encoder thread has a job to run
  bool ahead_busy_ = false;              // the encoder thread is in run_tasks()
  bool ahead_stop_ = false;
  double ahead_seconds_ = 0;             // encoder thread's seconds (under ahead_mutex_)
  std::vector<KvOp> ahead_done_;         // ops finished ahead, not yet met in execute()
  void run_tasks(AheadJob& job);         // takes and runs tasks until none is left
  void finish_ahead();                   // the engine thread: completes the posted job (timed as blocking)
  void encoder_loop();

  static constexpr uint64_t kColdHeaderBytes = 8;
  static constexpr uint64_t kDeviceReadAheadBytes = uint64_t{64} << 20;  // the device read-ahead area
  KvGeometry geo_;
  WarmFormat warm_format_;
  ThreadPool* threads_;
  Backend* device_;  // the backend when its memory is device memory, else null
  Backend* transfers_;  // the backend (any): it moves blocks to and from host-memory cold slots
  bool host_transfers_ = false;  // use_host_transfers
  KvCapacity cap_;
  int64_t warm_k_slot_bytes_ = 0, warm_v_slot_bytes_ = 0;  // one layer

  // The bytes, per rank: from the rank's backend, or anonymous memory (lazily zeroed) without one.
  int32_t ranks_ = 1;
  std::vector<Backend*> rank_devices_;  // per rank: its backend when its memory is device memory, else null
  Backend* device_of(size_t view) const { return rank_devices_[view / static_cast<size_t>(geo_.n_layer)]; }
  // device_of(view), made current on this thread when there are several (CUDA ranks: its GPU);
  // rebind_rank0() then gives the thread back to rank 0's GPU.
  Backend* bound_device(size_t view) const {
    Backend* b = device_of(view);
    if (ranks_ > 1 && view % static_cast<size_t>(geo_.n_layer) == 0) b->bind_thread();
    return b;
  }
  void rebind_rank0() const {
    if (ranks_ > 1) rank_devices_[0]->bind_thread();
  }
  std::vector<std::unique_ptr<DeviceBuffer>> hot_buffer_, warm_buffer_;
  std::vector<AnonymousMemory> hot_memory_, warm_memory_;
  std::vector<KvLayerView> views_;

  std::unique_ptr<ColdStore> cold_store_;
  std::vector<uint32_t> cold_gen_;  // per cold slot: writes so far (part of the checksum seed)
  std::vector<uint8_t> cold_bad_;   // per cold slot: its content was lost before it was written
  RemoteKvPool* remote_ = nullptr;
  struct ReadAhead {
    uint64_t ticket = 0;
    uint32_t gen = 0;  // cold_gen_ of the slot when issued
    KvTier content = KvTier::kHot;
  };
  std::map<int32_t, ReadAhead> ahead_;  // by cold slot
  mutable uint64_t bytes_to_host_ = 0;  // capture() is const: it only reads the KV
  uint64_t bytes_to_device_ = 0;
  int64_t prefetch_hits_ = 0;
  KvTransferStats transfer_;
  // Adds one cold-tier op's payload bytes and wall time (its scope) to transfer_, unless
  // cancelled (a host-memory slot on a device: the backend times that transfer).
  class ColdTimer {
   public:
    ColdTimer(KvStorage& s, uint64_t bytes);
    ~ColdTimer();
    void cancel() { bytes_ = 0; }

   private:
    KvStorage& s_;
    uint64_t bytes_;
    std::chrono::steady_clock::time_point t0_;
  };
  void drop_read_ahead(int32_t cold_slot);  // waits for it and discards the bytes

  // The device path of host-memory cold slots (see the top of this file).
  uint8_t* host_slot(int32_t cold_slot);  // slot_memory on a device backend, else null
  // Spills and fetches of one execute() waiting to be issued as one transfer each way (spills
  // first); `pending_*` say what they touch, so that an op that depends on one flushes them first.
  struct Batch {
    std::vector<KvBlockTransfer> down, up;
    std::set<std::pair<KvTier, int32_t>> fetched_blocks;  // RAM slots the up list writes
    std::set<int32_t> fetched_slots;                     // cold slots the up list reads
    bool fence_down = false;                             // the down list holds demotions (kDemote)
    bool empty() const { return down.empty() && up.empty(); }
  };
  Batch batch_;
  void flush_transfers();  // issues batch_; the op stream then waits for the fetches (device side)
  uint64_t last_ticket_ = 0;  // the last transfer issued (drain_io waits for it)
  // Reads ahead of host-memory slots: entries of a device area, each a slot's payload.
  struct DeviceReadAhead {
    int32_t entry = 0;
    uint32_t gen = 0;
    KvTier content = KvTier::kHot;
  };
  std::unique_ptr<DeviceBuffer> ahead_area_;
  uint64_t ahead_entry_bytes_ = 0;
  std::vector<int32_t> ahead_free_;                 // free entries
  std::map<int32_t, DeviceReadAhead> device_ahead_;  // by cold slot
  void drop_device_read_ahead(int32_t cold_slot);   // the entry is free again (no wait: one copy stream)
};

}  // namespace strata
