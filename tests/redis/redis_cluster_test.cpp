// redis/redis_cluster on a real 3-master Redis Cluster: keys spread over every node and read back,
// key slots equal to CLUSTER KEYSLOT, MOVED after a slot migration (a client with a stale map),
// ASK during one, and a dead or paused node whose keys fail alone, within the deadline.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "redis/crc16.h"
#include "redis/redis_client.h"
#include "redis/redis_cluster.h"
#include "support/redis_process.h"

namespace strata::redis {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using test::RedisClusterProcess;

steady_clock::time_point in(milliseconds ms) { return steady_clock::now() + ms; }

std::unique_ptr<RedisCluster> cluster_client(const RedisClusterProcess& c) {
  return std::make_unique<RedisCluster>(RedisUrl::parse(c.url()), milliseconds(1000));
}

std::unique_ptr<RedisClient> node_client(test::RedisServerProcess& n) {
  return RedisClient::make(RedisUrl::parse(n.url()), milliseconds(1000));
}

std::string run(RedisClient& c, std::vector<std::string> argv) { return c.command(argv, in(milliseconds(5000))); }

std::vector<std::pair<std::string, std::string>> make_items(const std::string& prefix, int n) {
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < n; ++i) items.emplace_back(fmt::format("{}:{}", prefix, i), fmt::format("value-{}-{}", prefix, i));
  return items;
}

std::vector<std::string> keys_of(const std::vector<std::pair<std::string, std::string>>& items) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : items) keys.push_back(k);
  return keys;
}

TEST(RedisClusterRedirect, Parse) {
  auto r = parse_redirect("MOVED 3999 127.0.0.1:6381", "h");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ask);
  EXPECT_EQ(r->slot, 3999);
  EXPECT_EQ(r->endpoint, (RedisEndpoint{"127.0.0.1", 6381}));
  r = parse_redirect("ASK 0 [::1]:7000", "h");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->ask);
  EXPECT_EQ(r->endpoint, (RedisEndpoint{"::1", 7000}));
  r = parse_redirect("MOVED 16383 :7001", "10.0.0.1");  // unknown endpoint: the answering node's host
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->endpoint, (RedisEndpoint{"10.0.0.1", 7001}));
  EXPECT_FALSE(parse_redirect("MOVED 16384 h:1", "h"));
  EXPECT_FALSE(parse_redirect("MOVED x h:1", "h"));
  EXPECT_FALSE(parse_redirect("MOVED 1 h", "h"));
  EXPECT_FALSE(parse_redirect("WRONGTYPE Operation against a key", "h"));
  EXPECT_FALSE(parse_redirect("CLUSTERDOWN The cluster is down", "h"));
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_REDIS();
    if (!cluster_) cluster_ = std::make_unique<RedisClusterProcess>(3);
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  static std::unique_ptr<RedisClusterProcess> cluster_;
};

std::unique_ptr<RedisClusterProcess> RedisClusterTest::cluster_;

TEST_F(RedisClusterTest, KeysSpreadOverEveryNodeAndReadBack) {
  auto c = cluster_client(*cluster_);
  c->ping(in(milliseconds(5000)));
  EXPECT_EQ(c->describe(), cluster_->url());
  auto items = make_items("spread", 300);
  items.emplace_back(std::string("bin\0{x}\xff", 8), std::string("\0\r\n", 3));
  const std::vector<bool> stored = c->set_nx_many(items, milliseconds(0), in(milliseconds(5000)));
  EXPECT_EQ(std::count(stored.begin(), stored.end(), true), static_cast<long>(items.size()));
  EXPECT_EQ(c->failed_keys(), 0u);
  // NX across nodes.
  EXPECT_EQ(c->set_nx_many(items, milliseconds(0), in(milliseconds(5000))), std::vector<bool>(items.size(), false));

  std::vector<std::string> keys = keys_of(items);
  keys.push_back("spread:missing");
  const auto got = c->get_many(keys, in(milliseconds(5000)));
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(got[i], items[i].second) << keys[i];
  EXPECT_EQ(got.back(), std::nullopt);
  EXPECT_EQ(c->failed_keys(), 0u);

  // Every node holds some of the keys, and each key lives on the node the client routed it to.
  std::map<std::string, int> per_node;
  for (int n = 0; n < cluster_->size(); ++n) {
    auto nc = node_client(cluster_->node(n));
    EXPECT_GT(std::stoi(run(*nc, {"DBSIZE"})), 0) << "node " << n;
    for (size_t i = 0; i < 30; ++i) {
      const std::string& k = items[i].first;
      if (c->slot_owner(key_slot(k)) == cluster_->node(n).address()) {
        EXPECT_EQ(run(*nc, {"EXISTS", k}), "1") << k;
        ++per_node[cluster_->node(n).address()];
      }
    }
  }
  EXPECT_EQ(per_node.size(), 3u);
  EXPECT_EQ(c->redirects(), 0u);
}

TEST_F(RedisClusterTest, KeySlotsMatchTheServer) {
  auto nc = node_client(cluster_->node(0));
  std::vector<std::string> keys{"foo", "bar", "{user1000}.following", "{user1000}.followers", "a{}b",
                                "{}", "{", "}", "x{y}z{w}", std::string("nul\0key", 7), ""};
  for (int i = 0; i < 200; ++i) keys.push_back(fmt::format("k{}:{}", i, i * 7919));
  for (const std::string& k : keys) {
    EXPECT_EQ(std::to_string(key_slot(k)), run(*nc, {"CLUSTER", "KEYSLOT", k})) << k;
  }
}

TEST_F(RedisClusterTest, MovedAndAskAcrossASlotMigration) {
  const std::string a_key = "{mig}a";
  const std::string b_key = "{mig}b";
  const uint16_t slot = key_slot(a_key);
  auto writer = cluster_client(*cluster_);
  const std::vector<std::pair<std::string, std::string>> items{{a_key, "A"}, {b_key, "B"}};
  ASSERT_EQ(writer->set_nx_many(items, milliseconds(0), in(milliseconds(5000))), (std::vector<bool>{true, true}));

  // Two clients that know the map from before the migration.
  auto during = cluster_client(*cluster_);
  auto after = cluster_client(*cluster_);
  during->ping(in(milliseconds(5000)));
  after->ping(in(milliseconds(5000)));

  int src = -1;
  for (int n = 0; n < cluster_->size(); ++n) {
    if (cluster_->node(n).address() == during->slot_owner(slot)) src = n;
  }
  ASSERT_GE(src, 0) << during->slot_owner(slot);
  const int dst = (src + 1) % cluster_->size();
  auto src_c = node_client(cluster_->node(src));
  auto dst_c = node_client(cluster_->node(dst));
  const std::string src_id = run(*src_c, {"CLUSTER", "MYID"});
  const std::string dst_id = run(*dst_c, {"CLUSTER", "MYID"});
  const std::string s = std::to_string(slot);

  EXPECT_EQ(run(*dst_c, {"CLUSTER", "SETSLOT", s, "IMPORTING", src_id}), "OK");
  EXPECT_EQ(run(*src_c, {"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id}), "OK");
  EXPECT_EQ(run(*src_c, {"MIGRATE", "127.0.0.1", std::to_string(cluster_->node(dst).port()), a_key, "0", "5000"}),
            "OK");

  // ASK: a_key is on dst now, b_key still on src; the map is left alone.
  const std::vector<std::string> keys{a_key, b_key, "{mig}c"};
  auto got = during->get_many(keys, in(milliseconds(5000)));
  EXPECT_EQ(got[0], "A");
  EXPECT_EQ(got[1], "B");
  EXPECT_EQ(got[2], std::nullopt);
  EXPECT_GE(during->redirects(), 2u);  // a_key and the missing {mig}c were asked on dst
  EXPECT_EQ(during->slot_owner(slot), cluster_->node(src).address());
  // A new key of a migrating slot is written on the importing node (through ASK).
  const std::vector<std::pair<std::string, std::string>> c_item{{"{mig}c", "C"}};
  EXPECT_EQ(during->set_nx_many(c_item, milliseconds(0), in(milliseconds(5000))), std::vector<bool>{true});
  EXPECT_EQ(run(*dst_c, {"CLUSTER", "COUNTKEYSINSLOT", s}), "2");  // a_key and {mig}c
  EXPECT_EQ(run(*src_c, {"CLUSTER", "COUNTKEYSINSLOT", s}), "1");  // b_key
  got = during->get_many(keys, in(milliseconds(5000)));
  EXPECT_EQ(got[2], "C");
  EXPECT_EQ(during->failed_keys(), 0u);

  // Finish: move b_key too and give the slot to dst on every node.
  EXPECT_EQ(run(*src_c, {"MIGRATE", "127.0.0.1", std::to_string(cluster_->node(dst).port()), b_key, "0", "5000"}),
            "OK");
  for (int n = 0; n < cluster_->size(); ++n) {
    auto nc = node_client(cluster_->node(n));
    EXPECT_EQ(run(*nc, {"CLUSTER", "SETSLOT", s, "NODE", dst_id}), "OK");
  }

  // MOVED: the stale client reads and writes through the new owner and learns the map.
  const size_t refreshes = after->map_refreshes();
  got = after->get_many(keys, in(milliseconds(5000)));
  EXPECT_EQ(got[0], "A");
  EXPECT_EQ(got[1], "B");
  EXPECT_EQ(got[2], "C");
  EXPECT_EQ(after->failed_keys(), 0u);
  EXPECT_EQ(after->slot_owner(slot), cluster_->node(dst).address());
  EXPECT_GT(after->map_refreshes(), refreshes);
  const size_t redirects = after->redirects();
  EXPECT_GE(redirects, 1u);
  const std::vector<std::pair<std::string, std::string>> d_item{{"{mig}d", "D"}};
  EXPECT_EQ(after->set_nx_many(d_item, milliseconds(0), in(milliseconds(5000))), std::vector<bool>{true});
  EXPECT_EQ(after->get_many(keys, in(milliseconds(5000)))[0], "A");
  EXPECT_EQ(after->redirects(), redirects);  // no more redirects once the map is right
  EXPECT_EQ(run(*dst_c, {"EXISTS", "{mig}d"}), "1");

  // The client that followed ASK gets MOVED now and catches up too.
  got = during->get_many(keys, in(milliseconds(5000)));
  EXPECT_EQ(got[1], "B");
  EXPECT_EQ(during->slot_owner(slot), cluster_->node(dst).address());
  // command() follows redirects as well.
  EXPECT_EQ(run(*during, {"GET", b_key}), "B");
}

TEST_F(RedisClusterTest, ErrorReplyThrows) {
  auto c = cluster_client(*cluster_);
  run(*c, {"LPUSH", "listkey", "x"});
  const std::vector<std::string> keys{"listkey", "other"};
  try {
    c->get_many(keys, in(milliseconds(5000)));
    FAIL();
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kReply);
    EXPECT_NE(std::string(e.what()).find("WRONGTYPE"), std::string::npos) << e.what();
  }
}

TEST(RedisClusterNodeFailure, DeadAndPausedNodesFailAlone) {
  STRATA_REQUIRE_REDIS();
  RedisClusterProcess cluster(3);
  auto c = cluster_client(cluster);
  const auto items = make_items("fail", 120);
  const std::vector<std::string> keys = keys_of(items);
  ASSERT_EQ(c->set_nx_many(items, milliseconds(0), in(milliseconds(5000))), std::vector<bool>(items.size(), true));
  std::vector<int> owner(keys.size(), -1);
  std::vector<size_t> on_node(3, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int n = 0; n < 3; ++n) {
      if (c->slot_owner(key_slot(keys[i])) == cluster.node(n).address()) owner[i] = n;
    }
    ASSERT_GE(owner[i], 0);
    ++on_node[owner[i]];
  }
  ASSERT_GT(on_node[1], 0u);
  ASSERT_GT(on_node[2], 0u);

  // Node 2 dies: its keys fail, the others are read; the call neither throws nor hangs.
  cluster.node(2).kill(SIGKILL);
  auto start = steady_clock::now();
  auto got = c->get_many(keys, start + milliseconds(3000));
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(c->failed_keys(), on_node[2]);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (owner[i] == 2) {
      EXPECT_EQ(got[i], std::nullopt) << keys[i];
    } else {
      EXPECT_EQ(got[i], items[i].second) << keys[i];
    }
  }
  const auto more = make_items("fail2", 60);
  const std::vector<bool> stored = c->set_nx_many(more, milliseconds(0), in(milliseconds(3000)));
  size_t dead = 0;
  for (size_t i = 0; i < more.size(); ++i) {
    const bool on_dead = c->slot_owner(key_slot(more[i].first)) == cluster.node(2).address();
    dead += on_dead ? 1 : 0;
    EXPECT_EQ(stored[i], !on_dead) << more[i].first;
  }
  EXPECT_EQ(c->failed_keys(), dead);
  // Only keys of the dead node: the call throws.
  std::vector<std::string> dead_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (owner[i] == 2) dead_keys.push_back(keys[i]);
  }
  try {
    c->get_many(dead_keys, in(milliseconds(3000)));
    FAIL() << "every key failed but the call did not throw";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kConnect) << e.what();
  }
  EXPECT_THROW(c->ping(in(milliseconds(3000))), RedisError);

  // Node 1 paused: its keys fail at the deadline, node 0's still come back.
  cluster.node(1).pause();
  start = steady_clock::now();
  got = c->get_many(keys, start + milliseconds(300));
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(20));
  cluster.node(1).resume();
  EXPECT_EQ(c->failed_keys(), on_node[1] + on_node[2]);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (owner[i] == 0) {
      EXPECT_EQ(got[i], items[i].second) << keys[i];
    } else {
      EXPECT_EQ(got[i], std::nullopt) << keys[i];
    }
  }

  // Node 2 back (same identity, empty): every node answers again.
  cluster.node(2).restart();
  cluster.wait_ok();
  got = c->get_many(keys, in(milliseconds(5000)));
  EXPECT_EQ(c->failed_keys(), 0u);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (owner[i] != 2) {
      EXPECT_EQ(got[i], items[i].second) << keys[i];
    }
  }
  c->ping(in(milliseconds(5000)));
}

TEST(RedisClusterNodeFailure, NoSeedReachable) {
  STRATA_REQUIRE_REDIS();
  int port = 0;
  {
    test::RedisServerProcess gone;
    port = gone.port();
  }
  auto c = RedisClient::make(RedisUrl::parse(fmt::format("redis-cluster://127.0.0.1:{}", port)), milliseconds(500));
  const std::vector<std::string> keys{"a", "b"};
  try {
    c->get_many(keys, in(milliseconds(2000)));
    FAIL();
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kConnect) << e.what();
  }
}

}  // namespace
}  // namespace strata::redis
