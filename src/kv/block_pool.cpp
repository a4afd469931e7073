#include "kv/block_pool.h"

#include <algorithm>
#include <functional>

#include "core/check.h"

namespace strata {

BlockPool::BlockPool(int32_t num_blocks, int32_t preferred) : blocks_(static_cast<size_t>(num_blocks)), preferred_(preferred) {
  STRATA_CHECK(num_blocks >= 0 && preferred >= 0 && preferred <= num_blocks);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Highest id first, so that the LIFO list hands out 0 first; a preferred range makes it a heap.
  for (BlockId id = num_blocks - 1; id >= 0; --id) {
    free_.push_back(id);
    blocks_[idx(id)].in_free = true;
  }
  if (preferred_ > 0) {
    std::make_heap(free_.begin(), free_.end(), std::greater<BlockId>());
    free_preferred_ = preferred_;
  }
}

void BlockPool::free_push(BlockId id) {
  blocks_[idx(id)].in_free = true;
  free_.push_back(id);
  if (preferred_ > 0) {
    std::push_heap(free_.begin(), free_.end(), std::greater<BlockId>());
    if (id < preferred_) ++free_preferred_;
  }
}

BlockId BlockPool::free_pop() {
  if (preferred_ > 0) std::pop_heap(free_.begin(), free_.end(), std::greater<BlockId>());
  const BlockId id = free_.back();
  free_.pop_back();
  blocks_[idx(id)].in_free = false;
  if (preferred_ > 0 && id < preferred_) --free_preferred_;
  return id;
}

std::optional<BlockPool::Allocation> BlockPool::allocate() {
  if (!free_.empty()) return take(free_pop(), false);
  if (lru_head_ >= 0) return take(lru_head_, true);
  return std::nullopt;
}

std::optional<BlockPool::Allocation> BlockPool::allocate_preferred() {
  if (free_preferred_ > 0) {
    const BlockId id = free_pop();  // the heap's minimum is a preferred id while any is free
    STRATA_CHECK(id < preferred_);
    return take(id, false);
  }
  if (cached_preferred_ > 0) {
    for (int32_t id = lru_head_; id >= 0; id = blocks_[idx(id)].next) {
      if (id < preferred_) return take(id, true);
    }
  }
  return std::nullopt;
}

std::optional<BlockPool::Allocation> BlockPool::allocate_outside_preferred() {
  if (num_free() > free_preferred_) {
    if (free_preferred_ == 0) return take(free_pop(), false);  // the heap's minimum is outside the range
    // Both kinds are free: the lowest free id outside the range, out of the heap.
    auto it = free_.end();
    for (auto f = free_.begin(); f != free_.end(); ++f) {
      if (*f >= preferred_ && (it == free_.end() || *f < *it)) it = f;
    }
    STRATA_CHECK(it != free_.end());
    const BlockId id = *it;
    *it = free_.back();
    free_.pop_back();
    if (preferred_ > 0) std::make_heap(free_.begin(), free_.end(), std::greater<BlockId>());
    blocks_[idx(id)].in_free = false;
    return take(id, false);
  }
  for (int32_t id = lru_head_; id >= 0; id = blocks_[idx(id)].next) {
    if (id >= preferred_) return take(id, true);
  }
  return std::nullopt;
}

void BlockPool::relocate(BlockId from, BlockId to) {
  STRATA_CHECK(from >= 0 && from < num_blocks() && to >= 0 && to < num_blocks() && from != to, "relocate {} -> {}", from, to);
  Meta& f = blocks_[idx(from)];
  Meta& t = blocks_[idx(to)];
  STRATA_CHECK(t.ref_count == 1 && t.hash.empty() && !t.in_lru && !t.in_free, "relocate into block {}: not just allocated", to);
  STRATA_CHECK(!f.in_free && (f.ref_count > 0 || f.in_lru), "relocate of free block {}", from);
  t.ref_count = f.ref_count;
  t.hash = f.hash;
  if (f.in_lru) {  // `to` takes `from`'s place in the queue
    t.prev = f.prev;
    t.next = f.next;
    t.in_lru = true;
    if (f.prev >= 0) blocks_[idx(f.prev)].next = to;
    else lru_head_ = to;
    if (f.next >= 0) blocks_[idx(f.next)].prev = to;
    else lru_tail_ = to;
    f.prev = f.next = -1;
    f.in_lru = false;
    if (from < preferred_) --cached_preferred_;
    if (to < preferred_) ++cached_preferred_;
  }
  f.ref_count = 1;
  f.hash = {};
}

BlockPool::Allocation BlockPool::take(BlockId id, bool cached) {
  Allocation a{id, {}};
  if (cached) {
    lru_remove(id);
    a.evicted = blocks_[idx(id)].hash;
    blocks_[idx(id)].hash = {};
  }
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(m.ref_count == 0);
  m.ref_count = 1;
  return a;
}

std::optional<BlockId> BlockPool::allocate_plain() {
  auto a = allocate();
  if (!a) return std::nullopt;
  STRATA_CHECK(a->evicted.empty(), "a cached block was evicted by a caller that keeps no prefix cache");
  return a->id;
}

void BlockPool::incref(BlockId id) {
  STRATA_CHECK(id >= 0 && id < num_blocks(), "block id {} out of range", id);
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(!m.in_free, "incref of free block {}", id);
  if (m.in_lru) lru_remove(id);
  ++m.ref_count;
}

bool BlockPool::decref(BlockId id) {
  STRATA_CHECK(id >= 0 && id < num_blocks(), "block id {} out of range", id);
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(m.ref_count > 0, "decref of unreferenced block {}", id);
  if (--m.ref_count > 0) return false;
  if (!m.hash.empty()) {
    lru_push_back(id);
  } else {
    free_push(id);
  }
  return true;
}

void BlockPool::set_hash(BlockId id, const BlockHash& h) {
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(m.ref_count > 0, "set_hash on unreferenced block {}", id);
  m.hash = h;
}

void BlockPool::clear_hash(BlockId id) {
  Meta& m = blocks_[idx(id)];
  m.hash = {};
  if (m.in_lru) {
    lru_remove(id);
    free_push(id);
  }
}

void BlockPool::lru_push_back(BlockId id) {
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(!m.in_lru && !m.in_free);
  m.prev = lru_tail_;
  m.next = -1;
  if (lru_tail_ >= 0) blocks_[idx(lru_tail_)].next = id;
  else lru_head_ = id;
  lru_tail_ = id;
  m.in_lru = true;
  ++num_cached_;
  if (id < preferred_) ++cached_preferred_;
}

void BlockPool::lru_remove(BlockId id) {
  Meta& m = blocks_[idx(id)];
  STRATA_CHECK(m.in_lru);
  if (m.prev >= 0) blocks_[idx(m.prev)].next = m.next;
  else lru_head_ = m.next;
  if (m.next >= 0) blocks_[idx(m.next)].prev = m.prev;
  else lru_tail_ = m.prev;
  m.prev = m.next = -1;
  m.in_lru = false;
  --num_cached_;
  if (id < preferred_) --cached_preferred_;
}

void BlockPool::check_invariants() const {
  int32_t free_count = 0, lru_count = 0, used = 0, free_pref = 0, cached_pref = 0;
  for (BlockId id = 0; id < num_blocks(); ++id) {
    const Meta& m = blocks_[idx(id)];
    if (id < preferred_) {
      free_pref += m.in_free;
      cached_pref += m.in_lru;
    }
    STRATA_CHECK(!(m.in_free && m.in_lru), "block {} is both free and cached", id);
    if (m.in_free) {
      ++free_count;
      STRATA_CHECK(m.ref_count == 0 && m.hash.empty(), "free block {} has count {} or a hash", id, m.ref_count);
    } else if (m.in_lru) {
      ++lru_count;
      STRATA_CHECK(m.ref_count == 0 && !m.hash.empty(), "cached block {} has count {} or no hash", id, m.ref_count);
    } else {
      ++used;
      STRATA_CHECK(m.ref_count > 0, "block {} is in no list but has count 0", id);
    }
  }
  STRATA_CHECK(free_count == num_free(), "free list has {} entries, {} blocks are marked free", num_free(), free_count);
  STRATA_CHECK(lru_count == num_cached_, "LRU count {} != {} marked", num_cached_, lru_count);
  int32_t walked = 0;
  int32_t prev = -1;
  for (int32_t id = lru_head_; id >= 0; id = blocks_[idx(id)].next) {
    STRATA_CHECK(blocks_[idx(id)].prev == prev, "LRU links broken at {}", id);
    prev = id;
    STRATA_CHECK(++walked <= num_blocks(), "LRU queue has a cycle");
  }
  STRATA_CHECK(walked == num_cached_ && prev == lru_tail_, "LRU walk found {} of {}", walked, num_cached_);
  STRATA_CHECK(free_count + lru_count + used == num_blocks());
  STRATA_CHECK(free_pref == free_preferred_ && cached_pref == cached_preferred_,
               "preferred range: {} free and {} cached counted, {} and {} marked", free_preferred_, cached_preferred_,
               free_pref, cached_pref);
  if (preferred_ > 0) STRATA_CHECK(std::is_heap(free_.begin(), free_.end(), std::greater<BlockId>()), "free heap broken");
}

}  // namespace strata
