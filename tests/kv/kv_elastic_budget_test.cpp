// The elastic budget (--kv-budget auto, KvEvictor::update_elastic): unbounded until the hot pool
// is more than 90% used, then 3/4 of the longest sequence (whole blocks) and shrinking while the
// pressure lasts, never below sinks + recent + the floor; growing back by a quarter below 75% and
// unbounded again once it would cover the whole pool. evict_to thins a sequence to it at once,
// freeing its tail blocks.
#include <gtest/gtest.h>

#include <climits>

#include "core/error.h"
#include "kv/kv_evictor.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"

namespace strata {
namespace {

const KvGeometry kGeo{1, 1, 4, 16, KvDtype::kF32};

KvConfig config(int32_t blocks) {
  KvConfig c;
  c.block_size = kGeo.block_size;
  c.dtype = kGeo.dtype;
  c.num_blocks = blocks;
  return c;
}

EvictConfig auto_config() {
  EvictConfig e;
  e.kind = EvictKind::kH2o;
  e.auto_budget = true;
  e.sinks = 4;
  e.recent = 12;
  e.budget_floor = 16;  // the smallest budget: 4 + 12 + 16 = 32
  e.validate();
  return e;
}

TEST(ElasticBudget, ShrinksUnderPressureToTheFloorAndGrowsBackWhenItFalls) {
  KvStorage storage(kGeo, config(20));
  KvManager kv(kGeo, config(20), storage.capacity(), 1);
  KvEvictor ev(kv, auto_config(), 1, 1, storage.views());
  EXPECT_TRUE(ev.elastic());
  EXPECT_EQ(ev.budget_for(0), INT32_MAX);
  EXPECT_EQ(ev.budget_for(100), 100) << "a request may still lower its own";
  std::vector<TokenId> tokens(400, 3);
  kv.add_sequence(1);
  ASSERT_TRUE(kv.allocate(1, tokens, 288));  // 18 of 20 blocks: 90%, not above
  kv.commit(1, tokens, 288);
  EXPECT_EQ(ev.update_elastic(288), INT32_MAX);
  ASSERT_TRUE(kv.allocate(1, tokens, 289));  // 19 blocks: 95%
  kv.commit(1, tokens, 289);
  EXPECT_EQ(ev.update_elastic(289), 208) << "3/4 of 289, whole blocks";
  EXPECT_EQ(ev.evict_to(1, 289, 1, ev.budget_for(0)), 289 - 208);
  (void)kv.take_ops();
  EXPECT_EQ(kv.num_tokens(1), 208);
  EXPECT_EQ(kv.num_available_blocks(), 20 - 13);
  kv.check_invariants();
  // Still above 90% after someone else takes blocks: it keeps shrinking, down to the floor.
  kv.add_sequence(2);
  ASSERT_TRUE(kv.allocate(2, tokens, 96));  // 6 more: 19 of 20
  EXPECT_EQ(ev.update_elastic(208), 144);
  EXPECT_EQ(ev.update_elastic(208), 96);
  EXPECT_EQ(ev.update_elastic(208), 64);
  EXPECT_EQ(ev.update_elastic(208), 48);
  EXPECT_EQ(ev.update_elastic(208), 32);
  EXPECT_EQ(ev.update_elastic(208), 32) << "never below sinks + recent + floor";
  EXPECT_EQ(ev.elastic_min(), 32);
  // Between 75% and 90%: it stays.
  EXPECT_EQ(ev.evict_to(1, 289, 1, ev.budget_for(0)), 208 - 32);
  (void)kv.take_ops();
  ASSERT_TRUE(kv.allocate(2, tokens, 240));  // 2 + 15 = 17 of 20: 85%
  EXPECT_EQ(ev.update_elastic(240), 32);
  // Below 75%: a quarter more (at least a block) per call, unbounded past the pool.
  kv.free_sequence(2);
  EXPECT_EQ(ev.update_elastic(32), 48);
  EXPECT_EQ(ev.update_elastic(32), 64);
  int32_t b = 64;
  for (int i = 0; i < 20 && b != INT32_MAX; ++i) b = ev.update_elastic(32);
  EXPECT_EQ(b, INT32_MAX);
  EXPECT_EQ(ev.elastic_min(), 32);
  kv.check_invariants();
}

TEST(ElasticBudget, BadConfigurationsAreRefusedNamingTheFlag) {
  EvictConfig e = auto_config();
  e.kind = EvictKind::kNone;
  EXPECT_THROW(
      {
        try {
          e.validate();
        } catch (const Error& x) {
          EXPECT_NE(std::string(x.what()).find("--kv-budget auto needs an eviction policy"), std::string::npos) << x.what();
          throw;
        }
      },
      Error);
  e = auto_config();
  e.budget_floor = 0;
  EXPECT_THROW(e.validate(), Error);
}

}  // namespace
}  // namespace strata
