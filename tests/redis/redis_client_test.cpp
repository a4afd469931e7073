// redis/redis_client on one real redis-server: pipelined GET / SET NX PX, binary and large values,
// AUTH (password, ACL user) and SELECT, the deadline against a paused server, a killed and a
// restarted server.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "redis/redis_client.h"
#include "support/redis_process.h"

namespace strata::redis {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using test::RedisServerProcess;

steady_clock::time_point in(milliseconds ms) { return steady_clock::now() + ms; }

std::unique_ptr<RedisClient> client_for(const std::string& url) {
  return RedisClient::make(RedisUrl::parse(url), milliseconds(1000));
}

std::string cmd(RedisClient& c, std::vector<std::string> argv) { return c.command(argv, in(milliseconds(2000))); }

TEST(RedisClient, GetSetNxAndMissingKeys) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  EXPECT_EQ(c->describe(), "redis://127.0.0.1:" + std::to_string(server.port()) + "/0");
  c->ping(in(milliseconds(2000)));

  const std::vector<std::pair<std::string, std::string>> items{{"a", "1"}, {"b", "2"}, {"c", ""}};
  EXPECT_EQ(c->set_nx_many(items, milliseconds(0), in(milliseconds(2000))), (std::vector<bool>{true, true, true}));
  // NX: existing keys are not overwritten.
  const std::vector<std::pair<std::string, std::string>> again{{"a", "X"}, {"d", "4"}};
  EXPECT_EQ(c->set_nx_many(again, milliseconds(0), in(milliseconds(2000))), (std::vector<bool>{false, true}));

  const std::vector<std::string> keys{"a", "missing", "b", "c", "d"};
  const auto got = c->get_many(keys, in(milliseconds(2000)));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], "1");
  EXPECT_EQ(got[1], std::nullopt);
  EXPECT_EQ(got[2], "2");
  EXPECT_EQ(got[3], "");  // empty value, not missing
  EXPECT_EQ(got[4], "4");
  EXPECT_EQ(c->failed_keys(), 0u);
  EXPECT_TRUE(c->get_many({}, in(milliseconds(2000))).empty());
  EXPECT_TRUE(c->set_nx_many({}, milliseconds(0), in(milliseconds(2000))).empty());

  EXPECT_EQ(cmd(*c, {"GET", "nothing"}), "(nil)");
  EXPECT_EQ(cmd(*c, {"INCR", "counter"}), "1");
  EXPECT_EQ(cmd(*c, {"DBSIZE"}), "5");  // a b c d counter
  EXPECT_EQ(cmd(*c, {"FLUSHALL"}), "OK");
  EXPECT_EQ(cmd(*c, {"DBSIZE"}), "0");
}

TEST(RedisClient, TtlExpiry) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  const std::vector<std::pair<std::string, std::string>> shortlived{{"short", "v"}};
  const std::vector<std::pair<std::string, std::string>> forever{{"forever", "v"}};
  ASSERT_EQ(c->set_nx_many(shortlived, milliseconds(150), in(milliseconds(2000))), std::vector<bool>{true});
  ASSERT_EQ(c->set_nx_many(forever, milliseconds(0), in(milliseconds(2000))), std::vector<bool>{true});
  const long long pttl = std::stoll(cmd(*c, {"PTTL", "short"}));
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 150);
  EXPECT_EQ(cmd(*c, {"PTTL", "forever"}), "-1");
  // The key goes once its TTL is over (polled, with a generous bound).
  const std::vector<std::string> key{"short"};
  const auto give_up = in(milliseconds(10000));
  while (c->get_many(key, in(milliseconds(2000)))[0].has_value() && steady_clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(c->get_many(key, in(milliseconds(2000)))[0], std::nullopt);
  // Gone, so SET NX stores it again.
  EXPECT_EQ(c->set_nx_many(shortlived, milliseconds(0), in(milliseconds(2000))), std::vector<bool>{true});
}

TEST(RedisClient, BinaryAndLargeValues) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  std::string binary("a\0b\r\n\0%s\xff", 10);
  std::string binary_key("k\0\r\nz", 5);
  std::mt19937 rng(7);
  std::string big(1 << 20, '\0');
  for (char& ch : big) ch = static_cast<char>(rng());
  const std::vector<std::pair<std::string, std::string>> items{{binary_key, binary}, {"big", big}};
  ASSERT_EQ(c->set_nx_many(items, milliseconds(60000), in(milliseconds(5000))), (std::vector<bool>{true, true}));
  const std::vector<std::string> keys{"big", binary_key, "k"};
  const auto got = c->get_many(keys, in(milliseconds(5000)));
  ASSERT_TRUE(got[0].has_value());
  EXPECT_EQ(got[0]->size(), big.size());
  EXPECT_TRUE(*got[0] == big);
  EXPECT_EQ(got[1], binary);
  EXPECT_EQ(got[2], std::nullopt);  // "k" is a prefix of the binary key, not the key
  EXPECT_EQ(cmd(*c, {"STRLEN", "big"}), std::to_string(1 << 20));
  // Many keys in one pipeline.
  std::vector<std::pair<std::string, std::string>> many;
  std::vector<std::string> many_keys;
  for (int i = 0; i < 2000; ++i) {
    many.emplace_back(fmt::format("m{}", i), std::string(100, static_cast<char>('a' + i % 26)));
    many_keys.push_back(fmt::format("m{}", i));
  }
  const std::vector<bool> stored = c->set_nx_many(many, milliseconds(0), in(milliseconds(5000)));
  EXPECT_EQ(std::count(stored.begin(), stored.end(), true), 2000);
  const auto values = c->get_many(many_keys, in(milliseconds(5000)));
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(values[i], many[i].second);
}

TEST(RedisClient, ErrorReplyThrowsAndConnectionStaysUsable) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  cmd(*c, {"LPUSH", "list", "x"});
  const std::vector<std::string> keys{"list"};
  try {
    c->get_many(keys, in(milliseconds(2000)));
    FAIL() << "GET of a list succeeded";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kReply);
    EXPECT_NE(std::string(e.what()).find("WRONGTYPE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cmd(*c, {"NOSUCHCOMMAND"}), RedisError);
  EXPECT_EQ(cmd(*c, {"SET", "k", "v"}), "OK");
  EXPECT_EQ(cmd(*c, {"GET", "k"}), "v");
}

TEST(RedisClient, DatabaseSelect) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto db3 = client_for(server.url() + "/3");
  auto db0 = client_for(server.url());
  const std::vector<std::pair<std::string, std::string>> items{{"k", "in3"}};
  ASSERT_EQ(db3->set_nx_many(items, milliseconds(0), in(milliseconds(2000))), std::vector<bool>{true});
  const std::vector<std::string> keys{"k"};
  EXPECT_EQ(db3->get_many(keys, in(milliseconds(2000)))[0], "in3");
  EXPECT_EQ(db0->get_many(keys, in(milliseconds(2000)))[0], std::nullopt);
  auto bad = client_for(server.url() + "/100000");
  try {
    bad->ping(in(milliseconds(2000)));
    FAIL() << "SELECT 100000 succeeded";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kReply);
    EXPECT_NE(std::string(e.what()).find("SELECT"), std::string::npos) << e.what();
  }
}

TEST(RedisClient, PasswordAuth) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server({"--requirepass", "hunter2"});
  const std::string addr = server.address();
  auto good = client_for("redis://:hunter2@" + addr);
  EXPECT_EQ(good->describe(), "redis://***@" + addr + "/0");
  good->ping(in(milliseconds(2000)));
  EXPECT_EQ(cmd(*good, {"SET", "k", "v"}), "OK");

  auto wrong = client_for("redis://:wrongpass@" + addr);
  try {
    wrong->ping(in(milliseconds(2000)));
    FAIL() << "a wrong password was accepted";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kReply);
    EXPECT_NE(std::string(e.what()).find("AUTH"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("wrongpass"), std::string::npos) << e.what();
  }
  auto none = client_for(server.url());
  const std::vector<std::string> keys{"k"};
  try {
    none->get_many(keys, in(milliseconds(2000)));
    FAIL() << "no password was accepted";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kReply);
    EXPECT_NE(std::string(e.what()).find("NOAUTH"), std::string::npos) << e.what();
  }
}

TEST(RedisClient, AclUserAuth) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server({"--user", "alice", "on", ">alicepw", "~*", "&*", "+@all"});
  const std::string addr = server.address();
  auto alice = client_for("redis://alice:alicepw@" + addr);
  EXPECT_EQ(cmd(*alice, {"ACL", "WHOAMI"}), "alice");
  auto wrong = client_for("redis://alice:nope@" + addr);
  EXPECT_THROW(wrong->ping(in(milliseconds(2000))), RedisError);
}

TEST(RedisClient, DeadlineAgainstPausedServer) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  const std::vector<std::pair<std::string, std::string>> items{{"k1", "v1"}, {"k2", "v2"}};
  ASSERT_EQ(c->set_nx_many(items, milliseconds(0), in(milliseconds(2000))), (std::vector<bool>{true, true}));

  server.pause();
  const std::vector<std::string> k1{"k1"};
  const auto start = steady_clock::now();
  try {
    c->get_many(k1, start + milliseconds(200));
    FAIL() << "a paused server answered";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kTimeout) << e.what();
  }
  // It came back (no exact timing asserted: only that it did not wait for the server).
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(10));
  // A deadline already past fails at once without touching the connection.
  try {
    c->ping(steady_clock::now() - milliseconds(1));
    FAIL();
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kTimeout);
  }
  server.resume();
  // The late reply to GET k1 must not be taken for the answer to GET k2.
  const std::vector<std::string> k2{"k2"};
  EXPECT_EQ(c->get_many(k2, in(milliseconds(2000)))[0], "v2");
  EXPECT_EQ(c->get_many(k1, in(milliseconds(2000)))[0], "v1");
}

TEST(RedisClient, KilledAndRestartedServer) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess server;
  auto c = client_for(server.url());
  c->ping(in(milliseconds(2000)));
  server.kill(SIGKILL);
  const std::vector<std::string> keys{"k"};
  for (int i = 0; i < 2; ++i) {  // the broken connection, then a refused reconnect
    try {
      c->get_many(keys, in(milliseconds(2000)));
      FAIL() << "a dead server answered";
    } catch (const RedisError& e) {
      EXPECT_EQ(e.kind(), RedisError::Kind::kConnect) << e.what();
      EXPECT_NE(std::string(e.what()).find(server.address()), std::string::npos) << e.what();
    }
  }
  server.restart();
  EXPECT_EQ(c->get_many(keys, in(milliseconds(2000)))[0], std::nullopt);
  const std::vector<std::pair<std::string, std::string>> items{{"k", "v"}};
  EXPECT_EQ(c->set_nx_many(items, milliseconds(0), in(milliseconds(2000))), std::vector<bool>{true});
  EXPECT_EQ(c->get_many(keys, in(milliseconds(2000)))[0], "v");
}

TEST(RedisClient, NothingListening) {
  STRATA_REQUIRE_REDIS();
  int port = 0;
  {
    RedisServerProcess server;
    port = server.port();
  }
  auto c = client_for("redis://127.0.0.1:" + std::to_string(port));
  try {
    c->ping(in(milliseconds(2000)));
    FAIL();
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Kind::kConnect) << e.what();
  }
}

}  // namespace
}  // namespace strata::redis
