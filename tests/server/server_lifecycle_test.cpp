// Black-box tests of `strata serve` across a request's and the process's life: a client that hangs
// up mid-stream gets its request cancelled and its KV blocks freed; SIGTERM lets the request in
// flight finish and the process exit 0.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

std::map<std::string, double> metrics_if_up(ServerProcess& s) {  // {} once the server is gone
  auto r = s.client()->Get("/metrics");
  if (!r || r->status != 200) return {};
  return test::parse_prometheus(r->body);
}

// Polls /metrics until `done` holds, for up to `timeout_s` (a deadline against hangs, not a timing
// assertion). Returns the last page.
template <typename Pred>
std::map<std::string, double> poll_metrics(ServerProcess& s, Pred done, double timeout_s = 120.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::map<std::string, double> m = metrics_if_up(s);
  while (!done(m) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = metrics_if_up(s);
  }
  return m;
}

constexpr const char* kHotUsed = "strata_kv_blocks_used{tier=\"hot\"}";
constexpr const char* kAborted = "strata_requests_total{status=\"aborted\"}";

TEST(ServerLifecycle, HangingUpMidStreamCancelsTheRequestAndFreesItsBlocks) {
  ServerProcess s;
  // 64 samples up to the end of the context: far more work than happens before the hang-up.
  constexpr int kSamples = 64, kMaxTokens = 500;
  test::RawConnection conn(s.port());
  conn.post("/v1/completions", Json({{"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens}, {"n", kSamples},
                                     {"ignore_eos", true}, {"stream", true}})
                                   .dump());
  const std::string head = conn.read_until("data: ", 4);
  ASSERT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  ASSERT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  ASSERT_EQ(head.find("[DONE]"), std::string::npos);
  conn.close();

  const auto m = poll_metrics(s, [](const auto& m) { return m.count(kHotUsed) && m.at(kHotUsed) == 0 && m.at(kAborted) == 1; });
  EXPECT_EQ(m.at(kHotUsed), 0) << "the cancelled request's blocks are back in the pool";
  EXPECT_EQ(m.at(kAborted), 1);
  EXPECT_EQ(m.at("strata_requests_running"), 0);
  EXPECT_EQ(m.at("strata_requests_in_flight"), 0);
  // It was cut short: far fewer tokens than asked for were generated.
  EXPECT_LT(m.at("strata_generation_tokens_total"), kSamples * kMaxTokens);

  // The server carries on.
  auto r = s.client()->Post("/v1/completions", Json({{"prompt", "Once upon a time"}, {"max_tokens", 4}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerLifecycle, SigtermLetsTheRequestInFlightFinishThenExitsZero) {
  ServerProcess::Options o;
  o.args = {"--shutdown-timeout-s", "300"};
  ServerProcess s(o);
  constexpr int kSamples = 32, kMaxTokens = 400;
  std::optional<httplib::Result> result;
  std::thread client([&] {
    auto c = s.client(300);
    result.emplace(c->Post("/v1/completions",
                     Json({{"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens}, {"n", kSamples}, {"ignore_eos", true}}).dump(),
                     "application/json"));
  });
  // Signal only once the engine runs the request.
  const auto running = poll_metrics(s, [](const auto& m) { return m.count("strata_requests_running") && m.at("strata_requests_running") > 0; });
  ASSERT_GT(running.at("strata_requests_running"), 0);
  ASSERT_EQ(::kill(s.pid(), SIGTERM), 0);
  client.join();
  ASSERT_TRUE(result.has_value());
  ASSERT_TRUE(*result) << httplib::to_string(result->error());
  EXPECT_EQ((*result)->status, 200) << (*result)->body;
  const Json j = Json::parse((*result)->body);
  ASSERT_EQ(j["choices"].size(), static_cast<size_t>(kSamples));
  for (const Json& c : j["choices"]) EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], kSamples * kMaxTokens);
  const auto code = s.wait_exit(120.0);
  ASSERT_TRUE(code.has_value()) << "the server did not exit after SIGTERM";
  EXPECT_EQ(*code, 0) << s.log();
  EXPECT_NE(s.log().find("draining"), std::string::npos) << s.log();
}

TEST(ServerLifecycle, SigintOnAnIdleServerExitsZeroAndTheShutdownDeadlineCancelsLongRequests) {
  {
    ServerProcess s;
    const auto code = s.signal_and_wait(SIGINT, 60.0);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << s.log();
  }
  // --shutdown-timeout-s 0: the request in flight is cancelled (finish_reason null with the
  // extension "stop_reason": "abort"; "abort" is no OpenAI finish_reason), the response still
  // arrives complete, and the exit is clean.
  ServerProcess::Options o;
  o.args = {"--shutdown-timeout-s", "0"};
  ServerProcess s(o);
  test::RawConnection conn(s.port());
  conn.post("/v1/completions", Json({{"prompt", "Once upon a time"}, {"max_tokens", 500}, {"n", 64}, {"ignore_eos", true},
                                     {"stream", true}})
                                   .dump());
  ASSERT_NE(conn.read_until("data: ", 2).find("HTTP/1.1 200"), std::string::npos);
  ASSERT_EQ(::kill(s.pid(), SIGTERM), 0);
  const std::string all = conn.read_until("data: [DONE]", 1);
  EXPECT_NE(all.find("data: [DONE]"), std::string::npos) << all.substr(0, 2000);
  EXPECT_EQ(all.find("\"finish_reason\":\"abort\""), std::string::npos);
  EXPECT_NE(all.find("\"finish_reason\":null,\"stop_reason\":\"abort\""), std::string::npos) << all.substr(all.size() - 2000);
  const auto code = s.wait_exit(120.0);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << s.log();
}

}  // namespace
}  // namespace strata
