// The runner's spreading of a load over several servers: --base-url list parsing, --route
// parsing, round-robin order, conversation stickiness and its stable hash, and runs against two
// scripted servers (cpp-httplib in this process) with per-server counts, /metrics and /health.
#include "bench_client/bench_runner.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "bench_client/bench_report.h"
#include "core/error.h"

namespace strata::bench {
namespace {

using nlohmann::json;

// The message of the strata::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Dataset multi_turn(int32_t conversations, int32_t turns, uint64_t seed = 0) {
  DatasetOptions o;
  o.kind = DatasetKind::kMultiTurn;
  o.num_prompts = conversations * turns;
  o.turns = turns;
  o.input_len = 12;
  o.output_len = 3;
  o.seed = seed;
  return make_dataset(o);
}

TEST(BaseUrls, RepeatedAndCommaSeparatedValuesInOrder) {
  EXPECT_EQ(parse_base_urls({"http://127.0.0.1:8080"}), (std::vector<std::string>{"http://127.0.0.1:8080"}));
  EXPECT_EQ(parse_base_urls({"http://a:1", "http://b:2/v1"}), (std::vector<std::string>{"http://a:1", "http://b:2/v1"}));
  EXPECT_EQ(parse_base_urls({"http://a:1,https://b:2", " http://c:3 , http://d:4"}),
            (std::vector<std::string>{"http://a:1", "https://b:2", "http://c:3", "http://d:4"}));
}

TEST(BaseUrls, BadEntriesAreClearErrors) {
  for (const std::string bad : {"http://a:1,,http://b:2", "http://a:1,", ",http://a:1", "", " , "}) {
    const std::string e = error_of([&] { parse_base_urls({bad}); });
    EXPECT_NE(e.find("empty entry"), std::string::npos) << "'" << bad << "': " << e;
  }
  std::string e = error_of([] { parse_base_urls({"http://a:1,ftp://b:2"}); });
  EXPECT_NE(e.find("unsupported scheme 'ftp'"), std::string::npos) << e;
  e = error_of([] { parse_base_urls({"http://a:1", "localhost:8080"}); });
  EXPECT_NE(e.find("must start with http:// or https://"), std::string::npos) << e;
  e = error_of([] { parse_base_urls({"http://a:1", "http://a:1/v1"}); });
  EXPECT_NE(e.find("same server twice"), std::string::npos) << e;
  e = error_of([] { parse_base_urls({}); });
  EXPECT_NE(e.find("no server"), std::string::npos) << e;
}

TEST(Route, ParsesTheTwoPoliciesAndRefusesOthers) {
  EXPECT_EQ(parse_route("round-robin"), Route::kRoundRobin);
  EXPECT_EQ(parse_route("conversation"), Route::kConversation);
  EXPECT_EQ(route_name(Route::kRoundRobin), "round-robin");
  EXPECT_EQ(route_name(Route::kConversation), "conversation");
  const std::string e = error_of([] { parse_route("random"); });
  EXPECT_NE(e.find("--route must be round-robin or conversation, got 'random'"), std::string::npos) << e;
}

TEST(Route, RoundRobinSendsRequestIToServerIModN) {
  DatasetOptions o;
  o.num_prompts = 7;
  o.input_len = 4;
  EXPECT_EQ(route_requests(make_dataset(o), Route::kRoundRobin, 3, 256), (std::vector<size_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(route_requests(make_dataset(o), Route::kRoundRobin, 1, 256), (std::vector<size_t>(7, 0)));
  // Requests, not conversations, take turns: the turns of one conversation go to different servers.
  EXPECT_EQ(route_requests(multi_turn(2, 3), Route::kRoundRobin, 2, 256), (std::vector<size_t>{0, 1, 0, 1, 0, 1}));
}

TEST(Route, ConversationKeepsEveryTurnOnOneServerAndUsesThemAll) {
  const Dataset d = multi_turn(60, 3);
  const std::vector<size_t> s = route_requests(d, Route::kConversation, 3, 256);
  ASSERT_EQ(s.size(), 180u);
  std::map<size_t, size_t> conversations_per_server;
  for (size_t c = 0; c < 60; ++c) {
    EXPECT_EQ(s[3 * c], s[3 * c + 1]) << "conversation " << c;
    EXPECT_EQ(s[3 * c], s[3 * c + 2]) << "conversation " << c;
    ++conversations_per_server[s[3 * c]];
  }
  ASSERT_EQ(conversations_per_server.size(), 3u);
  for (const auto& [server, n] : conversations_per_server) EXPECT_GE(n, 8u) << "server " << server << " of 60 conversations";
  // The same dataset routes the same way every time, and a conversation's server depends on its
  // first turn only, not on how many turns it has.
  EXPECT_EQ(route_requests(d, Route::kConversation, 3, 256), s);
  Dataset first_turns = d;
  for (auto& c : first_turns.conversations) c.turns.resize(1);
  const std::vector<size_t> one_turn = route_requests(first_turns, Route::kConversation, 3, 256);
  for (size_t c = 0; c < 60; ++c) EXPECT_EQ(one_turn[c], s[3 * c]) << "conversation " << c;
}

TEST(Route, StableHashIsFixedFnv1aWithAvalanche) {
  // Fixed values: routing must not change between runs, builds or standard libraries.
  EXPECT_EQ(stable_hash(""), 0xf52a15e9a9b5e89bULL);
  EXPECT_EQ(stable_hash("id:1"), 0x2fa9552df4b80ff6ULL);
  EXPECT_EQ(stable_hash("text:the cat"), 0x7296e4214e796281ULL);
  EXPECT_NE(stable_hash("text:hello"), stable_hash("text:hellp"));
  // Spread: 4000 keys over 4 servers come out near 1000 each.
  std::vector<size_t> count(4);
  for (int i = 0; i < 4000; ++i) ++count[stable_hash("id:" + std::to_string(i)) % 4];
  for (size_t n : count) EXPECT_NEAR(static_cast<double>(n), 1000, 120);
}

TEST(Route, RoutingKeyPrefersTheIdThenTheStartOfTheFirstTurn) {
  Conversation c;
  c.turns.push_back({"abcdefgh", {}, 1, 1});
  EXPECT_EQ(routing_key(c, 4), "text:abcd");
  EXPECT_EQ(routing_key(c, 100), "text:abcdefgh");
  c.turns.push_back({"later turn", {}, 1, 2});
  EXPECT_EQ(routing_key(c, 4), "text:abcd") << "only the first turn counts";
  c.id = "conv-7";
  EXPECT_EQ(routing_key(c, 4), "id:conv-7");

  // A chat line: a shared system prompt is skipped; a growing message list keeps its key.
  Conversation first, later, other;
  first.turns.push_back({"", {{"system", "be brief"}, {"user", "tell me a story"}}, 1, 1});
  later.turns.push_back({"", {{"system", "be brief"}, {"user", "tell me a story"}, {"assistant", "once"}, {"user", "more"}}, 1, 1});
  other.turns.push_back({"", {{"system", "be brief"}, {"user", "a poem"}}, 1, 1});
  EXPECT_EQ(routing_key(first, 256), "text:tell me a story");
  EXPECT_EQ(routing_key(first, 256), routing_key(later, 256));
  EXPECT_NE(routing_key(first, 256), routing_key(other, 256));
  Conversation only_system;
  only_system.turns.push_back({"", {{"system", "hi"}}, 1, 1});
  EXPECT_EQ(routing_key(only_system, 256), "text:hi");
}

TEST(Route, SharedPrefixPromptsStayTogetherWhenTheHashedTextIsThePrefix) {
  DatasetOptions o;
  o.kind = DatasetKind::kSharedPrefix;
  o.num_prompts = 40;
  o.input_len = 60;
  o.shared_prefix_len = 40;  // 40 words: well over 20 characters
  const Dataset d = make_dataset(o);
  const std::vector<size_t> narrow = route_requests(d, Route::kConversation, 4, 20);
  EXPECT_EQ(std::set<size_t>(narrow.begin(), narrow.end()).size(), 1u) << "one prefix group, one server";
  const std::vector<size_t> wide = route_requests(d, Route::kConversation, 4, 100000);
  EXPECT_GT(std::set<size_t>(wide.begin(), wide.end()).size(), 1u) << "whole prompts differ";
}

TEST(Route, JsonlConversationIdsGroupLines) {
  const std::string path = ::testing::TempDir() + "/bench_route_ids.jsonl";
  {
    std::ofstream f(path);
    for (int i = 0; i < 40; ++i) {
      // The same text on every line: only the ids tell the conversations apart.
      f << "{\"prompt\": \"same text\", \"conversation_id\": " << (i % 2 ? "\"s" + std::to_string(i / 4) + "\"" : std::to_string(i / 4))
        << "}\n";
    }
  }
  DatasetOptions o;
  o.kind = DatasetKind::kFile;
  o.path = path;
  const Dataset d = make_dataset(o);
  ASSERT_EQ(d.conversations.size(), 40u);
  EXPECT_EQ(d.conversations[0].id, "0");
  EXPECT_EQ(d.conversations[1].id, "s0");
  const std::vector<size_t> s = route_requests(d, Route::kConversation, 3, 256);
  std::map<std::string, std::set<size_t>> servers_of_id;
  for (size_t i = 0; i < s.size(); ++i) servers_of_id[d.conversations[i].id].insert(s[i]);
  std::set<size_t> used;
  for (const auto& [id, servers] : servers_of_id) {
    EXPECT_EQ(servers.size(), 1u) << "id " << id;
    used.insert(*servers.begin());
  }
  EXPECT_GT(used.size(), 1u);

  {
    std::ofstream f(path);
    f << "{\"prompt\": \"x\", \"conversation_id\": [1]}\n";
  }
  const std::string e = error_of([&] { make_dataset(o); });
  EXPECT_NE(e.find(":1: \"conversation_id\" must be a non-empty string or an integer"), std::string::npos) << e;
}

// A scripted server: one-chunk streams, counters in /metrics that grow with its requests, /health.
class ReplicaServer {
 public:
  ReplicaServer() {
    auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      {
        std::lock_guard lock(mu_);
        bodies_.push_back(body);
      }
      ++requests_;
      const bool chat = body.contains("messages");
      const json chunk = chat ? json{{"choices", {{{"index", 0}, {"delta", {{"content", "ok"}}}}}}}
                              : json{{"choices", {{{"index", 0}, {"text", "ok"}}}}};
      const json usage = {{"choices", json::array()}, {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 2}}}};
      res.set_content("data: " + chunk.dump() + "\n\ndata: " + usage.dump() + "\n\ndata: [DONE]\n\n", "text/event-stream");
    };
    svr_.Post("/v1/completions", handle);
    svr_.Post("/v1/chat/completions", handle);
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const int n = requests_.load();
      res.set_content("strata_prefix_cache_hit_tokens_total " + std::to_string(hits_per_request_ * n) +
                          "\nstrata_prefix_cache_queried_tokens_total " + std::to_string(10 * n) + "\n",
                      "text/plain");
    });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      ++health_;
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::yield();
  }
  explicit ReplicaServer(int hits_per_request) : ReplicaServer() { hits_per_request_ = hits_per_request; }
  ~ReplicaServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }
  int health_probes() const { return health_.load(); }
  std::vector<json> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0}, health_{0};
  int hits_per_request_ = 5;
  std::mutex mu_;
  std::vector<json> bodies_;
};

TEST(MultiServerRun, RoundRobinSplitsTheLoadAndReportsEachServer) {
  ReplicaServer a(5), b(10);
  DatasetOptions o;
  o.num_prompts = 9;
  o.input_len = 4;
  o.output_len = 2;
  BenchConfig cfg;
  cfg.base_urls = {a.url(), b.url()};
  cfg.model = "m";
  cfg.max_concurrency = 3;
  cfg.probe_health_ms = 2;
  const BenchRun run = run_benchmark(cfg, make_dataset(o));
  ASSERT_EQ(run.servers.size(), 2u);
  for (size_t i = 0; i < run.records.size(); ++i) EXPECT_EQ(run.records[i].server, i % 2);
  EXPECT_EQ(a.requests(), 5);
  EXPECT_EQ(b.requests(), 4);
  EXPECT_GE(a.health_probes(), 1);
  EXPECT_GE(b.health_probes(), 1);

  const BenchReport r = make_report(run);
  EXPECT_EQ(r.completed, 9u);
  ASSERT_EQ(r.servers.size(), 2u);
  EXPECT_EQ(r.servers[0].base_url, a.url());
  EXPECT_EQ(r.servers[0].requests, 5u);
  EXPECT_EQ(r.servers[1].requests, 4u);
  EXPECT_EQ(r.servers[0].completed + r.servers[1].completed, r.completed);
  EXPECT_EQ(r.servers[0].total_output_tokens, 10);
  EXPECT_EQ(r.servers[1].ttft_ms.count, 4u);
  EXPECT_NEAR(r.servers[0].request_throughput + r.servers[1].request_throughput, r.request_throughput, 1e-9);
  // /metrics per server, summed for the total: a 50% hit rate on a, 100% on b.
  EXPECT_DOUBLE_EQ(r.servers[0].prefix_hit_rate.value(), 0.5);
  EXPECT_DOUBLE_EQ(r.servers[1].prefix_hit_rate.value(), 1.0);
  EXPECT_DOUBLE_EQ(r.prefix_cache->hit_tokens, 5 * 5 + 10 * 4);
  EXPECT_DOUBLE_EQ(r.prefix_cache->queried_tokens, 90);
  EXPECT_NEAR(r.prefix_hit_rate.value(), 65.0 / 90, 1e-12);
  // /health probes per server, pooled for the total.
  EXPECT_GE(r.servers[0].health_ms.count, 1u);
  EXPECT_GE(r.servers[1].health_ms.count, 1u);
  EXPECT_EQ(r.health_ms.count, r.servers[0].health_ms.count + r.servers[1].health_ms.count);

  const std::string text = format_report(r);
  EXPECT_NE(text.find("Server 1 of 2"), std::string::npos) << text;
  EXPECT_NE(text.find(b.url()), std::string::npos) << text;
  const json j = report_to_json(r);
  ASSERT_EQ(j["servers"].size(), 2u);
  EXPECT_EQ(j["servers"][0]["base_url"], a.url());
  EXPECT_EQ(j["servers"][0]["requests"], 5);
  EXPECT_EQ(j["servers"][1]["failed"], 0);
  EXPECT_TRUE(j["servers"][1]["ttft_ms"]["p99"].is_number());
  EXPECT_EQ(j["servers"][1]["prefix_hit_tokens"], 40.0);
  EXPECT_EQ(j["prefix_queried_tokens"], 90.0);
}

TEST(MultiServerRun, ConversationRouteSendsEachConversationToOneServer) {
  ReplicaServer a, b;
  const Dataset d = multi_turn(16, 3, 5);
  BenchConfig cfg;
  cfg.base_urls = {a.url(), b.url()};
  cfg.route = Route::kConversation;
  cfg.model = "m";
  cfg.endpoint = Endpoint::kChat;
  const BenchRun run = run_benchmark(cfg, d);
  const BenchReport r = make_report(run);
  EXPECT_EQ(r.completed, 48u);
  const std::vector<size_t> expected = route_requests(d, Route::kConversation, 2, cfg.route_prefix_chars);
  for (size_t i = 0; i < run.records.size(); ++i) EXPECT_EQ(run.records[i].server, expected[i]);
  // What each server saw: every request of a conversation (known by its first user message).
  std::map<std::string, std::set<int>> servers_of;
  int which = 0;
  for (ReplicaServer* s : {&a, &b}) {
    for (const json& body : s->bodies()) servers_of[body["messages"][0]["content"].get<std::string>()].insert(which);
    ++which;
  }
  EXPECT_EQ(servers_of.size(), 16u);
  for (const auto& [first, servers] : servers_of) EXPECT_EQ(servers.size(), 1u) << first;
  EXPECT_GT(a.requests(), 0);
  EXPECT_GT(b.requests(), 0);
  EXPECT_EQ(a.requests() % 3, 0);
  ASSERT_EQ(r.servers.size(), 2u);
  EXPECT_EQ(r.servers[0].requests, static_cast<size_t>(a.requests()));
  EXPECT_EQ(r.servers[0].conversations + r.servers[1].conversations, 16u) << "no conversation is split";
  EXPECT_EQ(r.servers[0].requests, 3 * r.servers[0].conversations);
}

TEST(MultiServerRun, AServerThatIsDownFailsOnlyItsShare) {
  ReplicaServer a;
  DatasetOptions o;
  o.num_prompts = 6;
  o.input_len = 4;
  o.output_len = 2;
  BenchConfig cfg;
  cfg.base_urls = {a.url(), "http://127.0.0.1:1"};
  cfg.model = "m";
  cfg.timeout_s = 10;
  const BenchReport r = make_report(run_benchmark(cfg, make_dataset(o)));
  EXPECT_EQ(r.completed, 3u);
  EXPECT_EQ(r.failed, 3u);
  ASSERT_EQ(r.servers.size(), 2u);
  EXPECT_EQ(r.servers[0].failed, 0u);
  EXPECT_EQ(r.servers[1].failed, 3u);
  EXPECT_EQ(r.servers[1].completed, 0u);
  EXPECT_FALSE(r.servers[1].prefix_cache.has_value()) << "no /metrics there";
  EXPECT_DOUBLE_EQ(r.prefix_hit_rate.value(), 0.5) << "the total covers the server that has the counters";
  EXPECT_TRUE(report_to_json(r)["servers"][1]["prefix_hit_rate"].is_null());
}

TEST(MultiServerRun, OneServerKeepsTheReportAsBefore) {
  ReplicaServer a;
  DatasetOptions o;
  o.num_prompts = 3;
  o.input_len = 4;
  o.output_len = 2;
  BenchConfig cfg;
  cfg.base_urls = {a.url()};
  cfg.model = "m";
  const BenchReport r = make_report(run_benchmark(cfg, make_dataset(o)));
  EXPECT_EQ(r.completed, 3u);
  EXPECT_EQ(format_report(r).find("Server 1"), std::string::npos) << "no per-server section for one server";
  const json j = report_to_json(r);
  ASSERT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["requests"], 3);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate"].get<double>(), 0.5);
}

}  // namespace
}  // namespace strata::bench
