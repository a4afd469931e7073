#include "bench_client/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.h"
#include "core/error.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Conversations released by the arrival clock, taken by the workers.
class ArrivalQueue {
 public:
  void push(size_t conversation) {
    {
      std::lock_guard lock(mu_);
      items_.push_back(conversation);
    }
    cv_.notify_one();
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // The next conversation, or nullopt once closed and drained.
  std::optional<size_t> pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    const size_t c = items_.front();
    items_.pop_front();
    return c;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> items_;
  bool closed_ = false;
};

std::optional<MetricSamples> scrape(OpenAiStreamClient& client, const ServerUrl& url) {
  auto text = client.get(url.metrics_path());
  if (!text) return std::nullopt;
  return parse_prometheus_text(*text);
}

void check_endpoint(const BenchConfig& cfg, const Dataset& d) {
  if (cfg.endpoint == Endpoint::kChat) return;
  for (const auto& c : d.conversations) {
    if (c.turns.size() > 1) fail("multi-turn conversations need --endpoint chat");
    for (const auto& t : c.turns) {
      if (!t.messages.empty()) fail("dataset lines with \"messages\" need --endpoint chat");
    }
  }
}

}  // namespace

Route parse_route(std::string_view s) {
  if (s == "round-robin") return Route::kRoundRobin;
  if (s == "conversation") return Route::kConversation;
  fail("--route must be round-robin or conversation, got '{}'", s);
}

std::string_view route_name(Route r) {
  switch (r) {
    case Route::kRoundRobin: return "round-robin";
    case Route::kConversation: return "conversation";
  }
  return "?";
}

std::vector<std::string> parse_base_urls(const std::vector<std::string>& values) {
  std::vector<std::string> urls;
  std::vector<std::string> seen;  // origin + API prefix: http://h:1 and http://h:1/v1 are one server
  for (const std::string& value : values) {
    size_t start = 0;
    while (true) {
      const size_t comma = value.find(',', start);
      std::string entry = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t b = entry.find_first_not_of(" \t");
      entry = b == std::string::npos ? "" : entry.substr(b, entry.find_last_not_of(" \t") - b + 1);
      if (entry.empty()) fail("--base-url '{}' has an empty entry (URLs are separated by single commas)", value);
      const ServerUrl u = ServerUrl::parse(entry);
      const std::string server = u.origin + u.api_prefix;
      for (size_t i = 0; i < seen.size(); ++i) {
        if (seen[i] == server) fail("--base-url names the same server twice: '{}' and '{}'", urls[i], entry);
      }
      seen.push_back(server);
      urls.push_back(std::move(entry));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (urls.empty()) fail("--base-url: no server given");
  return urls;
}

std::string routing_key(const Conversation& c, size_t prefix_chars) {
  if (!c.id.empty()) return "id:" + c.id;
  if (c.turns.empty()) return "text:";
  const Turn& t = c.turns.front();
  std::string_view text = t.prompt;
  if (!t.messages.empty()) {
    text = t.messages.front().content;
    for (const auto& m : t.messages) {
      if (m.role != "system") {
        text = m.content;
        break;
      }
    }
  }
  return "text:" + std::string(text.substr(0, prefix_chars));
}

uint64_t stable_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  // splitmix64's finalizer: FNV-1a's low bits, which `% n` keeps, mix poorly on their own.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

std::vector<size_t> route_requests(const Dataset& d, Route route, size_t n_servers, size_t prefix_chars) {
  STRATA_CHECK(n_servers >= 1);
  std::vector<size_t> server;
  server.reserve(d.num_requests());
  for (const Conversation& c : d.conversations) {
    const size_t sticky = route == Route::kConversation ? stable_hash(routing_key(c, prefix_chars)) % n_servers : 0;
    for (size_t t = 0; t < c.turns.size(); ++t) {
      server.push_back(route == Route::kRoundRobin ? server.size() % n_servers : sticky);
    }
  }
  return server;
}

std::vector<double> arrival_times(size_t n, double rate, uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (rate <= 0) return t;
  // Own inverse-CDF draw instead of std::exponential_distribution, whose output differs
  // between standard libraries: the same seed gives the same schedule everywhere.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  double now = 0;
  for (size_t i = 1; i < n; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    now += -std::log1p(-u) / rate;
    t[i] = now;
  }
  return t;
}

std::vector<double> ramp_arrival_times(size_t n, double from, double to, uint64_t seed) {
  STRATA_CHECK(from > 0 && to > 0);
  std::vector<double> t = arrival_times(n, 1.0, seed);  // unit-rate times: the cumulative rate at each arrival
  const double span = 2.0 * static_cast<double>(n) / (from + to);
  const double c = (to - from) / (2.0 * span);  // cumulative rate: from * x + c * x^2 for x in [0, span]
  for (double& s : t) {
    if (s <= static_cast<double>(n)) {
      // The root of c x^2 + from x - s = 0 in [0, span], in the form that stays exact as c -> 0.
      s = 2.0 * s / (from + std::sqrt(std::max(0.0, from * from + 4.0 * c * s)));
    } else {
      s = span + (s - static_cast<double>(n)) / to;
    }
  }
  return t;
}

BenchRun run_benchmark(const BenchConfig& cfg, const Dataset& d) {
  if (cfg.base_urls.empty()) fail("no --base-url given");
  std::vector<ServerUrl> urls;
  for (const auto& u : cfg.base_urls) urls.push_back(ServerUrl::parse(u));
  const size_t n_servers = urls.size();
  check_endpoint(cfg, d);
  const TokenCounter prompt_counter = cfg.prompt_counter ? cfg.prompt_counter : TokenCounter(count_words);

  BenchRun run;
  const std::vector<size_t> routes = route_requests(d, cfg.route, n_servers, cfg.route_prefix_chars);
  std::vector<size_t> first_record(d.conversations.size());
  for (size_t c = 0; c < d.conversations.size(); ++c) {
    first_record[c] = run.records.size();
    for (size_t t = 0; t < d.conversations[c].turns.size(); ++t) {
      RequestRecord r;
      r.conversation = c;
      r.turn = t;
      r.server = routes[run.records.size()];
      r.qos = d.conversations[c].qos;
      run.records.push_back(std::move(r));
    }
  }
  const size_t total = run.records.size();

  run.servers.resize(n_servers);
  auto scrape_all = [&](std::optional<MetricSamples> ServerRun::*field) {
    for (size_t s = 0; s < n_servers; ++s) {
      OpenAiStreamClient probe(urls[s], cfg.api_key, std::min(cfg.timeout_s, 10.0));
      run.servers[s].*field = scrape(probe, urls[s]);
    }
  };
  for (size_t s = 0; s < n_servers; ++s) run.servers[s].base_url = cfg.base_urls[s];
  scrape_all(&ServerRun::metrics_before);

  // Counting prompt tokens may call a tokenizer, whose counter is only promised to be
  // deterministic, not thread-safe: serialise the counters.
  std::mutex count_mu;
  std::mutex progress_mu;
  size_t done = 0;

  // `client(server)`: the calling worker's client of that server.
  auto run_conversation = [&](const std::function<OpenAiStreamClient&(size_t)>& client, size_t c) {
    const Conversation& conv = d.conversations[c];
    std::vector<ChatMessage> history;
    bool broken = false;
    for (size_t t = 0; t < conv.turns.size(); ++t) {
      const Turn& turn = conv.turns[t];
      RequestRecord& rec = run.records[first_record[c] + t];
      StreamRequest req;
      req.model = cfg.model;
      req.max_tokens = turn.max_tokens;
      req.temperature = cfg.temperature;
      req.ignore_eos = cfg.ignore_eos;
      req.qos = conv.qos;
      int32_t counted_prompt = turn.prompt_len;
      if (cfg.endpoint == Endpoint::kChat) {
        if (!turn.messages.empty()) {
          req.messages = turn.messages;
        } else {
          req.messages = history;
          req.messages.push_back({"user", turn.prompt});
          if (!history.empty()) {
            std::lock_guard lock(count_mu);
            counted_prompt = 0;
            for (const auto& m : req.messages) counted_prompt += prompt_counter(m.content);
          }
        }
      } else {
        req.prompt = turn.prompt;
      }
      if (broken) {
        rec.result.error = "not sent: an earlier turn of its conversation failed";
      } else {
        rec.result = client(rec.server).send(cfg.endpoint, req);
      }
      if (rec.result.ok) {
        rec.usage_reported = rec.result.usage_completion_tokens.has_value();
        rec.prompt_tokens = rec.result.usage_prompt_tokens.value_or(counted_prompt);
        if (rec.result.usage_completion_tokens) {
          rec.output_tokens = *rec.result.usage_completion_tokens;
        } else if (cfg.output_counter) {
          std::lock_guard lock(count_mu);
          rec.output_tokens = cfg.output_counter(rec.result.generated_text);
        } else {
          rec.output_tokens = rec.result.text_chunks;
        }
        history = req.messages;
        history.push_back({"assistant", rec.result.generated_text});
      } else {
        broken = true;
      }
      if (cfg.progress) {
        std::lock_guard lock(progress_mu);
        cfg.progress(++done, total);
      }
    }
  };

  const size_t n_conv = d.conversations.size();
  const size_t n_workers = std::max<size_t>(
      1, cfg.max_concurrency > 0 ? std::min(n_conv, static_cast<size_t>(cfg.max_concurrency)) : n_conv);
  const bool ramp = cfg.ramp_from > 0 && cfg.ramp_to > 0;
  const std::vector<double> arrivals = ramp ? ramp_arrival_times(n_conv, cfg.ramp_from, cfg.ramp_to, cfg.seed)
                                            : arrival_times(n_conv, cfg.request_rate, cfg.seed);
  ArrivalQueue queue;
  std::vector<std::thread> workers;
  workers.reserve(n_workers);
  const auto start = Clock::now();
  // The health probers, one per server: how long each takes to answer GET /health while loaded.
  std::atomic<bool> stop_probe{false};
  std::vector<std::thread> probers;
  if (cfg.probe_health_ms > 0) {
    for (size_t s = 0; s < n_servers; ++s) {
      probers.emplace_back([&, s] {
        ServerRun& server = run.servers[s];
        OpenAiStreamClient client(urls[s], cfg.api_key, std::min(cfg.timeout_s, 10.0));
        const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(cfg.probe_health_ms));
        // At least one probe per server, however soon the run ends (a short run on a loaded
        // machine could finish before this thread first ran, and report no health at all).
        do {
          const auto t0 = Clock::now();
          const bool ok = client.get("/health").has_value();
          server.health_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          if (!ok) ++server.health_failures;
          std::this_thread::sleep_until(t0 + gap);
        } while (!stop_probe.load());
      });
    }
  }
  // The gauge samplers, one per server (--kv-sample-ms).
  if (cfg.trace_ms > 0) {
    for (size_t s = 0; s < n_servers; ++s) {
      probers.emplace_back([&, s] {
        std::vector<TracePoint>& trace = run.servers[s].trace;
        OpenAiStreamClient client(urls[s], cfg.api_key, std::min(cfg.timeout_s, 10.0));
        const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(cfg.trace_ms));
        while (!stop_probe.load()) {
          const auto t0 = Clock::now();
          if (auto m = scrape(client, urls[s])) {
            TracePoint p = trace_point(*m);
            p.t_s = std::chrono::duration<double>(t0 - start).count();
            p.server = s;
            trace.push_back(std::move(p));
          }
          std::this_thread::sleep_until(t0 + gap);
        }
      });
    }
  }
  for (size_t w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      // A client per server, made when the worker first sends there.
      std::vector<std::unique_ptr<OpenAiStreamClient>> clients(n_servers);
      const std::function<OpenAiStreamClient&(size_t)> client = [&](size_t s) -> OpenAiStreamClient& {
        if (!clients[s]) clients[s] = std::make_unique<OpenAiStreamClient>(urls[s], cfg.api_key, cfg.timeout_s);
        return *clients[s];
      };
      while (auto c = queue.pop()) run_conversation(client, *c);
    });
  }
  for (size_t c = 0; c < n_conv; ++c) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[c])));
    queue.push(c);
  }
  queue.close();
  for (auto& w : workers) w.join();
  run.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  stop_probe.store(true);
  for (auto& p : probers) p.join();

  scrape_all(&ServerRun::metrics_after);
  return run;
}

}  // namespace strata::bench
