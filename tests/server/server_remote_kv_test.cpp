// The remote KV tier across replicas (--kv-remote): two `strata serve` processes share one real
// redis-server (or a 3-master Redis Cluster) started on free loopback ports. A prompt prefilled on
// A is a remote prefix hit on B with the tokens of a cold run; Redis killed, restarted, paused,
// values corrupted or truncated by hand, keys of another format: every request completes with the
// right tokens, the servers stay healthy, and /metrics says what happened.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "redis/redis_client.h"
#include "redis/redis_url.h"
#include "server/server_process.h"
#include "support/redis_process.h"

namespace strata {
namespace {

using test::RedisClusterProcess;
using test::RedisServerProcess;
using test::ServerProcess;
using Json = nlohmann::json;
using namespace std::chrono_literals;

// About 120 tokens of stories260K's vocabulary: 7 full blocks of 16.
const std::string kPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, "
    "she saw a big, red ball in the park. She ran to get it, but a big dog came and took it away. Lily was sad "
    "and she cried. Her mom came and hugged her. They went home and had some warm milk and cookies. The next "
    "day, Lily went back to the park and";

// A lookup waits up to 2 s unless the test says otherwise (a loaded CI machine is slow; a
// timeout would turn an expected hit into a miss).
ServerProcess::Options remote_server(const std::string& url, std::vector<std::string> extra = {}, int timeout_ms = 2000) {
  ServerProcess::Options o;
  o.args = {"--kv-remote", url, "--kv-remote-timeout-ms", std::to_string(timeout_ms)};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return o;
}

struct Completion {
  int status = 0;
  std::string text;
  int64_t cached_tokens = -1;
};

Completion complete(ServerProcess& s, const std::string& prompt, int max_tokens = 24) {
  auto r = s.client(60)->Post("/v1/completions",
                               Json({{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}).dump(), "application/json");
  Completion c;
  if (!r) return c;
  c.status = r->status;
  if (r->status != 200) return c;
  const Json j = Json::parse(r->body);
  c.text = j["choices"][0]["text"];
  c.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"];
  return c;
}

int health_status(ServerProcess& s) {
  auto r = s.client()->Get("/health");
  return r ? r->status : 0;
}

double metric(ServerProcess& s, const std::string& name) {
  const auto m = test::metrics(s);
  auto it = m.find(name);
  return it == m.end() ? -1 : it->second;
}

// Waits until `name` on s reaches at least `at_least` (publishing is asynchronous).
bool wait_metric(ServerProcess& s, const std::string& name, double at_least, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (metric(s, name) >= at_least) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

std::unique_ptr<redis::RedisClient> client_for(const std::string& url) {
  return redis::RedisClient::make(redis::RedisUrl::parse(url), std::chrono::milliseconds(1000));
}

std::string cmd(redis::RedisClient& c, std::vector<std::string> argv) {
  return c.command(argv, std::chrono::steady_clock::now() + 5s);
}

std::vector<std::string> strata_keys(redis::RedisClient& c) {
  std::vector<std::string> keys;
  const std::string all = cmd(c, {"KEYS", "strata:kv:*"});
  size_t at = 0;
  while (at < all.size()) {
    size_t eol = all.find('\n', at);
    if (eol == std::string::npos) eol = all.size();
    if (eol > at) keys.push_back(all.substr(at, eol - at));
    at = eol + 1;
  }
  return keys;
}

// The text a server without any remote tier produces: the reference for every test here.
std::string cold_reference(const std::string& prompt) {
  ServerProcess cold;
  const Completion c = complete(cold, prompt);
  EXPECT_EQ(c.status, 200);
  return c.text;
}

TEST(ServerRemoteKv, APrefixPrefilledOnOneReplicaIsARemoteHitOnTheOther) {
  STRATA_REQUIRE_REDIS();
  const std::string reference = cold_reference(kPrompt);
  RedisServerProcess redis;
  ServerProcess a(remote_server(redis.url()));
  ServerProcess b(remote_server(redis.url()));

  const Completion on_a = complete(a, kPrompt);
  ASSERT_EQ(on_a.status, 200);
  EXPECT_EQ(on_a.text, reference);
  EXPECT_EQ(on_a.cached_tokens, 0);
  ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();

  const Completion on_b = complete(b, kPrompt);
  ASSERT_EQ(on_b.status, 200);
  EXPECT_EQ(on_b.text, reference);
  EXPECT_GE(on_b.cached_tokens, 7 * 16);
  EXPECT_GE(metric(b, "strata_kv_remote_hit_tokens_total"), 7 * 16);
  EXPECT_GE(metric(b, "strata_kv_remote_hit_blocks_total"), 7);
  EXPECT_EQ(metric(b, "strata_kv_remote_corrupt_total"), 0);
  EXPECT_EQ(metric(b, "strata_kv_remote_errors_total"), 0);
  EXPECT_EQ(metric(b, "strata_prefix_cache_hit_tokens_total"), on_b.cached_tokens);

  // The keys name the model, the format version, the dtype, the block size and the hash.
  auto c = client_for(redis.url());
  const auto keys = strata_keys(*c);
  ASSERT_FALSE(keys.empty());
  for (const std::string& k : keys) EXPECT_NE(k.find(":v1:"), std::string::npos) << k;
  for (const std::string& k : keys) EXPECT_NE(k.find(":f16:b16:"), std::string::npos) << k;
  // Published blocks expire (--kv-remote-ttl, default one day).
  const std::string ttl = cmd(*c, {"PTTL", keys[0]});
  EXPECT_GT(std::stoll(ttl), 0) << ttl;
  // Credentials never appear in logs; the URL here has none, but the log names the tier.
  EXPECT_NE(a.log().find("KV remote tier: redis://127.0.0.1:"), std::string::npos) << a.log();
}

TEST(ServerRemoteKv, AThreeMasterClusterSharesPrefixesToo) {
  STRATA_REQUIRE_REDIS();
  const std::string reference = cold_reference(kPrompt);
  RedisClusterProcess cluster(3);
  ServerProcess a(remote_server(cluster.url()));
  ServerProcess b(remote_server(cluster.url()));
  ASSERT_EQ(complete(a, kPrompt).text, reference);
  ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();
  const Completion on_b = complete(b, kPrompt);
  EXPECT_EQ(on_b.text, reference);
  EXPECT_GE(on_b.cached_tokens, 7 * 16);
  EXPECT_GE(metric(b, "strata_kv_remote_hit_blocks_total"), 7);
  EXPECT_EQ(metric(b, "strata_kv_remote_errors_total"), 0);
  // A prefix's blocks are spread over the cluster: more than one master holds some.
  int holders = 0;
  for (int i = 0; i < cluster.size(); ++i) {
    auto c = client_for(cluster.node(i).url());
    holders += std::stoll(cmd(*c, {"DBSIZE"})) > 0;
  }
  EXPECT_GE(holders, 2);
}

TEST(ServerRemoteKv, CorruptTruncatedAndForeignValuesAreMissesNeverWrongTokens) {
  STRATA_REQUIRE_REDIS();
  const std::string reference = cold_reference(kPrompt);
  RedisServerProcess redis;
  {
    ServerProcess a(remote_server(redis.url()));
    ASSERT_EQ(complete(a, kPrompt).text, reference);
    ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();
  }
  auto c = client_for(redis.url());
  const auto keys = strata_keys(*c);
  ASSERT_GE(keys.size(), 7u);
  // Damage every stored block: in turn a flipped payload byte, a truncated value, a value of
  // another format version, of another model, and one stored under another block's key.
  std::vector<std::string> values;
  for (const std::string& k : keys) values.push_back(cmd(*c, {"GET", k}));
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string v = values[i];
    ASSERT_GT(v.size(), 100u);
    switch (i % 5) {
      case 0: v[v.size() / 2] = static_cast<char>(v[v.size() / 2] ^ 0x5a); break;  // payload byte
      case 1: v.resize(v.size() - 17); break;                                        // truncated
      case 2: v[4] = 2; break;                                                         // format version 2
      case 3: v[32] = static_cast<char>(v[32] ^ 1); break;                             // another model's fingerprint
      case 4: v = values[(i + 1) % values.size()]; break;                              // another block's value
    }
    cmd(*c, {"SET", keys[i], v});
  }
  ServerProcess b(remote_server(redis.url()));
  const Completion on_b = complete(b, kPrompt);
  ASSERT_EQ(on_b.status, 200);
  EXPECT_EQ(on_b.text, reference);
  EXPECT_GE(metric(b, "strata_kv_remote_corrupt_total"), 1);
  EXPECT_EQ(metric(b, "strata_kv_remote_hit_tokens_total"), 0);
  EXPECT_EQ(on_b.cached_tokens, 0);
  EXPECT_EQ(health_status(b), 200);
}

TEST(ServerRemoteKv, AReplicaOfAnotherKvFormatNeverTakesTheseBlocks) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess redis;
  ServerProcess a(remote_server(redis.url()));
  const std::string reference = complete(a, kPrompt).text;
  ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();
  // bf16 hot blocks and 32-token blocks: other keys, so misses (not corrupt values).
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--kv-dtype", "bf16"},
                                                std::vector<std::string>{"--kv-block-size", "32"}}) {
    ServerProcess b(remote_server(redis.url(), extra));
    const Completion on_b = complete(b, kPrompt);
    ASSERT_EQ(on_b.status, 200);
    EXPECT_EQ(metric(b, "strata_kv_remote_hit_blocks_total"), 0) << extra[0];
    EXPECT_EQ(metric(b, "strata_kv_remote_corrupt_total"), 0) << extra[0];
    EXPECT_GE(metric(b, "strata_kv_remote_miss_blocks_total"), 1) << extra[0];
  }
}

TEST(ServerRemoteKv, RedisKilledAndRestartedNeverFailsARequest) {
  STRATA_REQUIRE_REDIS();
  const std::string reference = cold_reference(kPrompt);
  RedisServerProcess redis;
  ServerProcess a(remote_server(redis.url(), {}, 200));
  ServerProcess b(remote_server(redis.url(), {}, 200));
  ASSERT_EQ(complete(a, kPrompt).text, reference);

  // Killed mid-load: requests in flight on both replicas (new prompts, so each one looks up and
  // publishes) complete; the failures are counted and the breaker opens.
  std::vector<int> statuses(8, 0);
  std::vector<std::thread> load;
  for (int i = 0; i < 8; ++i) {
    load.emplace_back([&, i] {
      statuses[static_cast<size_t>(i)] = complete(i % 2 ? a : b, "Number " + std::to_string(i) + ". " + kPrompt, 48).status;
    });
    if (i == 3) redis.kill(SIGKILL);
  }
  for (auto& t : load) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(statuses[static_cast<size_t>(i)], 200) << i;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(complete(i % 2 ? a : b, kPrompt + " number " + std::to_string(i)).status, 200);
  EXPECT_EQ(complete(b, kPrompt).text, reference);
  EXPECT_EQ(health_status(a), 200);
  EXPECT_EQ(health_status(b), 200);
  EXPECT_GE(metric(b, "strata_kv_remote_errors_total") + metric(b, "strata_kv_remote_timeouts_total"), 1);
  EXPECT_GE(metric(b, "strata_kv_remote_breaker_trips_total"), 1);

  // Restarted (empty): the breaker probes again and publishing resumes.
  redis.restart();
  const double before = metric(a, "strata_kv_remote_published_blocks_total");
  bool resumed = false;
  for (int i = 0; i < 100 && !resumed; ++i) {
    // A new prompt whose generated tokens fill a new block: something to publish.
    ASSERT_EQ(complete(a, kPrompt + " again " + std::to_string(i)).status, 200);
    resumed = metric(a, "strata_kv_remote_published_blocks_total") > before;
    if (!resumed) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(resumed) << a.client()->Get("/metrics")->body;
  EXPECT_EQ(metric(a, "strata_kv_remote_breaker_open"), 0);

}

TEST(ServerRemoteKv, APausedRedisTimesLookupsOutAndRequestsStillComplete) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess redis;
  ServerProcess a(remote_server(redis.url()));
  const std::string reference = complete(a, kPrompt).text;
  ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();
  ServerProcess b(remote_server(redis.url(), {}, 200));
  redis.pause();  // SIGSTOP: connections are accepted, nothing is answered
  const Completion paused = complete(b, kPrompt);
  redis.resume();
  ASSERT_EQ(paused.status, 200);
  EXPECT_EQ(paused.text, reference);
  EXPECT_EQ(paused.cached_tokens, 0);
  EXPECT_GE(metric(b, "strata_kv_remote_timeouts_total"), 1);
  EXPECT_EQ(metric(b, "strata_kv_remote_hit_tokens_total"), 0);
  EXPECT_EQ(health_status(b), 200);
}

TEST(ServerRemoteKv, APasswordIsUsedAndNeverShownAndAWrongOneOnlyCostsHits) {
  STRATA_REQUIRE_REDIS();
  RedisServerProcess redis({"--requirepass", "s3cretpw"});
  const std::string good = "redis://:s3cretpw@127.0.0.1:" + std::to_string(redis.port());
  const std::string bad = "redis://default:wr0ngpw@127.0.0.1:" + std::to_string(redis.port());
  ServerProcess a(remote_server(good));
  const std::string reference = complete(a, kPrompt).text;
  ASSERT_TRUE(wait_metric(a, "strata_kv_remote_published_blocks_total", 7)) << a.log();
  ServerProcess b(remote_server(good));
  const Completion on_b = complete(b, kPrompt);
  EXPECT_EQ(on_b.text, reference);
  EXPECT_GE(on_b.cached_tokens, 7 * 16);
  ServerProcess c(remote_server(bad));
  const Completion on_c = complete(c, kPrompt);
  ASSERT_EQ(on_c.status, 200);
  EXPECT_EQ(on_c.text, reference);
  EXPECT_EQ(on_c.cached_tokens, 0);
  EXPECT_GE(metric(c, "strata_kv_remote_errors_total"), 1);
  for (ServerProcess* s : {&a, &b, &c}) {
    const std::string page = s->client()->Get("/metrics")->body;
    EXPECT_EQ(s->log().find("s3cretpw"), std::string::npos) << s->log();
    EXPECT_EQ(s->log().find("wr0ngpw"), std::string::npos) << s->log();
    EXPECT_EQ(page.find("s3cretpw"), std::string::npos);
    EXPECT_EQ(page.find("wr0ngpw"), std::string::npos);
  }
  EXPECT_NE(a.log().find("redis://***@127.0.0.1:"), std::string::npos) << a.log();
}

TEST(ServerRemoteKv, BadRemoteUrlsAreRefusedAtStartWithoutThePassword) {
  for (const std::string& url : {std::string("http://127.0.0.1:1"), std::string("redis://user:s3cretpw@"),
                                 std::string("redis-cluster://"), std::string("redis://u:s3cretpw@host:notaport")}) {
    const auto r = test::run_command({test::strata_bin(), "serve", "-m", test::shared_path("models/stories260K.gguf"), "--port", "0",
                                      "--kv-remote", url},
                                     30);
    EXPECT_NE(r.exit_code, 0) << url;
    EXPECT_NE(r.err.find("--kv-remote"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("s3cretpw"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace strata
