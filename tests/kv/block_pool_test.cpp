// BlockPool (kv/block_pool.h): ids, reference counts, the free list, the LRU queue of cached
// blocks and the eviction order, as vLLM's block pool defines them: a block whose count drops to
// zero is free when it has no hash and cached (at the LRU tail) when it has one; allocation takes a
// free block first and evicts the least recently used cached block only when none is free.
#include <gtest/gtest.h>

#include <set>

#include "kv/block_pool.h"

namespace strata {
namespace {

BlockHash hash_of(uint64_t n) {
  std::vector<TokenId> t{static_cast<TokenId>(n)};
  return chain_block_hash(BlockHash{}, t, 42);
}

TEST(BlockPool, HandsOutEveryIdOnceThenRunsOut) {
  BlockPool p(5);
  EXPECT_EQ(p.num_blocks(), 5);
  EXPECT_EQ(p.num_free(), 5);
  EXPECT_EQ(p.num_used(), 0);
  std::set<BlockId> ids;
  for (int i = 0; i < 5; ++i) {
    auto a = p.allocate();
    ASSERT_TRUE(a.has_value());
    EXPECT_TRUE(a->evicted.empty());
    EXPECT_GE(a->id, 0);
    EXPECT_LT(a->id, 5);
    EXPECT_EQ(p.ref_count(a->id), 1);
    ids.insert(a->id);
  }
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(p.num_used(), 5);
  EXPECT_EQ(p.num_available(), 0);
  EXPECT_FALSE(p.allocate().has_value()) << "running out is normal: nullopt";
  EXPECT_FALSE(p.allocate_plain().has_value());
  p.check_invariants();
  BlockPool empty(0);
  EXPECT_FALSE(empty.allocate().has_value());
}

TEST(BlockPool, ReferenceCountsAndTheFreeList) {
  BlockPool p(3);
  const BlockId a = *p.allocate_plain();
  p.incref(a);
  p.incref(a);
  EXPECT_EQ(p.ref_count(a), 3);
  EXPECT_FALSE(p.decref(a));
  EXPECT_FALSE(p.decref(a));
  EXPECT_EQ(p.num_used(), 1);
  EXPECT_TRUE(p.decref(a)) << "true when the count reaches zero";
  EXPECT_EQ(p.ref_count(a), 0);
  EXPECT_EQ(p.num_free(), 3);
  EXPECT_EQ(p.num_cached(), 0);
  EXPECT_FALSE(p.is_cached(a)) << "no hash: free, not cached";
  // The free list is LIFO: the block just freed is handed out next (it is warm in the caches).
  EXPECT_EQ(*p.allocate_plain(), a);
  p.check_invariants();
}

TEST(BlockPool, HashedBlocksAreCachedAndRevivedByAHit) {
  BlockPool p(3);
  const BlockId a = *p.allocate_plain();
  p.set_hash(a, hash_of(1));
  EXPECT_EQ(p.hash(a), hash_of(1));
  EXPECT_TRUE(p.decref(a));
  EXPECT_TRUE(p.is_cached(a));
  EXPECT_EQ(p.num_cached(), 1);
  EXPECT_EQ(p.num_free(), 2);
  EXPECT_EQ(p.num_available(), 3) << "cached blocks are allocatable";
  EXPECT_EQ(p.num_used(), 0);
  // A prefix-cache hit takes it back out of the LRU queue, hash intact.
  p.incref(a);
  EXPECT_FALSE(p.is_cached(a));
  EXPECT_EQ(p.ref_count(a), 1);
  EXPECT_EQ(p.num_cached(), 0);
  EXPECT_EQ(p.hash(a), hash_of(1));
  p.check_invariants();
  // clear_hash on a cached block moves it to the free list.
  p.decref(a);
  p.clear_hash(a);
  EXPECT_FALSE(p.is_cached(a));
  EXPECT_TRUE(p.hash(a).empty());
  EXPECT_EQ(p.num_free(), 3);
  p.check_invariants();
}

TEST(BlockPool, FreeBlocksGoFirstThenCachedOnesInLruOrder) {
  BlockPool p(4);
  BlockId b[4];
  for (int i = 0; i < 4; ++i) {
    b[i] = *p.allocate_plain();
    p.set_hash(b[i], hash_of(static_cast<uint64_t>(10 + i)));
  }
  // Released in the order 2, 0, 3 (1 stays referenced): the LRU order is 2, 0, 3.
  p.decref(b[2]);
  p.decref(b[0]);
  p.decref(b[3]);
  // A hit on 0 and its release again moves it to the most recently used end: 2, 3, 0.
  p.incref(b[0]);
  p.decref(b[0]);
  // Freeing 1 without a hash puts it on the free list: it is handed out before any cached block.
  p.clear_hash(b[1]);
  p.decref(b[1]);
  auto first = p.allocate();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->id, b[1]);
  EXPECT_TRUE(first->evicted.empty());
  // Then the cached ones, least recently used first, each reporting the hash it loses.
  const BlockId order[3] = {b[2], b[3], b[0]};
  const uint64_t hashes[3] = {12, 13, 10};
  for (int i = 0; i < 3; ++i) {
    auto e = p.allocate();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->id, order[i]) << "eviction " << i;
    EXPECT_EQ(e->evicted, hash_of(hashes[i])) << "eviction " << i;
    EXPECT_TRUE(p.hash(e->id).empty()) << "an evicted block carries no hash";
    EXPECT_EQ(p.ref_count(e->id), 1);
    p.check_invariants();
  }
  EXPECT_FALSE(p.allocate().has_value());
}

TEST(BlockPool, ABlockRelocatedOutOfThePreferredRangeKeepsItsCountHashAndLruPlace) {
  // Ids 0-2 preferred (host slots), 3-5 not (file slots).
  BlockPool p(6, 3);
  BlockId b[3];
  for (int i = 0; i < 3; ++i) {
    b[i] = p.allocate()->id;
    EXPECT_EQ(b[i], i) << "the preferred range first";
    p.set_hash(b[i], hash_of(static_cast<uint64_t>(20 + i)));
  }
  p.decref(b[0]);
  p.decref(b[1]);  // LRU: 0, 1; block 2 stays referenced (count 2)
  p.incref(b[2]);
  // Outside the range: its lowest free id, even while preferred ids are cached.
  auto f = p.allocate_outside_preferred();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->id, 3);
  EXPECT_TRUE(f->evicted.empty());
  // Cached block 0 moves to 3: 3 is cached in 0's LRU place (before 1), 0 is handed out.
  p.relocate(b[0], 3);
  p.check_invariants();
  EXPECT_EQ(p.ref_count(b[0]), 1);
  EXPECT_TRUE(p.hash(b[0]).empty());
  EXPECT_TRUE(p.is_cached(3));
  EXPECT_EQ(p.hash(3), hash_of(20));
  EXPECT_EQ(p.preferred_counts().cached, 1);
  EXPECT_EQ(p.preferred_counts().used, 2);
  // Referenced block 2 moves to 4 with its count.
  auto g = p.allocate_outside_preferred();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->id, 4);
  p.relocate(b[2], 4);
  p.check_invariants();
  EXPECT_EQ(p.ref_count(4), 2);
  EXPECT_EQ(p.hash(4), hash_of(22));
  EXPECT_EQ(p.ref_count(b[2]), 1);
  // Evictions outside the range follow the LRU order 3 (block 0's old place) ...
  auto h = p.allocate_outside_preferred();  // block 5 is still free
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->id, 5);
  auto e = p.allocate_outside_preferred();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->id, 3);
  EXPECT_EQ(e->evicted, hash_of(20));
  // ... and the whole pool's LRU order still starts at block 1 (3 was before it, now taken).
  p.decref(b[0]);  // free (no hash)
  EXPECT_EQ(p.allocate()->id, b[0]);
  auto c = p.allocate();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, b[1]);
  EXPECT_EQ(c->evicted, hash_of(21));
  EXPECT_FALSE(p.allocate_outside_preferred().has_value()) << "nothing free or cached outside the range";
  p.check_invariants();
}

TEST(BlockPool, AllocateOutsidePreferredTakesTheLowestFreeIdAboveTheRangeWhileBothAreFree) {
  BlockPool p(8, 4);
  auto a = p.allocate_outside_preferred();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->id, 4);
  EXPECT_EQ(p.allocate()->id, 0) << "the heap still hands out the preferred range first";
  auto b = p.allocate_outside_preferred();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->id, 5);
  p.check_invariants();
  EXPECT_EQ(p.preferred_counts().free, 3);
}

TEST(BlockPool, ManyOperationsKeepTheInvariants) {
  BlockPool p(16);
  std::vector<BlockId> held;
  uint64_t next_hash = 1;
  uint32_t x = 12345;
  auto rnd = [&] { return x = x * 1664525u + 1013904223u, x >> 8; };
  for (int step = 0; step < 3000; ++step) {
    const uint32_t r = rnd() % 10;
    if (r < 4) {
      auto a = p.allocate();
      if (!a) {
        EXPECT_EQ(p.num_available(), 0);
        continue;
      }
      if (rnd() % 2) p.set_hash(a->id, hash_of(next_hash++));
      held.push_back(a->id);
    } else if (r < 7 && !held.empty()) {
      const size_t i = rnd() % held.size();
      p.decref(held[i]);
      held.erase(held.begin() + static_cast<long>(i));
    } else if (r < 8 && !held.empty()) {
      const BlockId id = held[rnd() % held.size()];
      p.incref(id);
      held.push_back(id);
    } else {
      for (BlockId id = 0; id < p.num_blocks(); ++id) {
        if (!p.is_cached(id)) continue;
        p.incref(id);  // a prefix hit on a cached block
        held.push_back(id);
        break;
      }
    }
    p.check_invariants();
    EXPECT_EQ(p.num_used() + p.num_available(), 16);
  }
}

}  // namespace
}  // namespace strata
