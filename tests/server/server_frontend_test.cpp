// Black-box tests of the asynchronous HTTP front end under abuse (issue 18): pipelining, framing
// attacks, the body limit on chunked bodies, many streams at once, clients that leave, HTTP/1.0
// streams, admission liveness and exact usage. Each of these failed on the thread-per-request
// front end (cpp-httplib) or the engine before the fix; none asserts a duration.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::RawConnection;
using test::ServerProcess;

std::string completion_body(int max_tokens, bool stream, const std::string& extra = "") {
  return "{\"prompt\": \"Once upon a time\", \"max_tokens\": " + std::to_string(max_tokens) + ", \"temperature\": 0" +
         (stream ? ", \"stream\": true" : "") + extra + "}";
}

std::string post_request(const std::string& body, const std::string& version = "HTTP/1.1", const std::string& extra = "") {
  return "POST /v1/completions " + version + "\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The status code of the first response in `bytes`, or -1.
int status_of(const std::string& bytes) {
  if (bytes.size() < 12 || bytes.rfind("HTTP/1.", 0) != 0) return -1;
  return std::stoi(bytes.substr(9, 3));
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

// Problem 4: two or more requests in one write all get their answers, in order.
TEST(ServerFrontend, PipelinedRequestsAreAllAnsweredInOrder) {
  ServerProcess s;
  RawConnection c(s.port());
  std::string batch = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  batch += post_request(completion_body(4, false));
  batch += post_request(completion_body(3, true));
  batch += "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  c.send_all(batch);
  const std::string all = c.read_until("\"object\":\"list\"", 1);
  ASSERT_EQ(count_of(all, "HTTP/1.1 200 OK"), 4u) << all;
  const size_t health = all.find("{\"status\":\"ok\"}");
  const size_t whole = all.find("\"object\":\"text_completion\",");
  const size_t done = all.find("data: [DONE]");
  const size_t models = all.find("\"object\":\"list\"");
  ASSERT_NE(health, std::string::npos);
  ASSERT_NE(whole, std::string::npos);
  ASSERT_NE(done, std::string::npos);
  EXPECT_LT(health, whole);
  EXPECT_LT(whole, done);
  EXPECT_LT(done, models);
  EXPECT_NE(all.find("\"completion_tokens\":4"), std::string::npos) << all;
}

// Problem 6: framing a proxy could read differently is refused with 400, never guessed.
TEST(ServerFrontend, AmbiguousFramingIs400) {
  ServerProcess s;
  const std::string body = completion_body(2, false);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"two different Content-Length",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\nContent-Length: 5\r\n\r\n" + body},
      {"negative Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + body},
      {"Content-Length not a number", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n" + body},
      {"Content-Length and chunked",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
      {"chunked and Content-Length",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
      {"a transfer coding other than chunked", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + body},
      {"a bad chunk size", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
      {"garbage request line", "HELLO THERE\r\n\r\n"},
      {"an HTTP/1.1 request without Host", "GET /health HTTP/1.1\r\n\r\n"},
      {"two Host headers", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
  };
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    RawConnection c(s.port());
    c.send_all(bytes);
    const std::string got = c.read_until("}}", 1);
    EXPECT_EQ(status_of(got), 400) << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    EXPECT_NE(got.find("\"error\":{"), std::string::npos) << got;
  }
  // Nothing of those reached the engine, and it still serves.
  auto r = s.client()->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(test::metrics(s).at("strata_requests_total{status=\"success\"}"), 1);
}

// RFC 9112 3.2.2: a server accepts a target in absolute form (what a client configured for a proxy
// sends); an HTTP/1.0 request needs no Host.
TEST(ServerFrontend, AbsoluteFormTargetsAreServed) {
  ServerProcess s;
  const std::string body = completion_body(2, false);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"POST http://127.0.0.1/v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
       "\"object\":\"text_completion\""},
      {"GET HTTPS://example.com/health?probe=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", "{\"status\":\"ok\"}"},
      {"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", "</html>"},  // no path: "/", the status page
      {"GET /health HTTP/1.0\r\n\r\n", "{\"status\":\"ok\"}"},
  };
  for (const auto& [request, want] : cases) {
    SCOPED_TRACE(request.substr(0, request.find('\r')));
    RawConnection c(s.port());
    c.send_all(request);
    const std::string got = c.read_until(want, 1);
    EXPECT_EQ(status_of(got), 200) << got.substr(0, 300);
    EXPECT_NE(got.find(want), std::string::npos) << got.substr(0, 300);
  }
}

// Problem 3: the body limit holds while a chunked body is read; a chunked body within it works.
TEST(ServerFrontend, ChunkedBodiesObeyTheBodyLimit) {
  ServerProcess::Options o;
  o.args = {"--max-body-bytes", "4096"};
  ServerProcess s(o);
  {
    RawConnection c(s.port());
    const std::string body = completion_body(2, false);
    const std::string half1 = body.substr(0, body.size() / 2), half2 = body.substr(body.size() / 2);
    char head[32];
    std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    std::snprintf(head, sizeof head, "%zx\r\n", half1.size());
    req += head + half1 + "\r\n";
    std::snprintf(head, sizeof head, "%zx\r\n", half2.size());
    req += head + half2 + "\r\n0\r\n\r\n";
    c.send_all(req);
    const std::string got = c.read_until("}}", 1);
    EXPECT_EQ(status_of(got), 200) << got;
  }
  // A chunked body of 64 MiB in the `user` field: 413 once the limit is passed; the server stops
  // reading it (our sends fail or the answer arrives long before the body is out).
  RawConnection c(s.port());
  c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string prefix = "{\"prompt\": \"Hi\", \"max_tokens\": 1, \"user\": \"";
  const std::string piece(64 * 1024, 'a');
  char head[32];
  try {
    std::snprintf(head, sizeof head, "%zx\r\n", prefix.size());
    c.send_all(std::string(head) + prefix + "\r\n");
    std::snprintf(head, sizeof head, "%zx\r\n", piece.size());
    for (int i = 0; i < 1024; ++i) c.send_all(std::string(head) + piece + "\r\n");
  } catch (const std::runtime_error&) {
    // the server closed the connection after answering
  }
  const std::string got = c.read_until("}}", 1);
  EXPECT_EQ(status_of(got), 413) << got.substr(0, 300);
  EXPECT_NE(got.find("request_too_large"), std::string::npos);
  auto r = s.client()->Post("/v1/completions", completion_body(2, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Problem 5: a client that closes its socket while waiting for a whole (non-streamed) answer
// cancels its request: its KV is freed and it is counted as aborted, not run to the end.
TEST(ServerFrontend, ANonStreamedRequestWhoseClientLeavesIsCancelled) {
  ServerProcess s;
  constexpr int kSamples = 16, kMaxTokens = 400;
  {
    RawConnection c(s.port());
    c.send_all(post_request("{\"prompt\": \"Once upon a time\", \"max_tokens\": " + std::to_string(kMaxTokens) +
                            ", \"n\": " + std::to_string(kSamples) + ", \"ignore_eos\": true}"));
    // Wait until it runs, then hang up.
    bool running = false;
    for (int i = 0; i < 3000 && !running; ++i) {
      running = test::metrics(s).at("strata_requests_running") > 0;
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(running);
  }
  std::map<std::string, double> m;
  for (int i = 0; i < 6000; ++i) {
    m = test::metrics(s);
    if (m.at("strata_requests_in_flight") == 0 && m.at("strata_requests_running") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.at("strata_requests_in_flight"), 0);
  EXPECT_EQ(m.at("strata_requests_running"), 0);
  EXPECT_EQ(m.at("strata_requests_total{status=\"aborted\"}"), 1);
  EXPECT_EQ(m.at("strata_requests_total{status=\"success\"}"), 0);
  EXPECT_EQ(m.at("strata_kv_blocks_used{tier=\"hot\"}"), 0);
  EXPECT_LT(m.at("strata_generation_tokens_total"), kSamples * kMaxTokens);
}

// Problem 8: HTTP/1.0 has no chunked encoding; a stream to an HTTP/1.0 client ends with the
// connection.
TEST(ServerFrontend, AStreamToAnHttp10ClientIsCloseDelimited) {
  ServerProcess s;
  RawConnection c(s.port());
  c.send_all(post_request(completion_body(5, true), "HTTP/1.0"));
  const std::string got = c.read_until("no such text", 1);  // until the server closes
  EXPECT_EQ(got.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << got;
  EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  const size_t body = got.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_EQ(got.compare(body + 4, 6, "data: "), 0) << got;  // no chunk-size line
  EXPECT_EQ(count_of(got, "data: [DONE]\n\n"), 1u);
  EXPECT_EQ(got.size() - got.rfind("data: [DONE]\n\n"), std::string("data: [DONE]\n\n").size());
}

// Problem 2: streams hold no thread; with many more streams than I/O threads, the utility routes
// still answer and every stream completes with its exact token count.
TEST(ServerFrontend, ManyStreamsDoNotStarveTheOtherRoutes) {
  ServerProcess::Options o;
  o.args = {"--max-seqs", "256", "--http-threads", "1"};
  ServerProcess s(o);
  constexpr int kStreams = 200, kMaxTokens = 200;
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < kStreams; ++i) {
    conns.push_back(std::make_unique<RawConnection>(s.port()));
    conns.back()->send_all(post_request("{\"prompt\": \"Once upon a time\", \"max_tokens\": " + std::to_string(kMaxTokens) +
                                        ", \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"));
  }
  // While they stream: every utility route answers (a short client timeout: a starved server
  // would hold these for the whole generation).
  auto probe = s.client(/*timeout_s=*/30);
  // Probe until the engine is seen running more streams than the old front end had threads (the
  // load ramps up at its own pace, slower under the sanitizers), and at least 20 times.
  int probes = 0, answered = 0;
  double max_running = 0;
  for (int i = 0; i < 3000 && (probes < 20 || max_running <= 32); ++i) {
    auto h = probe->Get("/health");
    auto m = probe->Get("/metrics");
    auto p = probe->Get("/");
    ++probes;
    if (h && h->status == 200 && m && m->status == 200 && p && p->status == 200) ++answered;
    if (m) max_running = std::max(max_running, test::parse_prometheus(m->body).at("strata_requests_running"));
    if (max_running <= 32) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(answered, probes);
  EXPECT_GT(max_running, 32) << "the streams did not run concurrently";
  for (auto& c : conns) {
    const std::string got = c->read_until("data: [DONE]", 1);
    ASSERT_EQ(status_of(got), 200) << got.substr(0, 300);
    EXPECT_NE(got.find("\"completion_tokens\":" + std::to_string(kMaxTokens)), std::string::npos);
  }
  const auto m = test::metrics(s);
  EXPECT_EQ(m.at("strata_requests_total{status=\"success\"}"), kStreams);
  EXPECT_EQ(m.at("strata_generation_tokens_total"), kStreams * kMaxTokens);
}

// --max-connections: one more connection is answered 503 at once and closed.
TEST(ServerFrontend, ConnectionsBeyondTheLimitGet503) {
  ServerProcess::Options o;
  o.args = {"--max-connections", "4"};
  ServerProcess s(o);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConnection>(s.port()));
    held.back()->send_all("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    held.back()->read_until("{\"status\":\"ok\"}", 1);  // kept alive: the connection stays open
  }
  RawConnection extra(s.port());
  const std::string got = extra.read_until("}}", 1);
  EXPECT_EQ(status_of(got), 503) << got;
  EXPECT_NE(got.find("too_many_connections"), std::string::npos) << got;
  held.clear();
  // Room again once they closed.
  for (int i = 0; i < 200; ++i) {
    RawConnection c(s.port());
    c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string again = c.read_until("}", 1);
    if (status_of(again) == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "closed connections were not released";
}

// Expect: 100-continue (curl sends it for bodies over 1 KiB) gets its interim answer.
TEST(ServerFrontend, ExpectContinueIsAnswered) {
  ServerProcess s;
  RawConnection c(s.port());
  const std::string body = completion_body(2, false);
  c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n");
  const std::string interim = c.read_until("\r\n\r\n", 1);
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << interim;
  c.send_all(body);
  const std::string got = c.read_until("}}", 1);
  EXPECT_NE(got.find("HTTP/1.1 200 OK"), std::string::npos) << got;
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

std::string token_prompt(int n, int offset) {
  std::string ids;
  for (int i = 0; i < n; ++i) {
    if (i > 0) ids.push_back(',');
    ids.append(std::to_string(100 + (i + offset) % 400));
  }
  return "[" + ids + "]";
}

// Problem 1: a prompt that fills the pool to its last block, sent twice, is answered twice (the
// second is not stuck behind the watermark and its own prefix-cache hit); one that can never fit
// is a 400 naming the limit, and the queue behind it keeps moving.
TEST(ServerFrontend, AdmissionStaysLiveWhenAPromptFillsThePool) {
  ServerProcess::Options o;
  o.args = {"--kv-blocks", "32", "--kv-block-size", "16"};  // 512 tokens in all
  ServerProcess s(o);
  const std::string body = "{\"prompt\": " + token_prompt(500, 0) + ", \"max_tokens\": 3, \"temperature\": 0}";
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    auto r = s.client(/*timeout_s=*/60)->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r) << "no answer: admission is stuck";
    EXPECT_EQ(r->status, 200) << r->body;
  }
  ServerProcess::Options small;
  small.args = {"--kv-blocks", "8", "--kv-block-size", "16"};  // 128 tokens
  ServerProcess t(small);
  auto c = t.client(/*timeout_s=*/60);
  auto r = c->Post("/v1/completions", "{\"prompt\": " + token_prompt(200, 0) + ", \"max_tokens\": 3}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["error"]["param"], "prompt");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("KV blocks"), std::string::npos) << j;
  r = c->Post("/v1/completions", completion_body(3, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// Problem 7: cached_tokens counts what the prefix cache served this request, never its own
// earlier prefill chunks.
TEST(ServerFrontend, CachedTokensCountOnlyPrefixCacheHits) {
  for (const bool prefix_cache : {true, false}) {
    SCOPED_TRACE(prefix_cache);
    ServerProcess::Options o;
    o.args = {"--max-batched-tokens", "64"};  // a 300-token prompt is prefilled in 5 chunks
    if (!prefix_cache) o.args.push_back("--no-prefix-cache");
    ServerProcess s(o);
    const std::string body = "{\"prompt\": " + token_prompt(300, 7) + ", \"max_tokens\": 2, \"temperature\": 0}";
    auto c = s.client();
    auto first = c->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(first && first->status == 200);
    EXPECT_EQ(Json::parse(first->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << first->body;
    auto second = c->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(second && second->status == 200);
    const int cached = Json::parse(second->body)["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (prefix_cache) {
      EXPECT_GT(cached, 0);
      EXPECT_LT(cached, 300);
      EXPECT_EQ(cached % 16, 0);
    } else {
      EXPECT_EQ(cached, 0);
    }
  }
}

}  // namespace
}  // namespace strata
