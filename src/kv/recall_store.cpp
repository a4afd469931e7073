#include "kv/recall_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/error.h"
#include "kv/file_cold_store.h"
#include "core/fp16.h"

namespace strata {

namespace {
float element(const uint8_t* p, KvDtype t) {
  switch (t) {
    case KvDtype::kF32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return fp16_to_f32(h);
    }
    case KvDtype::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return bf16_to_f32(h);
    }
  }
  return 0.0f;
}
}  // namespace

float quest_bound(const float* q, const float* kmin, const float* kmax, int32_t n) {
  float u = 0.0f;
  for (int32_t d = 0; d < n; ++d) u += std::max(q[d] * kmin[d], q[d] * kmax[d]);
  return u;
}

RecallImage::RecallImage(RecallStore* owner, std::shared_ptr<const std::vector<uint8_t>> bytes)
    : owner_(owner), bytes_(std::move(bytes)) {
  owner_->ram_bytes_ += bytes_->size();
}

RecallImage::~RecallImage() {
  if (bytes_ != nullptr) owner_->ram_bytes_ -= bytes_->size();
  if (cold_slot_ >= 0) owner_->free_cold_.push_back(cold_slot_);
}

RecallStore::RecallStore(int32_t n_layer, int32_t block_size, int32_t n_kv_heads, int32_t head_dim, KvDtype dtype,
                         uint64_t max_bytes, std::unique_ptr<ColdStore> cold)
    : n_layer_(n_layer), block_size_(block_size), n_kv_heads_(n_kv_heads), head_dim_(head_dim), dtype_(dtype),
      max_bytes_(max_bytes), cold_(std::move(cold)) {
  STRATA_CHECK(n_layer > 0 && block_size > 0 && n_kv_heads > 0 && head_dim > 0, "recall store geometry");
  token_bytes_ = int64_t{n_kv_heads} * head_dim * kv_dtype_size(dtype);
  block_bytes_ = token_bytes_ * block_size;
  if (cold_ != nullptr) {
    STRATA_CHECK(cold_->slot_bytes() >= static_cast<uint64_t>(2 * block_bytes_ * n_layer_), "recall spill slots too small");
    for (int64_t i = cold_->num_slots() - 1; i >= 0; --i) free_cold_.push_back(i);
  }
}

RecallStore::~RecallStore() {
  seqs_.clear();  // the images give their accounts back while the store is whole
  if (cold_ != nullptr) cold_->drain();
}

void RecallStore::enforce_cap() {
  while (ram_bytes_ > max_bytes_ && !fifo_.empty()) {
    std::shared_ptr<RecallImage> img = fifo_.front().lock();
    fifo_.pop_front();
    if (img == nullptr || img->bytes_ == nullptr) continue;  // gone with its sequences, or already out
    if (cold_ != nullptr && !free_cold_.empty()) {
      img->cold_slot_ = free_cold_.back();
      free_cold_.pop_back();
      cold_->write(img->cold_slot_, std::vector<uint8_t>(*img->bytes_));
      ++counters_.spilled_blocks;
    } else {
      ++counters_.dropped_blocks;
    }
    ram_bytes_ -= img->bytes_->size();
    img->bytes_.reset();
  }
}

std::shared_ptr<const std::vector<uint8_t>> RecallStore::image(SeqId s, int32_t i) {
  RecallImage& img = *block(s, i).image;
  if (img.bytes_ != nullptr) return img.bytes_;
  if (img.cold_slot_ < 0) return nullptr;
  const auto n = static_cast<uint64_t>(2 * block_bytes_ * n_layer_);
  try {
    auto bytes = std::make_shared<const std::vector<uint8_t>>(cold_->wait(cold_->read(img.cold_slot_, n)));
    ++counters_.cold_reads;
    if (bytes->size() == n) return bytes;
  } catch (const Error&) {
  }
  free_cold_.push_back(img.cold_slot_);  // unreadable: the block is dropped
  img.cold_slot_ = -1;
  ++counters_.dropped_blocks;
  return nullptr;
}

void RecallStore::demote(SeqId s, std::span<const KvLayerView> views, std::span<const BlockId> table,
                         std::span<const int32_t> slots, std::span<const int32_t> positions) {
  STRATA_CHECK(static_cast<int32_t>(views.size()) == n_layer_ && positions.size() == slots.size(), "demote: shapes");
  const auto n = static_cast<int64_t>(slots.size());
  std::vector<uint8_t> rows(static_cast<size_t>(2 * n * token_bytes_ * n_layer_));
  uint8_t* out = rows.data();
  for (int32_t l = 0; l < n_layer_; ++l) {
    const KvLayerView& v = views[static_cast<size_t>(l)];
    for (const uint8_t* arena : {v.k, v.v}) {
      for (int32_t slot : slots) {
        STRATA_CHECK(slot >= 0 && static_cast<size_t>(slot / block_size_) < table.size(), "demote: slot {} outside the table", slot);
        const BlockId b = table[static_cast<size_t>(slot / block_size_)];
        STRATA_CHECK(b >= 0 && b < v.n_hot_blocks && v.token_stride_bytes() == token_bytes_, "demote: slot {} is not hot", slot);
        const int64_t row = int64_t{b} * block_size_ + slot % block_size_;
        std::memcpy(out, arena + row * token_bytes_, static_cast<size_t>(token_bytes_));
        out += token_bytes_;
      }
    }
  }
  demote_rows(s, rows.data(), positions);
}

void RecallStore::demote_rows(SeqId s, const uint8_t* rows, std::span<const int32_t> positions) {
  Seq& q = seqs_[s];
  const auto n = static_cast<int64_t>(positions.size());
  for (int64_t i = 0; i < n; ++i) {
    if (q.open.empty()) q.open.assign(static_cast<size_t>(2 * block_bytes_ * n_layer_), 0);
    const auto r = static_cast<int64_t>(q.open_positions.size());
    for (int32_t l = 0; l < n_layer_; ++l) {
      const uint8_t* k = rows + (int64_t{l} * 2 * n + i) * token_bytes_;
      const uint8_t* v = rows + (int64_t{l} * 2 * n + n + i) * token_bytes_;
      uint8_t* dst = q.open.data() + 2 * block_bytes_ * l;
      std::memcpy(dst + r * token_bytes_, k, static_cast<size_t>(token_bytes_));
      std::memcpy(dst + block_bytes_ + r * token_bytes_, v, static_cast<size_t>(token_bytes_));
    }
    q.open_positions.push_back(positions[static_cast<size_t>(i)]);
    if (static_cast<int32_t>(q.open_positions.size()) == block_size_) finish_block(q);
  }
}

void RecallStore::finish_block(Seq& q) {
  RecallBlock b;
  const size_t n = static_cast<size_t>(n_layer_) * n_kv_heads_ * head_dim_;
  b.kmin.assign(n, std::numeric_limits<float>::infinity());
  b.kmax.assign(n, -std::numeric_limits<float>::infinity());
  const int32_t es = kv_dtype_size(dtype_);
  const int32_t row_elems = n_kv_heads_ * head_dim_;
  for (int32_t l = 0; l < n_layer_; ++l) {
    const uint8_t* k = q.open.data() + 2 * block_bytes_ * l;
    float* mn = b.kmin.data() + static_cast<size_t>(l) * row_elems;
    float* mx = b.kmax.data() + static_cast<size_t>(l) * row_elems;
    for (int32_t r = 0; r < block_size_; ++r) {
      for (int32_t e = 0; e < row_elems; ++e) {
        const float x = element(k + r * token_bytes_ + int64_t{e} * es, dtype_);
        mn[e] = std::min(mn[e], x);
        mx[e] = std::max(mx[e], x);
      }
    }
  }
  b.image = std::make_shared<RecallImage>(this, std::make_shared<const std::vector<uint8_t>>(std::move(q.open)));
  fifo_.push_back(b.image);
  b.positions = std::move(q.open_positions);
  q.open = {};
  q.open_positions = {};
  q.blocks.push_back(std::move(b));
  enforce_cap();
}

int32_t RecallStore::num_blocks(SeqId s) const {
  auto it = seqs_.find(s);
  return it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
}

int32_t RecallStore::open_tokens(SeqId s) const {
  auto it = seqs_.find(s);
  return it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.open_positions.size());
}

const RecallBlock& RecallStore::block(SeqId s, int32_t i) const {
  const Seq& q = seqs_.at(s);
  STRATA_CHECK(i >= 0 && static_cast<size_t>(i) < q.blocks.size(), "recall block {} of {}", i, q.blocks.size());
  return q.blocks[static_cast<size_t>(i)];
}

std::vector<float> RecallStore::estimate(SeqId s, std::span<const float> q, int32_t n_head, int32_t k) const {
  STRATA_CHECK(n_head > 0 && n_head % n_kv_heads_ == 0, "estimate: {} heads over {} KV heads", n_head, n_kv_heads_);
  STRATA_CHECK(static_cast<int64_t>(q.size()) == int64_t{n_layer_} * n_head * head_dim_, "estimate: query of {} floats",
               q.size());
  auto it = seqs_.find(s);
  if (it == seqs_.end() || it->second.blocks.empty()) return {};
  const std::vector<RecallBlock>& blocks = it->second.blocks;
  const size_t nb = blocks.size();
  std::vector<float> votes(nb, 0.0f), bound(nb);
  const int32_t group = n_head / n_kv_heads_;
  for (int32_t l = 0; l < n_layer_; ++l) {
    for (int32_t h = 0; h < n_head; ++h) {
      const float* qh = q.data() + (static_cast<size_t>(l) * n_head + h) * head_dim_;
      const size_t off = (static_cast<size_t>(l) * n_kv_heads_ + h / group) * head_dim_;
      for (size_t b = 0; b < nb; ++b) {
        if (!blocks[b].image->available()) {  // dropped: never chosen
          bound[b] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const float* mn = blocks[b].kmin.data() + off;
        const float* mx = blocks[b].kmax.data() + off;
        bound[b] = quest_bound(qh, mn, mx, head_dim_);
      }
      for (int32_t b : top_k(bound, k)) {
        if (bound[static_cast<size_t>(b)] != -std::numeric_limits<float>::infinity()) votes[static_cast<size_t>(b)] += 1.0f;
      }
    }
  }
  return votes;
}

std::vector<int32_t> RecallStore::top_k(std::span<const float> estimate, int32_t k) {
  std::vector<int32_t> order(estimate.size());
  std::iota(order.begin(), order.end(), 0);
  const auto n = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(order.size())));
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(n), order.end(), [&](int32_t a, int32_t b) {
    const float ea = estimate[static_cast<size_t>(a)], eb = estimate[static_cast<size_t>(b)];
    return ea != eb ? ea > eb : a > b;
  });
  order.resize(n);
  return order;
}

void RecallStore::forget_dropped(SeqId s) {
  auto it = seqs_.find(s);
  if (it == seqs_.end()) return;
  for (RecallBlock& b : it->second.blocks) {
    if (!b.image->available() && !b.kmin.empty()) {
      b.kmin = {};
      b.kmax = {};
    }
  }
}

void RecallStore::fork(SeqId parent, SeqId child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return;
  seqs_[child] = it->second;
}

void RecallStore::erase(SeqId s) { seqs_.erase(s); }

uint64_t RecallStore::bytes() const {
  uint64_t n = ram_bytes_;
  for (const auto& [id, q] : seqs_) n += q.open.size();
  return n;
}

std::unique_ptr<ColdStore> make_recall_spill(const KvConfig& cfg, const KvGeometry& geo) {
  if (!cfg.evict.recall || cfg.spill_dir.empty()) return nullptr;
  const uint64_t image = 2 * static_cast<uint64_t>(geo.block_size) * geo.n_kv_heads * geo.head_dim *
                         kv_dtype_size(geo.dtype) * geo.n_layer;
  return std::make_unique<FileColdStore>(cfg.spill_dir, cfg.spill_bytes, image);
}

}  // namespace strata
