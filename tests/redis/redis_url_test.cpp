// redis/redis_url: parsing one-node and cluster URLs, defaults, errors that never show the password.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "redis/redis_url.h"

namespace strata::redis {
namespace {

TEST(RedisUrl, OneNodeWithDefaults) {
  const RedisUrl u = RedisUrl::parse("redis://localhost");
  EXPECT_FALSE(u.cluster);
  ASSERT_EQ(u.nodes.size(), 1u);
  EXPECT_EQ(u.nodes[0].host, "localhost");
  EXPECT_EQ(u.nodes[0].port, 6379);
  EXPECT_EQ(u.db, 0);
  EXPECT_TRUE(u.user.empty());
  EXPECT_TRUE(u.password.empty());
  EXPECT_EQ(u.redacted(), "redis://localhost:6379/0");
}

TEST(RedisUrl, OneNodeWithEverything) {
  const RedisUrl u = RedisUrl::parse("redis://alice:s3cr%40t@10.0.0.5:7000/3");
  EXPECT_EQ(u.nodes[0], (RedisEndpoint{"10.0.0.5", 7000}));
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "s3cr@t");
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(u.redacted(), "redis://***@10.0.0.5:7000/3");
}

TEST(RedisUrl, PasswordOnlyAndOddPasswords) {
  RedisUrl u = RedisUrl::parse("redis://:pw@127.0.0.1:6379");
  EXPECT_TRUE(u.user.empty());
  EXPECT_EQ(u.password, "pw");
  EXPECT_EQ(u.redacted(), "redis://***@127.0.0.1:6379/0");
  // A password holding '@', '/' and ':': credentials end at the last '@'.
  u = RedisUrl::parse("redis://:a@b/c:d@host/2");
  EXPECT_EQ(u.password, "a@b/c:d");
  EXPECT_EQ(u.nodes[0].host, "host");
  EXPECT_EQ(u.db, 2);
  u = RedisUrl::parse("redis://host:1234/");
  EXPECT_EQ(u.db, 0);
  EXPECT_EQ(u.nodes[0].port, 1234);
}

TEST(RedisUrl, Ipv6) {
  RedisUrl u = RedisUrl::parse("redis://[::1]:6380/1");
  EXPECT_EQ(u.nodes[0].host, "::1");
  EXPECT_EQ(u.nodes[0].port, 6380);
  EXPECT_EQ(u.redacted(), "redis://[::1]:6380/1");
  u = RedisUrl::parse("redis://[fe80::1]");
  EXPECT_EQ(u.nodes[0].port, 6379);
  EXPECT_EQ(RedisEndpoint({"::1", 7}).to_string(), "[::1]:7");
}

TEST(RedisUrl, Cluster) {
  const RedisUrl u = RedisUrl::parse("redis-cluster://u:p@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002");
  EXPECT_TRUE(u.cluster);
  ASSERT_EQ(u.nodes.size(), 3u);
  EXPECT_EQ(u.nodes[1], (RedisEndpoint{"127.0.0.1", 7001}));
  EXPECT_EQ(u.nodes[2], (RedisEndpoint{"::1", 7002}));
  EXPECT_EQ(u.user, "u");
  EXPECT_EQ(u.password, "p");
  EXPECT_EQ(u.redacted(), "redis-cluster://***@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002");
  EXPECT_EQ(RedisUrl::parse("redis-cluster://h:1/0").db, 0);
  EXPECT_EQ(RedisUrl::parse("redis-cluster://h").nodes[0].port, 6379);
}

// Every bad URL throws strata::Error naming the problem, and the password never shows.
void expect_bad(const std::string& url, const std::string& problem) {
  try {
    RedisUrl::parse(url);
    ADD_FAILURE() << "accepted: " << url;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(problem), std::string::npos) << msg;
    EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;
  }
}

TEST(RedisUrl, BadInput) {
  expect_bad("http://localhost", "expected redis://");
  expect_bad("localhost:6379", "expected redis://");
  expect_bad("rediss://:hunter2@localhost", "expected redis://");
  expect_bad("redis://", "missing host");
  expect_bad("redis://:hunter2@", "missing host");
  expect_bad("redis://:hunter2@:6379", "missing host");
  expect_bad("redis://:hunter2@host:0", "bad port");
  expect_bad("redis://:hunter2@host:65536", "bad port");
  expect_bad("redis://:hunter2@host:12ab", "bad port");
  expect_bad("redis://:hunter2@host:", "bad port");
  expect_bad("redis://:hunter2@host:6379/x", "bad database");
  expect_bad("redis://:hunter2@host:6379/-1", "bad database");
  expect_bad("redis://hunter2@host", "user:password");
  expect_bad("redis://alice:@host", "empty password");
  expect_bad("redis://:hunter2@a:1,b:2", "one host");
  expect_bad("redis-cluster://:hunter2@a:1,b:2/1", "database 0");
  expect_bad("redis-cluster://:hunter2@a:1,,b:2", "missing host");
  expect_bad("redis://:hunter2@::1:6379", "brackets");
  expect_bad("redis://:hunter2@[::1", "unterminated");
  expect_bad("redis://:hunter2@[::1]x", "after the IPv6 host");
  expect_bad("redis://:hunter2@host?timeout=1", "query");
  expect_bad("redis://:hunt%zzer2@host", "percent-encoding");
  expect_bad("redis://:hunter2@ho st", "bad character");
}

TEST(RedisUrl, MessageShowsRedactedUrl) {
  try {
    RedisUrl::parse("redis://bob:hunter2@host:99999");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("redis://***@host:99999"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::redis
