// Several API keys, each with a default QoS class and a tenant (--api-key KEY[:QOS[:TENANT]],
// --api-keys-file), black-box over HTTP: every key is accepted and nothing else is; a request
// without a `qos` field gets its key's class (else --qos-default), an explicit `qos` overrides
// it; the key's tenant replaces the body's `user` (seen on /metrics per configured tenant); no key
// shows on /metrics or in the server's log.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

struct KeyedServer {
  std::string dir = test::make_temp_dir("strata-keys");
  std::string keys_file = dir + "/keys.txt";
  std::unique_ptr<ServerProcess> server;

  KeyedServer() {
    test::write_file(keys_file, "# one key a line: KEY[:QOS[:TENANT]]\n\n  gamma-key-3:interactive  \n");
    ServerProcess::Options o;
    o.args = {"--api-key", "alpha-key-1:batch:team-a", "--api-key", "beta-key-2::team-b", "--api-keys-file", keys_file,
              "--qos-default", "interactive"};
    server = std::make_unique<ServerProcess>(o);
  }
};

// Sequences per class or tenant from /metrics (waiting + running + swapped).
double sequences(const std::map<std::string, double>& m, const std::string& metric, const std::string& label) {
  double n = 0;
  for (const char* state : {"waiting", "running", "swapped"}) {
    const auto it = m.find(metric + "{" + label + ",state=\"" + state + "\"}");
    if (it != m.end()) n += it->second;
  }
  return n;
}

// Starts a long streamed completion with `key` and `fields`, waits until the engine has its
// sequences, and returns /metrics as it was then (the stream is hung up afterwards, cancelling it).
std::map<std::string, double> metrics_while_running(ServerProcess& s, const std::string& key, const Json& fields) {
  Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 500}, {"n", 64}, {"ignore_eos", true}, {"stream", true}};
  body.update(fields);
  test::RawConnection c(s.port());
  c.post("/v1/completions", body.dump(), "Authorization: Bearer " + key + "\r\n");
  const std::string head = c.read_until("data: ", 1);
  EXPECT_NE(head.find("200 OK"), std::string::npos) << head;
  std::map<std::string, double> m;
  for (int i = 0; i < 200; ++i) {
    m = test::metrics(s);
    if (sequences(m, "strata_qos_sequences", "qos=\"interactive\"") + sequences(m, "strata_qos_sequences", "qos=\"batch\"") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  c.close();
  // Wait until the cancelled request has left, so the next case starts from nothing.
  for (int i = 0; i < 500; ++i) {
    const auto after = test::metrics(s);
    if (sequences(after, "strata_qos_sequences", "qos=\"interactive\"") + sequences(after, "strata_qos_sequences", "qos=\"batch\"") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return m;
}

TEST(ServerApiKeys, EveryConfiguredKeyIsAcceptedAndNothingElse) {
  KeyedServer k;
  auto c = k.server->client();
  const std::string body = Json({{"prompt", "Hi"}, {"max_tokens", 2}}).dump();
  for (const std::string key : {"alpha-key-1", "beta-key-2", "gamma-key-3"}) {
    auto r = c->Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << key << ": " << r->body;
  }
  // The spec is not the key; neither are prefixes, extensions or no key at all.
  for (const std::string header : {"Bearer alpha-key-1:batch:team-a", "Bearer alpha-key-", "Bearer gamma-key-33", "Bearer batch",
                                   "Bearer team-a", "Bearer "}) {
    auto r = c->Post("/v1/completions", {{"Authorization", header}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << header;
    EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key");
  }
  auto r = c->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST(ServerApiKeys, TheKeysClassIsTheDefaultAndTheBodysQosOverridesIt) {
  KeyedServer k;
  ServerProcess& s = *k.server;
  struct Case {
    std::string key;
    Json fields;
    std::string qos;     // the class the request must run in
    std::string tenant;  // the configured tenant it must count for ("" = none of them)
  };
  const std::vector<Case> cases = {
      {"alpha-key-1", Json::object(), "batch", "team-a"},                                  // the key's class and tenant
      {"alpha-key-1", {{"qos", "interactive"}}, "interactive", "team-a"},                  // the body overrides the class
      {"beta-key-2", {{"user", "someone-else"}}, "interactive", "team-b"},                 // no class: --qos-default; key's tenant wins over user
      {"beta-key-2", {{"qos", "batch"}}, "batch", "team-b"},
      {"gamma-key-3", {{"user", "team-a"}}, "interactive", ""},                            // no tenant on the key: `user` is the tenant
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " " + c.fields.dump());
    const auto m = metrics_while_running(s, c.key, c.fields);
    const std::string other = c.qos == "batch" ? "interactive" : "batch";
    EXPECT_GT(sequences(m, "strata_qos_sequences", "qos=\"" + c.qos + "\""), 0);
    EXPECT_EQ(sequences(m, "strata_qos_sequences", "qos=\"" + other + "\""), 0);
    for (const std::string tenant : {"team-a", "team-b"}) {
      const double n = sequences(m, "strata_tenant_sequences", "tenant=\"" + tenant + "\"");
      // gamma's request names team-a as its `user`: a configured tenant, so it counts there.
      const bool expected = tenant == c.tenant || (c.tenant.empty() && tenant == "team-a");
      EXPECT_EQ(n > 0, expected) << tenant;
    }
  }
}

TEST(ServerApiKeys, KeysNeverShowOnMetricsOrInTheLog) {
  KeyedServer k;
  ServerProcess& s = *k.server;
  auto c = s.client();
  const std::string body = Json({{"prompt", "Hi"}, {"max_tokens", 2}}).dump();
  c->Post("/v1/completions", {{"Authorization", "Bearer alpha-key-1"}}, body, "application/json");
  c->Post("/v1/completions", {{"Authorization", "Bearer wrong-key-9"}}, body, "application/json");
  auto page = c->Get("/metrics");
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  // The tenants are there (so the check below reads a page that has the key's configuration on it).
  EXPECT_NE(page->body.find("strata_tenant_sequences{tenant=\"team-a\""), std::string::npos);
  EXPECT_NE(page->body.find("strata_tenant_dominant_share{tenant=\"team-b\"}"), std::string::npos);
  const std::string log = s.log();
  EXPECT_FALSE(log.empty());
  for (const char* key : {"alpha-key-1", "beta-key-2", "gamma-key-3", "wrong-key-9"}) {
    EXPECT_EQ(page->body.find(key), std::string::npos) << key;
    EXPECT_EQ(log.find(key), std::string::npos) << key << " in the log:\n" << log;
  }
}

}  // namespace
}  // namespace strata
