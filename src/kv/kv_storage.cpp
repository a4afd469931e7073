#include "kv/kv_storage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include "backend/backend.h"
#include "core/check.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/remote_pool.h"
#include "kv/warm_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

KvStorage::KvStorage(const KvGeometry& geo, const KvConfig& cfg, ThreadPool* threads, Backend* backend)
    : KvStorage(geo, cfg, threads, backend != nullptr ? std::span<Backend* const>(&backend, 1) : std::span<Backend* const>()) {}

KvStorage::KvStorage(const KvGeometry& geo, const KvConfig& cfg, ThreadPool* threads, std::span<Backend* const> rank_backends)
    : geo_(geo),
      warm_format_(cfg.warm_format),
      threads_(threads),
      device_(!rank_backends.empty() && !rank_backends[0]->host_visible() ? rank_backends[0] : nullptr),
      transfers_(rank_backends.empty() ? nullptr : rank_backends[0]),
      ranks_(std::max<int32_t>(1, static_cast<int32_t>(rank_backends.size()))) {
  STRATA_CHECK(geo.n_layer > 0 && geo.block_size > 0 && geo.block_size == cfg.block_size && geo.dtype == cfg.dtype);
  if (ranks_ > 1 && (cfg.host_bytes > 0 || !cfg.spill_dir.empty() || cfg.offload || cfg.cold_store_factory)) {
    fail("--tensor-parallel {}: the cold KV tier (--kv-host-memory, --kv-spill-dir, --kv-offload) is not supported with "
         "tensor parallelism yet",
         ranks_);
  }
  Backend* const backend = device_ != nullptr ? device_ : transfers_;  // rank 0's (the cold tier's memory)
  const KvConfig::PoolSizes sizes = cfg.resolve_pools(geo);
  cap_.hot_blocks = sizes.hot_blocks;
  cap_.hot_block_bytes = geo.bytes_per_block();
  hot_buffer_.resize(static_cast<size_t>(ranks_));
  warm_buffer_.resize(static_cast<size_t>(ranks_));
  hot_memory_.resize(static_cast<size_t>(ranks_));
  warm_memory_.resize(static_cast<size_t>(ranks_));
  for (int32_t r = 0; r < ranks_; ++r) {
    Backend* b = rank_backends.empty() ? nullptr : rank_backends[static_cast<size_t>(r)];
    rank_devices_.push_back(b != nullptr && !b->host_visible() ? b : nullptr);
  }
  auto allocate = [&](int32_t rank, uint64_t bytes, std::vector<std::unique_ptr<DeviceBuffer>>& buffers,
                      std::vector<AnonymousMemory>& memories) -> uint8_t* {
    const auto r = static_cast<size_t>(rank);
    if (!rank_backends.empty()) {
      rank_backends[r]->bind_thread();  // CUDA ranks: on the rank's GPU
      buffers[r] = rank_backends[r]->allocate(bytes, MemoryUse::kKvCache);
      return buffers[r]->data();
    }
    memories[r] = AnonymousMemory(bytes);
    return memories[r].data();
  };

  // Hot arena: per layer K then V, each [hot_blocks][block_size][kv_heads][head_dim] (as KvArena).
  const uint64_t hot_layer_bytes = geo.bytes_per_block() / (2 * static_cast<uint64_t>(geo.n_layer)) *
                                   static_cast<uint64_t>(sizes.hot_blocks);
  views_.resize(static_cast<size_t>(geo.n_layer) * static_cast<size_t>(ranks_));
  for (int32_t r = 0; r < ranks_; ++r) {
    uint8_t* hot = allocate(r, geo.bytes_per_block() * static_cast<uint64_t>(sizes.hot_blocks), hot_buffer_, hot_memory_);
    for (int32_t l = 0; l < geo.n_layer; ++l) {
      KvLayerView& v = views_[static_cast<size_t>(r * geo.n_layer + l)];
      v.k = hot + static_cast<uint64_t>(l) * 2 * hot_layer_bytes;
      v.v = v.k + hot_layer_bytes;
      v.dtype = geo.dtype;
      v.block_size = geo.block_size;
      v.n_kv_heads = geo.n_kv_heads;
      v.head_dim = geo.head_dim;
    }
  }

  if (cfg.warm_format != WarmFormat::kNone) {
    cap_.warm_slots = sizes.warm_slots;
    cap_.warm_span = warm_span(cfg.warm_format, geo.block_size);
    warm_k_slot_bytes_ = warm_slot_bytes(cfg.warm_format, false, geo.block_size, geo.n_kv_heads, geo.head_dim);
    warm_v_slot_bytes_ = warm_slot_bytes(cfg.warm_format, true, geo.block_size, geo.n_kv_heads, geo.head_dim);
    cap_.warm_slot_bytes = static_cast<uint64_t>(geo.n_layer) * static_cast<uint64_t>(warm_k_slot_bytes_ + warm_v_slot_bytes_);
    const uint64_t layer_bytes = static_cast<uint64_t>(warm_k_slot_bytes_ + warm_v_slot_bytes_) *
                                 static_cast<uint64_t>(sizes.warm_slots);
    for (int32_t r = 0; r < ranks_; ++r) {
      uint8_t* warm = allocate(r, layer_bytes * static_cast<uint64_t>(geo.n_layer), warm_buffer_, warm_memory_);
      for (int32_t l = 0; l < geo.n_layer; ++l) {
        uint8_t* base = warm + layer_bytes * static_cast<uint64_t>(l);
        KvLayerView& v = views_[static_cast<size_t>(r * geo.n_layer + l)];
        v.n_hot_blocks = sizes.hot_blocks;
        v.warm_format = cfg.warm_format;
        v.warm_span = cap_.warm_span;
        v.warm_k = base;
        v.warm_v = base + static_cast<uint64_t>(warm_k_slot_bytes_) * static_cast<uint64_t>(sizes.warm_slots);
        v.warm_k_slot_bytes = warm_k_slot_bytes_;
        v.warm_v_slot_bytes = warm_v_slot_bytes_;
      }
    }
  }

  if (!rank_backends.empty()) rank_backends[0]->bind_thread();
  uint64_t frame = kColdHeaderBytes + std::max(cap_.hot_block_bytes, cap_.warm_slot_bytes);
  // --kv-offload: attention reads blocks in host slots, whose rows must be as aligned as the hot
  // arena's (16-byte loads on a GPU).
  if (cfg.offload) frame = (frame + 255) / 256 * 256;
  HostAllocator host_alloc;  // the host tier in a device backend's pinned memory, else anonymous memory
  if (device_ != nullptr) {
    host_alloc = [backend](uint64_t bytes) {
      std::shared_ptr<DeviceBuffer> buffer = backend->allocate(bytes, MemoryUse::kPinnedHost);
      return HostMemory{buffer->data(), buffer};
    };
  }
  cold_store_ = make_cold_store(cfg, frame, host_alloc);
  if (cold_store_) {
    STRATA_CHECK(cold_store_->slot_bytes() >= frame, "cold store slots too small");
    cap_.cold_slots = static_cast<int32_t>(std::min<int64_t>(cold_store_->num_slots(), int64_t{1} << 30));
    cap_.cold_host_slots = static_cast<int32_t>(std::min<int64_t>(count_host_slots(*cold_store_), cap_.cold_slots));
    cap_.cold_slot_bytes = cold_store_->slot_bytes();
    cold_gen_.assign(static_cast<size_t>(cap_.cold_slots), 0);
    cold_bad_.assign(static_cast<size_t>(cap_.cold_slots), 0);
    if (cfg.offload && cap_.cold_host_slots > 0) set_host_views();
  }
  // Re-encodes ahead (start_reencodes): host backends with a warm tier.
  const char* ahead = std::getenv("STRATA_KV_REENCODE_AHEAD");
  ahead_enabled_ = cfg.reencode_ahead && device_ == nullptr && warm_format_ != WarmFormat::kNone && cap_.warm_slots > 0 &&
                   !(ahead != nullptr && std::string_view(ahead) == "0");
}

void KvStorage::set_host_views() {
  const int32_t n = cap_.cold_host_slots;
  uint8_t* base = cold_store_->slot_memory(0);
  const auto stride = static_cast<int64_t>(cold_store_->slot_bytes());
  STRATA_CHECK(base != nullptr && cold_store_->slot_memory(n - 1) == base + int64_t{n - 1} * stride,
               "the host slots of the cold tier are not one array: attention cannot read them in place");
  // The payload starts after the frame header, except where the backend's block transfers write
  // the slot (a device backend, or the test hook): then from its first byte.
  const int64_t header = host_slot(0) != nullptr ? 0 : static_cast<int64_t>(kColdHeaderBytes);
  const int32_t host_base = cap_.hot_blocks + cap_.warm_slots * cap_.warm_span;
  for (size_t l = 0; l < views_.size(); ++l) {
    KvLayerView& v = views_[l];
    v.host_base = host_base;
    v.host = base;
    v.host_slot_bytes = stride;
    v.host_k_offset = header + static_cast<int64_t>(l) * 2 * v.block_stride_bytes();
    v.host_v_offset = v.host_k_offset + v.block_stride_bytes();
  }
}

KvStorage::~KvStorage() {
  if (encoder_.joinable()) {
    finish_ahead();
    {
      std::lock_guard<std::mutex> lock(ahead_mutex_);
      ahead_stop_ = true;
    }
    ahead_cv_.notify_all();
    encoder_.join();
  }
  drain_io();
}

KvStorage::ColdTimer::ColdTimer(KvStorage& s, uint64_t bytes) : s_(s), bytes_(bytes), t0_(std::chrono::steady_clock::now()) {}
KvStorage::ColdTimer::~ColdTimer() {
  if (bytes_ == 0) return;
  s_.transfer_.cold_bytes += bytes_;
  s_.transfer_.cold_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void KvStorage::drain_io() {
  while (!ahead_.empty()) drop_read_ahead(ahead_.begin()->first);
  while (!device_ahead_.empty()) drop_device_read_ahead(device_ahead_.begin()->first);
  if (transfers_ != nullptr && last_ticket_ != 0) transfers_->transfer_wait(last_ticket_);
  if (cold_store_) cold_store_->drain();
}

TransferStats KvStorage::device_transfer_stats() { return device_ != nullptr ? device_->transfer_stats() : TransferStats{}; }

uint8_t* KvStorage::host_slot(int32_t cold_slot) {
  return transfers_ != nullptr && (device_ != nullptr || host_transfers_) && cold_store_ ? cold_store_->slot_memory(cold_slot)
                                                                                       : nullptr;
}

void KvStorage::drop_device_read_ahead(int32_t cold_slot) {
  auto it = device_ahead_.find(cold_slot);
  if (it == device_ahead_.end()) return;
  ahead_free_.push_back(it->second.entry);
  device_ahead_.erase(it);
}

void KvStorage::flush_transfers() {
  Batch b = std::move(batch_);
  batch_ = Batch{};
  if (!b.down.empty()) {
    last_ticket_ = transfers_->kv_blocks_to_host(views_, b.down);
    // Demoted blocks are read in place by the next forward pass: it waits for their bytes.
    if (b.fence_down) transfers_->transfer_fence(last_ticket_);
  }
  if (!b.up.empty()) {
    last_ticket_ = transfers_->kv_blocks_to_device(views_, b.up);
    transfers_->transfer_fence(last_ticket_);  // the next forward pass (or op) reads the fetched blocks
  }
}

void KvStorage::drop_read_ahead(int32_t cold_slot) {
  auto it = ahead_.find(cold_slot);
  if (it == ahead_.end()) return;
  try {
    (void)cold_store_->wait(it->second.ticket);
  } catch (const Error&) {
  }
  ahead_.erase(it);
}

void KvStorage::prefetch(std::span<const std::pair<int32_t, KvTier>> cold) {
  if (!cold_store_) return;
  std::set<int32_t> wanted;
  std::vector<TransferPiece> device_reads;
  for (const auto& [slot, content] : cold) {
    if (slot < 0 || slot >= cap_.cold_slots || content == KvTier::kCold || cold_bad_[static_cast<size_t>(slot)]) continue;
    wanted.insert(slot);
    if (uint8_t* mem = host_slot(slot)) {  // host memory: into the device area, on the copy stream
      if (device_ == nullptr) continue;  // on the host a fetch copies straight from the slot
      auto it = device_ahead_.find(slot);
      const uint32_t gen = cold_gen_[static_cast<size_t>(slot)];
      if (it != device_ahead_.end() && it->second.gen == gen && it->second.content == content) continue;
      drop_device_read_ahead(slot);
      if (!ahead_area_) {
        ahead_entry_bytes_ = (std::max(cap_.hot_block_bytes, cap_.warm_slot_bytes) + 255) / 256 * 256;
        const int32_t entries = static_cast<int32_t>(std::max<uint64_t>(1, kDeviceReadAheadBytes / ahead_entry_bytes_));
        ahead_area_ = device_->allocate(ahead_entry_bytes_ * static_cast<uint64_t>(entries), MemoryUse::kActivations);
        for (int32_t e = entries - 1; e >= 0; --e) ahead_free_.push_back(e);
      }
      if (ahead_free_.empty()) continue;  // the area is full: this one is fetched from host memory
      const int32_t entry = ahead_free_.back();
      ahead_free_.pop_back();
      device_ahead_[slot] = DeviceReadAhead{entry, gen, content};
      device_reads.push_back({ahead_area_->data() + static_cast<uint64_t>(entry) * ahead_entry_bytes_, mem, slot_bytes(content)});
      bytes_to_device_ += slot_bytes(content);
      continue;
    }
    auto it = ahead_.find(slot);
    const uint32_t gen = cold_gen_[static_cast<size_t>(slot)];
    if (it != ahead_.end() && it->second.gen == gen && it->second.content == content) continue;  // in flight already
    if (it != ahead_.end()) drop_read_ahead(slot);
    ahead_[slot] = ReadAhead{cold_store_->read(slot, frame_bytes(content)), gen, content};
  }
  std::vector<int32_t> stale;
  for (const auto& [slot, r] : ahead_) {
    if (!wanted.count(slot)) stale.push_back(slot);
  }
  for (int32_t slot : stale) drop_read_ahead(slot);
  stale.clear();
  for (const auto& [slot, r] : device_ahead_) {
    if (!wanted.count(slot)) stale.push_back(slot);
  }
  for (int32_t slot : stale) drop_device_read_ahead(slot);
  if (!device_reads.empty()) last_ticket_ = device_->copy_to_device_async(device_reads);
}

RemoteBlockFormat KvStorage::remote_format(uint64_t model_fingerprint) const {
  RemoteBlockFormat f;
  f.model_fingerprint = model_fingerprint;
  f.hot_dtype = geo_.dtype;
  f.block_size = geo_.block_size;
  f.hot_bytes = cap_.hot_block_bytes;
  if (warm_format_ != WarmFormat::kNone && cap_.warm_span == 1) {  // slots of several blocks are not exchanged
    f.warm_format = warm_format_;
    f.warm_bytes = cap_.warm_slot_bytes;
  }
  return f;
}

uint64_t KvStorage::slot_bytes(KvTier content) const {
  STRATA_CHECK(content != KvTier::kCold);
  return content == KvTier::kHot ? cap_.hot_block_bytes : cap_.warm_slot_bytes;
}

void KvStorage::capture(const KvSlot& l, std::vector<uint8_t>& out) const {
  out.reserve(out.size() + static_cast<size_t>(slot_bytes(l.tier)));
  if (device_ != nullptr) {  // device memory: the same pieces, copied down
    auto put = [&](const uint8_t* src, int64_t n) {
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(n));
      device_->copy_to_host(out.data() + at, src, static_cast<uint64_t>(n));
      bytes_to_host_ += static_cast<uint64_t>(n);
    };
    for (const KvLayerView& v : views_) {
      if (l.tier == KvTier::kHot) {
        const int64_t bs = v.block_stride_bytes();
        put(v.k + l.slot * bs, bs);
        put(v.v + l.slot * bs, bs);
      } else {
        put(v.warm_k + l.slot * warm_k_slot_bytes_, warm_k_slot_bytes_);
        put(v.warm_v + l.slot * warm_v_slot_bytes_, warm_v_slot_bytes_);
      }
    }
    return;
  }
  for (const KvLayerView& v : views_) {
    if (l.tier == KvTier::kHot) {
      const int64_t bs = v.block_stride_bytes();
      out.insert(out.end(), v.k + l.slot * bs, v.k + (l.slot + 1) * bs);
      out.insert(out.end(), v.v + l.slot * bs, v.v + (l.slot + 1) * bs);
    } else {
      out.insert(out.end(), v.warm_k + l.slot * warm_k_slot_bytes_, v.warm_k + (l.slot + 1) * warm_k_slot_bytes_);
      out.insert(out.end(), v.warm_v + l.slot * warm_v_slot_bytes_, v.warm_v + (l.slot + 1) * warm_v_slot_bytes_);
    }
  }
}

void KvStorage::restore(const KvSlot& l, const uint8_t* p, size_t n) {
  STRATA_CHECK(n == slot_bytes(l.tier), "cold slot holds {} bytes, expected {}", n, slot_bytes(l.tier));
  if (device_ != nullptr) {
    bytes_to_device_ += n;
    for (const KvLayerView& v : views_) {
      if (l.tier == KvTier::kHot) {
        const int64_t bs = v.block_stride_bytes();
        device_->copy_to_device(v.k + l.slot * bs, p, static_cast<uint64_t>(bs));
        device_->copy_to_device(v.v + l.slot * bs, p + bs, static_cast<uint64_t>(bs));
        p += 2 * bs;
      } else {
        device_->copy_to_device(v.warm_k + l.slot * warm_k_slot_bytes_, p, static_cast<uint64_t>(warm_k_slot_bytes_));
        p += warm_k_slot_bytes_;
        device_->copy_to_device(v.warm_v + l.slot * warm_v_slot_bytes_, p, static_cast<uint64_t>(warm_v_slot_bytes_));
        p += warm_v_slot_bytes_;
      }
    }
    return;
  }
  for (const KvLayerView& v : views_) {
    if (l.tier == KvTier::kHot) {
      const int64_t bs = v.block_stride_bytes();
      std::memcpy(v.k + l.slot * bs, p, static_cast<size_t>(bs));
      std::memcpy(v.v + l.slot * bs, p + bs, static_cast<size_t>(bs));
      p += 2 * bs;
    } else {
      std::memcpy(v.warm_k + l.slot * warm_k_slot_bytes_, p, static_cast<size_t>(warm_k_slot_bytes_));
      p += warm_k_slot_bytes_;
      std::memcpy(v.warm_v + l.slot * warm_v_slot_bytes_, p, static_cast<size_t>(warm_v_slot_bytes_));
      p += warm_v_slot_bytes_;
    }
  }
}

uint64_t KvStorage::cold_checksum(int32_t cold_slot, const uint8_t* payload, size_t n) const {
  const uint64_t seed = (static_cast<uint64_t>(cold_slot) << 32) | cold_gen_[static_cast<size_t>(cold_slot)];
  return XXH3_64bits_withSeed(payload, n, seed);
}

void KvStorage::write_cold(int32_t cold, std::vector<uint8_t> frame) {
  cold_bad_[static_cast<size_t>(cold)] = 0;
  ++cold_gen_[static_cast<size_t>(cold)];
  const uint64_t sum = cold_checksum(cold, frame.data() + kColdHeaderBytes, frame.size() - kColdHeaderBytes);
  std::memcpy(frame.data(), &sum, kColdHeaderBytes);
  cold_store_->write(cold, std::move(frame));
}

bool KvStorage::read_cold(int32_t cold, KvTier content, uint64_t ticket, std::vector<uint8_t>& bytes) {
  if (ticket == 0) ticket = cold_store_->read(cold, frame_bytes(content));
  try {
    bytes = cold_store_->wait(ticket);
  } catch (const Error&) {
    return false;  // an I/O error of this read: the content is lost, the store goes on
  }
  if (bytes.size() != frame_bytes(content)) return false;
  uint64_t stored;
  std::memcpy(&stored, bytes.data(), kColdHeaderBytes);
  return stored == cold_checksum(cold, bytes.data() + kColdHeaderBytes, bytes.size() - kColdHeaderBytes);
}

void KvStorage::copy_block(BlockId src, BlockId dst) {
  if (device_ != nullptr) {
    for (size_t i = 0; i < views_.size(); ++i) bound_device(i)->kv_copy_block(views_[i], src, dst);
    rebind_rank0();
    return;
  }
  for (const KvLayerView& v : views_) {
    const int64_t bs = v.block_stride_bytes();
    std::memcpy(v.k + dst * bs, v.k + src * bs, static_cast<size_t>(bs));
    std::memcpy(v.v + dst * bs, v.v + src * bs, static_cast<size_t>(bs));
  }
}

void KvStorage::compact(std::span<const KvTokenMove> moves) {
  if (device_ != nullptr) {  // a kernel per layer, queued before the next forward pass
    std::vector<int32_t> src(moves.size()), dst(moves.size());
    for (size_t i = 0; i < moves.size(); ++i) {
      src[i] = moves[i].src_block * geo_.block_size + moves[i].src_slot;
      dst[i] = moves[i].dst_block * geo_.block_size + moves[i].dst_slot;
    }
    for (size_t i = 0; i < views_.size(); ++i) bound_device(i)->kv_move_rows(views_[i], src, dst);
    rebind_rank0();
    return;
  }
  for (const KvLayerView& v : views_) {
    const int64_t ts = v.token_stride_bytes(), bs = v.block_stride_bytes();
    for (const KvTokenMove& m : moves) {
      const int64_t src = m.src_block * bs + m.src_slot * ts, dst = m.dst_block * bs + m.dst_slot * ts;
      std::memcpy(v.k + dst, v.k + src, static_cast<size_t>(ts));
      std::memcpy(v.v + dst, v.v + src, static_cast<size_t>(ts));
    }
  }
}

// `layer`: an index of views_ (every rank's layers under tensor parallelism).
void KvStorage::encode_layer(const KvOp& op, int32_t layer) {
  const KvLayerView& v = views_[static_cast<size_t>(layer)];
  warm_encode(warm_format_, v, op.hot.data(), cap_.warm_span, v.warm_k + op.dst.slot * warm_k_slot_bytes_,
              v.warm_v + op.dst.slot * warm_v_slot_bytes_);
}

// On the host (a device backend's re-encodes go through flush_reencodes).
void KvStorage::reencode(const KvOp& op) {
  STRATA_CHECK(static_cast<int32_t>(op.hot.size()) == cap_.warm_span && op.dst.tier == KvTier::kWarm);
  STRATA_CHECK(device_ == nullptr, "a device backend's re-encodes are batched (flush_reencodes)");
  if (threads_ != nullptr && threads_->size() > 1) {
    // Every layer view: under tensor parallelism each rank's (a rank encodes its own heads).
    threads_->parallel_for(static_cast<int64_t>(views_.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l) encode_layer(op, static_cast<int32_t>(l));
    });
  } else {
    for (size_t l = 0; l < views_.size(); ++l) encode_layer(op, static_cast<int32_t>(l));
  }
}

void KvStorage::flush_reencodes() {
  if (reencode_slots_.empty()) return;
  for (size_t i = 0; i < views_.size(); ++i) {
    bound_device(i)->kv_warm_encode_many(warm_format_, views_[i], reencode_blocks_, reencode_slots_);
  }
  rebind_rank0();
  reencode_blocks_.clear();
  reencode_slots_.clear();
}

void KvStorage::run_tasks(AheadJob& job) {
  for (int64_t t = job.next.fetch_add(1); t < job.n_tasks; t = job.next.fetch_add(1)) {
    const auto n_views = static_cast<int64_t>(views_.size());  // every rank's layers
    encode_layer(job.ops[static_cast<size_t>(t / n_views)], static_cast<int32_t>(t % n_views));
    if (job.done.fetch_add(1) + 1 == job.n_tasks) {
      std::lock_guard<std::mutex> lock(ahead_mutex_);  // so that a waiter cannot miss the notification
      ahead_cv_.notify_all();
    }
  }
}

void KvStorage::encoder_loop() {
  std::unique_lock<std::mutex> lock(ahead_mutex_);
  for (;;) {
    ahead_cv_.wait(lock, [&] { return ahead_stop_ || ahead_posted_; });
    if (ahead_stop_) return;
    ahead_posted_ = false;
    ahead_busy_ = true;  // finish_ahead() keeps the job alive until this thread has left it
    AheadJob* job = ahead_job_.get();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    run_tasks(*job);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    ahead_seconds_ += dt;
    ahead_busy_ = false;
    ahead_cv_.notify_all();
  }
}

void KvStorage::start_reencodes(std::span<const KvOp> pending) {
  if (!ahead_enabled_) return;
  finish_ahead();  // a job not yet met by an execute() (none in the step protocol)
  auto job = std::make_unique<AheadJob>();
  for (const KvOp& op : pending) {
    if (op.kind != KvOp::Kind::kReencode) break;  // a later op may write what a re-encode reads
    // Two ops into one warm slot would race (none in practice: a slot is freed only after commits).
    const bool again = std::any_of(job->ops.begin(), job->ops.end(), [&](const KvOp& o) { return o.dst == op.dst; });
    if (again) break;
    STRATA_CHECK(static_cast<int32_t>(op.hot.size()) == cap_.warm_span && op.dst.tier == KvTier::kWarm);
    job->ops.push_back(op);
  }
  if (job->ops.empty()) return;
  job->n_tasks = static_cast<int64_t>(job->ops.size()) * static_cast<int64_t>(views_.size());
  if (!encoder_.joinable()) encoder_ = std::thread([this] { encoder_loop(); });
  {
    std::lock_guard<std::mutex> lock(ahead_mutex_);
    ahead_job_ = std::move(job);
    ahead_posted_ = true;
  }
  ahead_cv_.notify_all();
}

void KvStorage::finish_ahead() {
  if (!ahead_job_) return;
  const auto t0 = std::chrono::steady_clock::now();
  AheadJob& job = *ahead_job_;
  run_tasks(job);  // the layers the encoder thread has not started
  {
    std::unique_lock<std::mutex> lock(ahead_mutex_);
    // Every task done, and the encoder thread out of the job (or it never took it: then it never will).
    ahead_cv_.wait(lock, [&] { return job.done.load() == job.n_tasks && !ahead_busy_; });
    ahead_posted_ = false;
    transfer_.reencode_ahead_seconds = ahead_seconds_;
  }
  for (KvOp& op : job.ops) ahead_done_.push_back(std::move(op));
  ahead_job_.reset();
  transfer_.reencode_blocking_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<KvOpStatus> KvStorage::execute(std::span<const KvOp> ops) {
  std::vector<KvOpStatus> status(ops.size(), KvOpStatus::kOk);
  finish_ahead();  // re-encodes started ahead read and write nothing after this
  if (ops.empty()) {
    ahead_done_.clear();
    return status;
  }
  // Prefetch: issue every cold read whose slot no earlier spill of this list writes (those must
  // wait for the write to be queued: the store keeps submission order per slot).
  std::vector<uint64_t> tickets(ops.size(), 0);
  if (cold_store_) {
    std::set<int32_t> written;
    for (size_t i = 0; i < ops.size(); ++i) {
      const KvOp& op = ops[i];
      if (op.kind == KvOp::Kind::kSpill || op.kind == KvOp::Kind::kDemote || op.kind == KvOp::Kind::kMigrate) {
        written.insert(op.dst.slot);
      }
      if (op.kind == KvOp::Kind::kFetch && !written.count(op.src.slot) && !cold_bad_[static_cast<size_t>(op.src.slot)] &&
          host_slot(op.src.slot) == nullptr) {
        auto a = ahead_.find(op.src.slot);
        if (a != ahead_.end() && a->second.gen == cold_gen_[static_cast<size_t>(op.src.slot)] && a->second.content == op.dst.tier) {
          tickets[i] = a->second.ticket;  // read ahead in an earlier step
          ahead_.erase(a);
          ++prefetch_hits_;
        } else {
          if (a != ahead_.end()) drop_read_ahead(op.src.slot);
          tickets[i] = cold_store_->read(op.src.slot, frame_bytes(op.dst.tier));
        }
      }
    }
  }
  // RAM slots whose content is lost in this list: failed fetches, and what was derived from them.
  std::set<std::pair<KvTier, int32_t>> lost;
  auto is_lost = [&](const KvSlot& l) { return !lost.empty() && lost.count({l.tier, l.slot}) > 0; };
  for (size_t i = 0; i < ops.size(); ++i) {
    const KvOp& op = ops[i];
    // Device transfers of host-memory slots wait in batch_ until an op that may depend on them
    // (every other kind; a spill of a block the batch fetches, or into a slot it fetches from; a
    // second fetch into one block) or the end of the list. Spills go first: a fetch may follow a
    // spill of its block or of its slot in the same batch.
    const bool demote = op.kind == KvOp::Kind::kDemote;
    const bool spill = (op.kind == KvOp::Kind::kSpill || demote) && host_slot(op.dst.slot) != nullptr;
    const bool fetch = op.kind == KvOp::Kind::kFetch && host_slot(op.src.slot) != nullptr;
    if (op.kind != KvOp::Kind::kReencode) flush_reencodes();
    if (!batch_.empty() &&
        ((!spill && !fetch) ||
         (spill && (batch_.fetched_blocks.count({op.src.tier, op.src.slot}) || batch_.fetched_slots.count(op.dst.slot))) ||
         (fetch && batch_.fetched_blocks.count({op.dst.tier, op.dst.slot})))) {
      flush_transfers();
    }
    switch (op.kind) {
      case KvOp::Kind::kCopy:
        STRATA_CHECK(op.src.tier == KvTier::kHot && op.dst.tier == KvTier::kHot, "copy of non-hot blocks");
        copy_block(op.src.slot, op.dst.slot);
        if (is_lost(op.src)) status[i] = KvOpStatus::kSourceLost;
        break;
      case KvOp::Kind::kReencode: {
        ++transfer_.reencode_ops;
        auto ahead = std::find(ahead_done_.begin(), ahead_done_.end(), op);
        if (ahead != ahead_done_.end()) {  // encoded ahead, from the same bytes (start_reencodes)
          ahead_done_.erase(ahead);
          ++transfer_.reencode_ops_ahead;
        } else if (device_ != nullptr) {  // issued with the list's next re-encodes (flush_reencodes)
          STRATA_CHECK(static_cast<int32_t>(op.hot.size()) == cap_.warm_span && op.dst.tier == KvTier::kWarm);
          reencode_blocks_.insert(reencode_blocks_.end(), op.hot.begin(), op.hot.end());
          reencode_slots_.push_back(op.dst.slot);
        } else {
          const auto t0 = std::chrono::steady_clock::now();
          reencode(op);
          transfer_.reencode_blocking_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        for (BlockId b : op.hot) {
          if (is_lost(KvSlot{KvTier::kHot, b})) status[i] = KvOpStatus::kSourceLost;
        }
        break;
      }
      case KvOp::Kind::kDemote:
        STRATA_CHECK(cold_store_ && op.src.tier == KvTier::kHot && op.dst.slot < cap_.cold_host_slots && !views_.empty() &&
                         views_[0].host != nullptr,
                     "bad demote");
        [[fallthrough]];
      case KvOp::Kind::kSpill: {
        STRATA_CHECK(cold_store_ && op.dst.tier == KvTier::kCold && op.src.tier != KvTier::kCold, "bad spill");
        ColdTimer timer(*this, slot_bytes(op.src.tier));
        const size_t cold = static_cast<size_t>(op.dst.slot);
        if (is_lost(op.src)) {
          cold_bad_[cold] = 1;  // nothing worth writing: the cold copy is lost too
          status[i] = KvOpStatus::kSourceLost;
          break;
        }
        drop_read_ahead(op.dst.slot);  // about to be overwritten
        drop_device_read_ahead(op.dst.slot);
        if (uint8_t* mem = host_slot(op.dst.slot)) {
          timer.cancel();
          batch_.down.push_back({op.src.tier == KvTier::kWarm, op.src.slot, mem});
          batch_.fence_down = batch_.fence_down || demote;  // attention reads the slot next
          cold_bad_[cold] = 0;
          ++cold_gen_[cold];
          if (device_ != nullptr) bytes_to_host_ += slot_bytes(op.src.tier);
          break;
        }
        std::vector<uint8_t> bytes(kColdHeaderBytes);
        capture(op.src, bytes);
        write_cold(op.dst.slot, std::move(bytes));
        break;
      }
      case KvOp::Kind::kFetch: {
        STRATA_CHECK(cold_store_ && op.src.tier == KvTier::kCold && op.dst.tier != KvTier::kCold, "bad fetch");
        ColdTimer timer(*this, slot_bytes(op.dst.tier));
        if (cold_bad_[static_cast<size_t>(op.src.slot)]) {
          if (tickets[i] != 0) {
            try {
              (void)cold_store_->wait(tickets[i]);
            } catch (const Error&) {
            }
          }
          status[i] = KvOpStatus::kSourceLost;
        } else if (uint8_t* mem = host_slot(op.src.slot)) {
          timer.cancel();
          auto a = device_ahead_.find(op.src.slot);
          if (a != device_ahead_.end() && a->second.gen == cold_gen_[static_cast<size_t>(op.src.slot)] &&
              a->second.content == op.dst.tier) {
            mem = ahead_area_->data() + static_cast<uint64_t>(a->second.entry) * ahead_entry_bytes_;  // read ahead
            ++prefetch_hits_;
          } else if (device_ != nullptr) {
            bytes_to_device_ += slot_bytes(op.dst.tier);
          }
          drop_device_read_ahead(op.src.slot);  // the entry's next copy is ordered after this one's scatter
          batch_.up.push_back({op.dst.tier == KvTier::kWarm, op.dst.slot, mem});
          batch_.fetched_blocks.insert({op.dst.tier, op.dst.slot});
          batch_.fetched_slots.insert(op.src.slot);
        } else {
          std::vector<uint8_t> bytes;
          if (read_cold(op.src.slot, op.dst.tier, tickets[i], bytes)) {
            restore(op.dst, bytes.data() + kColdHeaderBytes, bytes.size() - kColdHeaderBytes);
          } else {
            status[i] = KvOpStatus::kReadFailed;
          }
        }
        break;
      }
      case KvOp::Kind::kMigrate: {
        // A host slot's block to a file slot: its payload, framed for the file slot, written by the
        // file store's I/O thread; the host slot is free for the next op once this returns.
        STRATA_CHECK(cold_store_ && op.src.tier == KvTier::kCold && op.dst.tier == KvTier::kCold &&
                         op.content != KvTier::kCold && op.src.slot < cap_.cold_host_slots &&
                         op.dst.slot >= cap_.cold_host_slots,
                     "bad migrate");
        const auto src = static_cast<size_t>(op.src.slot), dst = static_cast<size_t>(op.dst.slot);
        drop_read_ahead(op.dst.slot);  // about to be overwritten
        if (cold_bad_[src]) {
          cold_bad_[dst] = 1;
          status[i] = KvOpStatus::kSourceLost;
          break;
        }
        const uint64_t n = slot_bytes(op.content);
        std::vector<uint8_t> bytes;
        bool ok = true;
        if (const uint8_t* mem = host_slot(op.src.slot)) {
          // The payload alone, written by the backend's transfers (the batch before this op was
          // issued above): wait for them before reading it here.
          if (last_ticket_ != 0) transfers_->transfer_wait(last_ticket_);
          bytes.resize(static_cast<size_t>(kColdHeaderBytes + n));
          std::memcpy(bytes.data() + kColdHeaderBytes, mem, static_cast<size_t>(n));
        } else {
          uint64_t ticket = 0;
          auto a = ahead_.find(op.src.slot);
          if (a != ahead_.end() && a->second.gen == cold_gen_[src] && a->second.content == op.content) {
            ticket = a->second.ticket;  // read ahead: the same bytes
            ahead_.erase(a);
          }
          ok = read_cold(op.src.slot, op.content, ticket, bytes);  // checks the host frame's checksum
        }
        if (!ok) {
          cold_bad_[dst] = 1;
          status[i] = KvOpStatus::kReadFailed;
          break;
        }
        write_cold(op.dst.slot, std::move(bytes));
        break;
      }
      case KvOp::Kind::kLoad:
        STRATA_CHECK(op.dst.tier != KvTier::kCold && op.bytes != nullptr, "bad load");
        if (op.bytes->size() == slot_bytes(op.dst.tier)) {
          restore(op.dst, op.bytes->data(), op.bytes->size());
        } else {
          status[i] = KvOpStatus::kReadFailed;
        }
        break;
      case KvOp::Kind::kPublish:
        STRATA_CHECK(op.src.tier != KvTier::kCold, "bad publish");
        if (is_lost(op.src)) {
          status[i] = KvOpStatus::kSourceLost;
        } else if (remote_ != nullptr) {
          std::vector<uint8_t> bytes;
          capture(op.src, bytes);
          remote_->publish(op.hash, op.src.tier, std::move(bytes));
        }
        continue;  // nothing here was written
      case KvOp::Kind::kCompact:
        compact(op.moves);
        for (const KvTokenMove& m : op.moves) {
          if (is_lost(KvSlot{KvTier::kHot, m.src_block})) status[i] = KvOpStatus::kSourceLost;
        }
        if (status[i] != KvOpStatus::kOk) {
          for (const KvTokenMove& m : op.moves) lost.insert({KvTier::kHot, m.dst_block});
        }
        continue;  // its destinations are the moves'
    }
    if (status[i] != KvOpStatus::kOk) lost.insert({op.dst.tier, op.dst.slot});
  }
  flush_reencodes();
  if (!batch_.empty()) flush_transfers();
  ahead_done_.clear();  // re-encodes started ahead whose op was dropped (KvManager::free_sequence)
  return status;
}

}  // namespace strata
