// The benchmark client against a scripted OpenAI-style server (cpp-httplib in this process):
// streams cut at awkward places, role-only and empty chunks, missing usage, errors in the body or
// the stream, non-streamed answers; and the runner's multi-turn history, concurrency cap and
// /metrics scrapes.
#include "bench_client/openai_stream_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench_client/bench_report.h"
#include "bench_client/bench_runner.h"
#include "core/error.h"

namespace strata::bench {
namespace {

using nlohmann::json;

// Writes `pieces` as separate chunks of a chunked SSE response.
void stream_pieces(httplib::Response& res, std::vector<std::string> pieces) {
  res.set_chunked_content_provider("text/event-stream", [pieces](size_t, httplib::DataSink& sink) {
    for (const auto& p : pieces) {
      if (!sink.write(p.data(), p.size())) return false;
    }
    sink.done();
    return true;
  });
}

class FakeServer {
 public:
  FakeServer() {
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const int n = requests_.load();
      // One preemption per request, and the requests in flight as the KV usage (in tenths).
      res.set_content("# TYPE strata_prefix_cache_hit_tokens_total counter\nstrata_prefix_cache_hit_tokens_total " +
                          std::to_string(3 * n) + "\nstrata_prefix_cache_queried_tokens_total " + std::to_string(4 * n) +
                          "\nstrata_preemptions_total " + std::to_string(n) + "\nstrata_kv_usage_ratio " +
                          std::to_string(in_flight_.load() / 10.0) + "\n",
                      "text/plain");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::yield();
  }
  ~FakeServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::vector<json> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  int max_in_flight() const { return max_in_flight_.load(); }

 private:
  // The prompt (or last user message) selects the script.
  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json body = json::parse(req.body);
    {
      std::lock_guard lock(mu_);
      bodies_.push_back(body);
    }
    ++requests_;
    const int now = ++in_flight_;
    for (int m = max_in_flight_.load(); now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
    }
    // Long enough for concurrent requests to overlap when nothing holds them back.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    --in_flight_;
    const std::string what = chat ? body["messages"].back()["content"].get<std::string>() : body["prompt"].get<std::string>();
    if (what == "bad request") {
      res.status = 400;
      res.set_content(R"({"error":{"message":"'max_tokens' must be positive","type":"invalid_request_error"}})", "application/json");
    } else if (what == "stream error") {
      stream_pieces(res, {"data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n",
                          "data: {\"error\":{\"message\":\"engine died\"}}\n\n"});
    } else if (what == "no stream") {
      res.set_content(R"({"choices":[{"index":0,"text":"whole answer"}],"usage":{"prompt_tokens":2,"completion_tokens":2}})",
                      "application/json");
    } else if (chat) {
      // llama.cpp style: role-only first chunk, an empty delta, content, no usage, `data:` without
      // space and CR LF line ends.
      const std::string reply = "reply to " + what;
      stream_pieces(res, {"data:{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n",
                          "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\r\n\r\n",
                          "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + reply.substr(0, 5) + "\"}}]}\r\n\r\n",
                          "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + reply.substr(5) +
                              "\"},\"finish_reason\":\"stop\"}]}\r\n\r\n",
                          "data:[DONE]\r\n\r\n"});
    } else {
      // Pieces cut inside lines and JSON; a keep-alive comment; a usage-only final chunk.
      stream_pieces(res, {": ping\n\n", "data: {\"choices\":[{\"index\":0,\"te", "xt\":\"Once\"}]}\n", "\ndata: {\"choi",
                          "ces\":[{\"index\":0,\"text\":\" upon\"}],\"usage\":null}\n\n",
                          "data: {\"choices\":[{\"index\":0,\"text\":\" a time\",\"finish_reason\":\"length\"}]}\n\n",
                          "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4,\"total_tokens\":9}}\n\n",
                          "data: [DONE]\n\n"});
    }
  }

  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> bodies_;
  std::atomic<int> requests_{0}, in_flight_{0}, max_in_flight_{0};
};

StreamRequest completion(const std::string& prompt) {
  StreamRequest r;
  r.model.assign(1, 'm');  // not `= "m"`, which trips g++ 12's false -Wrestrict warning here
  r.prompt = prompt;
  r.max_tokens = 4;
  return r;
}

TEST(ServerUrl, SplitsOriginAndApiPrefix) {
  const auto a = ServerUrl::parse("http://127.0.0.1:8080");
  EXPECT_EQ(a.origin, "http://127.0.0.1:8080");
  EXPECT_EQ(a.path(Endpoint::kCompletions), "/v1/completions");
  EXPECT_EQ(a.path(Endpoint::kChat), "/v1/chat/completions");
  EXPECT_EQ(ServerUrl::parse("http://h:1/v1/").path(Endpoint::kChat), "/v1/chat/completions");
  EXPECT_EQ(ServerUrl::parse("https://h/proxy").path(Endpoint::kCompletions), "/proxy/v1/completions");
  EXPECT_THROW(ServerUrl::parse("127.0.0.1:8080"), Error);
  EXPECT_THROW(ServerUrl::parse("ftp://h"), Error);
  EXPECT_THROW(ServerUrl::parse("http:///v1"), Error);
}

TEST(OpenAiStreamClient, RequestBodyAsksForAStreamWithUsage) {
  StreamRequest r = completion("hi");
  r.temperature = 0;
  const json c = json::parse(OpenAiStreamClient::request_body(Endpoint::kCompletions, r));
  EXPECT_EQ(c["prompt"], "hi");
  EXPECT_EQ(c["stream"], true);
  EXPECT_EQ(c["stream_options"]["include_usage"], true);
  EXPECT_EQ(c["max_tokens"], 4);
  EXPECT_EQ(c["temperature"], 0.0);
  EXPECT_FALSE(c.contains("ignore_eos")) << "extensions only when asked for";
  EXPECT_FALSE(c.contains("qos")) << "extensions only when asked for";
  r.messages = {{"user", "hello"}};
  r.ignore_eos = true;
  const json chat = json::parse(OpenAiStreamClient::request_body(Endpoint::kChat, r));
  EXPECT_FALSE(chat.contains("prompt"));
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role":"user","content":"hello"}])"));
  EXPECT_EQ(chat["ignore_eos"], true);
  r.qos = "batch";
  EXPECT_EQ(json::parse(OpenAiStreamClient::request_body(Endpoint::kChat, r))["qos"], "batch");
  EXPECT_EQ(json::parse(OpenAiStreamClient::request_body(Endpoint::kCompletions, r))["qos"], "batch");
}

TEST(OpenAiStreamClient, ReadsAStreamCutAtAwkwardPlaces) {
  FakeServer server;
  OpenAiStreamClient client(ServerUrl::parse(server.url()), "", 30);
  const StreamResult r = client.send(Endpoint::kCompletions, completion("story"));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.generated_text, "Once upon a time");
  EXPECT_EQ(r.text_chunks, 3);
  EXPECT_EQ(r.itl_s.size(), 2u);
  EXPECT_EQ(r.usage_prompt_tokens, 5);
  EXPECT_EQ(r.usage_completion_tokens, 4);
  EXPECT_GT(r.ttft_s, 0);
  EXPECT_GE(r.e2e_s, r.ttft_s);
}

TEST(OpenAiStreamClient, ChatStreamWithRoleOnlyAndEmptyChunksAndNoUsage) {
  FakeServer server;
  OpenAiStreamClient client(ServerUrl::parse(server.url() + "/v1"), "", 30);
  StreamRequest r = completion("");
  r.messages = {{"user", "hi"}};
  const StreamResult s = client.send(Endpoint::kChat, r);
  ASSERT_TRUE(s.ok) << s.error;
  EXPECT_EQ(s.generated_text, "reply to hi");
  EXPECT_EQ(s.text_chunks, 2) << "role-only and empty deltas are not tokens";
  EXPECT_FALSE(s.usage_completion_tokens.has_value());
}

TEST(OpenAiStreamClient, ErrorsComeBackAsFailedResults) {
  FakeServer server;
  OpenAiStreamClient client(ServerUrl::parse(server.url()), "", 30);
  const StreamResult bad = client.send(Endpoint::kCompletions, completion("bad request"));
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.http_status, 400);
  EXPECT_EQ(bad.error, "HTTP 400: 'max_tokens' must be positive");
  const StreamResult mid = client.send(Endpoint::kCompletions, completion("stream error"));
  EXPECT_FALSE(mid.ok);
  EXPECT_EQ(mid.error, "stream error: engine died");

  OpenAiStreamClient nowhere(ServerUrl::parse("http://127.0.0.1:1"), "", 5);
  const StreamResult refused = nowhere.send(Endpoint::kCompletions, completion("x"));
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.http_status, 0);
  EXPECT_FALSE(refused.error.empty());
}

TEST(OpenAiStreamClient, AcceptsAnAnswerThatIsNotStreamed) {
  FakeServer server;
  OpenAiStreamClient client(ServerUrl::parse(server.url()), "", 30);
  const StreamResult r = client.send(Endpoint::kCompletions, completion("no stream"));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.generated_text, "whole answer");
  EXPECT_EQ(r.text_chunks, 1);
  EXPECT_EQ(r.usage_completion_tokens, 2);
}

TEST(BenchRunner, MultiTurnSendsTheHistoryWithTheServersReplies) {
  FakeServer server;
  DatasetOptions o;
  o.kind = DatasetKind::kMultiTurn;
  o.num_prompts = 6;
  o.turns = 3;
  o.input_len = 5;
  o.output_len = 4;
  const Dataset d = make_dataset(o);
  BenchConfig cfg;
  cfg.base_urls = {server.url()};
  cfg.model = "m";
  cfg.endpoint = Endpoint::kChat;
  const BenchRun run = run_benchmark(cfg, d);
  const BenchReport rep = make_report(run);
  EXPECT_EQ(rep.completed, 6u);
  EXPECT_EQ(rep.failed, 0u);
  EXPECT_EQ(rep.total_output_tokens, 12) << "no usage: one token per text chunk";
  EXPECT_DOUBLE_EQ(rep.prefix_hit_rate.value(), 0.75);

  // Each conversation's third request carries both earlier turns and the replies to them.
  int third_turns = 0;
  for (const json& body : server.bodies()) {
    const json& m = body["messages"];
    if (m.size() != 5) continue;
    ++third_turns;
    const std::string u1 = m[0]["content"], u2 = m[2]["content"];
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["content"], "reply to " + u1);
    EXPECT_EQ(m[3]["content"], "reply to " + u2);
    bool found = false;
    for (const auto& c : d.conversations) found |= c.turns[0].prompt == u1 && c.turns[1].prompt == u2;
    EXPECT_TRUE(found) << "history turns come from one conversation, in order";
  }
  EXPECT_EQ(third_turns, 2);
}

TEST(BenchRunner, QosClassesAreSentPerConversationAndGaugesSampledDuringTheRun) {
  FakeServer server;
  DatasetOptions o;
  o.num_prompts = 8;
  o.input_len = 3;
  o.output_len = 4;
  Dataset d = make_dataset(o);
  assign_qos(d, parse_qos_mix("interactive=1,batch=1"), 5);
  BenchConfig cfg;
  cfg.base_urls = {server.url()};
  cfg.model = "m";
  cfg.max_concurrency = 2;  // 4 rounds of 30 ms: several samples 5 ms apart
  cfg.trace_ms = 5;
  const BenchRun run = run_benchmark(cfg, d);
  // Every request carried its conversation's class, and the record keeps it.
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 8u);
  for (const json& b : bodies) {
    size_t matches = 0;
    for (const auto& c : d.conversations) {
      if (c.turns[0].prompt == b["prompt"]) {
        ++matches;
        EXPECT_EQ(b["qos"], c.qos);
      }
    }
    EXPECT_EQ(matches, 1u);
  }
  for (const auto& rec : run.records) EXPECT_EQ(rec.qos, d.conversations[rec.conversation].qos);
  const BenchReport rep = make_report(run);
  ASSERT_EQ(rep.qos_classes.size(), 2u);
  EXPECT_EQ(rep.qos_classes[0].completed, 4u);
  EXPECT_EQ(rep.qos_classes[1].completed, 4u);
  EXPECT_DOUBLE_EQ(rep.preemptions.value(), 8) << "the counter's delta over the run";
  const auto& trace = run.servers.at(0).trace;
  ASSERT_GE(trace.size(), 3u);
  for (size_t i = 0; i < trace.size(); ++i) {
    ASSERT_TRUE(trace[i].kv_usage.has_value());
    EXPECT_GE(*trace[i].kv_usage, 0);
    EXPECT_LE(*trace[i].kv_usage, 0.2) << "at most 2 requests in flight";
    if (i > 0) {
      EXPECT_GT(trace[i].t_s, trace[i - 1].t_s);
    }
  }
  EXPECT_EQ(rep.kv_usage.samples, trace.size());
  // No sampling unless asked for.
  cfg.trace_ms = 0;
  EXPECT_TRUE(run_benchmark(cfg, d).servers.at(0).trace.empty());
}

TEST(BenchRunner, MaxConcurrencyCapsRequestsInFlight) {
  FakeServer server;
  DatasetOptions o;
  o.num_prompts = 12;
  o.input_len = 3;
  o.output_len = 4;
  BenchConfig cfg;
  cfg.base_urls = {server.url()};
  cfg.model = "m";
  cfg.max_concurrency = 2;
  size_t last_done = 0;
  cfg.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, 12u);
    EXPECT_EQ(done, last_done + 1);
    last_done = done;
  };
  const BenchReport rep = make_report(run_benchmark(cfg, make_dataset(o)));
  EXPECT_EQ(rep.completed, 12u);
  EXPECT_EQ(rep.total_output_tokens, 12 * 4) << "usage counts";
  EXPECT_EQ(last_done, 12u);
  EXPECT_LE(server.max_in_flight(), 2);
}

TEST(BenchRunner, FailuresAreCountedAndTheFirstErrorKept) {
  FakeServer server;
  const std::string path = ::testing::TempDir() + "/bench_failures.jsonl";
  {
    std::ofstream f(path);
    f << "{\"prompt\": \"story\"}\n{\"prompt\": \"bad request\"}\n{\"prompt\": \"stream error\"}\n";
  }
  DatasetOptions o;
  o.kind = DatasetKind::kFile;
  o.path = path;
  BenchConfig cfg;
  cfg.base_urls = {server.url()};
  cfg.model = "m";
  cfg.max_concurrency = 1;
  const BenchReport rep = make_report(run_benchmark(cfg, make_dataset(o)));
  EXPECT_EQ(rep.completed, 1u);
  EXPECT_EQ(rep.failed, 2u);
  EXPECT_EQ(rep.first_error, "HTTP 400: 'max_tokens' must be positive");
}

TEST(BenchRunner, CompletionsEndpointRefusesChatOnlyDatasets) {
  DatasetOptions o;
  o.kind = DatasetKind::kMultiTurn;
  o.num_prompts = 4;
  o.input_len = 3;
  o.output_len = 2;
  BenchConfig cfg;
  cfg.base_urls = {"http://127.0.0.1:1"};
  cfg.model = "m";
  EXPECT_THROW(run_benchmark(cfg, make_dataset(o)), Error);
}

}  // namespace
}  // namespace strata::bench
