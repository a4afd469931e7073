// Black-box tests of the queue order seen through HTTP: `user` (the tenant) with `--scheduling fair`
// and `--tenant-weight`, `priority` with `--scheduling priority`, against `fcfs`. With
// `--max-seqs 1` requests run one at a time, so the order in which responses come back is the
// order the scheduler admitted them. A blocker request (a stream of tens of thousands of tokens
// from its own tenant) holds the engine while the test queues the others in known groups, each
// confirmed on /metrics (strata_engine_requests_submitted_total) before the next is sent; then
// the test hangs up on the blocker, which cancels it, and the queue drains. No timing is asserted.
// The model is a one-layer random Llama with a 64K context (so that the blocker cannot finish on
// its own first) and stories260K's vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

// Per request: long enough that consecutive finishes are far apart next to the time a response
// takes to reach its client thread.
constexpr int kTokens = 2000;

std::string g_model;  // made once by the test environment

struct Sent {
  std::string user;
  int priority = 0;
};

// Holds the engine with the blocker, sends requests in groups (each once the earlier ones are
// queued in the engine), then lets the queue drain and records the order responses arrive in.
class FinishOrder {
 public:
  // Starts the blocker and waits until it streams.
  explicit FinishOrder(ServerProcess& s) : server_(s), blocker_(s.port()) {
    submitted_before_ = metric("strata_engine_requests_submitted_total");
    const Json body = {{"prompt", "Once"}, {"max_tokens", 60000}, {"temperature", 0}, {"ignore_eos", true},
                       {"stream", true}, {"user", "blocker"}, {"priority", 1000}};
    blocker_.post("/v1/completions", body.dump());
    blocker_.read_until("data: ", 3);
    sent_ = 1;
  }
  ~FinishOrder() {
    for (auto& t : threads_) t.join();
  }

  void send_group(const std::vector<Sent>& group) {
    for (const Sent& r : group) {
      threads_.emplace_back([this, r] {
        Json body = {{"prompt", "Once upon a time"}, {"max_tokens", kTokens}, {"temperature", 0}, {"ignore_eos", true}};
        if (!r.user.empty()) body["user"] = r.user;
        if (r.priority != 0) body["priority"] = r.priority;
        auto res = server_.client()->Post("/v1/completions", body.dump(), "application/json");
        std::lock_guard<std::mutex> lock(mutex_);
        if (!res || res->status != 200) {
          order_.push_back("<failed>");
          return;
        }
        EXPECT_EQ(Json::parse(res->body)["usage"]["completion_tokens"], kTokens);
        order_.push_back(r.user + (r.priority ? "!" : ""));
      });
    }
    sent_ += static_cast<int>(group.size());
    wait_queued(sent_);
  }

  // Hangs up on the blocker (which cancels it) and returns the users (with "!" after those with
  // a priority) in the order their responses arrived.
  std::vector<std::string> wait() {
    blocker_.close();
    for (auto& t : threads_) t.join();
    threads_.clear();
    return order_;
  }

 private:
  double metric(const std::string& name) {
    auto r = server_.client()->Get("/metrics");
    return r && r->status == 200 ? test::parse_prometheus(r->body)[name] : -1;
  }

  // Until every request sent so far is queued in the engine, which orders them by that moment.
  void wait_queued(int n) {
    for (int i = 0; i < 20000; ++i) {
      if (metric("strata_engine_requests_submitted_total") - submitted_before_ >= n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "requests did not reach the engine";
  }

  ServerProcess& server_;
  test::RawConnection blocker_;
  double submitted_before_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::vector<std::string> order_;
  int sent_ = 0;
};

std::vector<std::string> flood_then_one(ServerProcess& s, int n_flood, const Sent& flood, const Sent& late) {
  FinishOrder f(s);
  f.send_group(std::vector<Sent>(static_cast<size_t>(n_flood), flood));
  f.send_group({late});
  return f.wait();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

ServerProcess::Options options(std::vector<std::string> args) {
  ServerProcess::Options o;
  o.model = g_model;
  o.args = {"--max-seqs", "1"};
  o.args.insert(o.args.end(), args.begin(), args.end());
  return o;
}

class ServerScheduling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("strata-sched");
    g_model = dir_ + "/long-ctx.gguf";
    auto r = test::run_command({test::strata_bin(), "gguf", "make-random", "--n-layer", "1", "--n-embd", "64", "--n-head", "2",
                                "--n-head-kv", "2", "--n-ff", "128", "--ctx", "65536", "--vocab-from",
                                test::shared_path("models/stories260K.gguf"), "--dtype", "f32", "--seed", "1", "-o", g_model});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_;
};
std::string ServerScheduling::dir_;

TEST_F(ServerScheduling, FcfsServesInArrivalOrderWhateverUserAndPriority) {
  ServerProcess s(options({"--scheduling", "fcfs"}));
  auto order = flood_then_one(s, 6, {"a", 0}, {"b", 0});
  EXPECT_EQ(joined(order), "a a a a a a b ");
  order = flood_then_one(s, 6, {"a", 0}, {"b", 9});
  EXPECT_EQ(joined(order), "a a a a a a b! ");
}

TEST_F(ServerScheduling, FairLetsALateTenantOvertakeAFlood) {
  ServerProcess s(options({"--scheduling", "fair"}));
  const auto order = flood_then_one(s, 6, {"a", 0}, {"b", 0});
  // a's counter was lifted to the blocker's when a queued, b's to a's when b queued: a tie, which
  // arrival breaks. Once a has been served, b has the smaller counter.
  EXPECT_EQ(joined(order), "a b a a a a a ");
}

TEST_F(ServerScheduling, FairSharesByTenantWeight) {
  // Two floods of 6, a's queued first, every request the same cost C. Equal weights: turns
  // alternate. b weighing 4: b's counter grows by C/4 per request, so b gets four turns for each
  // of a's until a tie (arrival breaks it, for a).
  std::vector<std::string> equal, weighted;
  {
    ServerProcess s(options({"--scheduling", "fair"}));
    FinishOrder f(s);
    f.send_group(std::vector<Sent>(6, {"a", 0}));
    f.send_group(std::vector<Sent>(6, {"b", 0}));
    equal = f.wait();
  }
  {
    ServerProcess s(options({"--scheduling", "fair", "--tenant-weight", "b=4", "--tenant-weight", "a=1"}));
    FinishOrder f(s);
    f.send_group(std::vector<Sent>(6, {"a", 0}));
    f.send_group(std::vector<Sent>(6, {"b", 0}));
    weighted = f.wait();
  }
  EXPECT_EQ(joined(equal), "a b a b a b a b a b a b ");
  EXPECT_EQ(joined(weighted), "a b b b b a b b a a a a ");
}

TEST_F(ServerScheduling, PriorityServesTheHigherPriorityFirst) {
  ServerProcess s(options({"--scheduling", "priority"}));
  auto order = flood_then_one(s, 6, {"a", 0}, {"b", 9});
  EXPECT_EQ(joined(order), "b! a a a a a a ");
  // A lower priority than the others waits for all of them, though it arrived before most.
  FinishOrder f(s);
  f.send_group({{"c", 0}});
  f.send_group({{"low", -5}});
  f.send_group(std::vector<Sent>(5, {"a", 0}));
  order = f.wait();
  EXPECT_EQ(joined(order), "c a a a a a low! ");
}

}  // namespace
}  // namespace strata
