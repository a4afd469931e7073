#include "bench_client/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

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

BenchRun run_benchmark(const BenchConfig& cfg, const Dataset& d) {
  const ServerUrl url = ServerUrl::parse(cfg.base_url);
  check_endpoint(cfg, d);
  const TokenCounter prompt_counter = cfg.prompt_counter ? cfg.prompt_counter : TokenCounter(count_words);

  BenchRun run;
  std::vector<size_t> first_record(d.conversations.size());
  for (size_t c = 0; c < d.conversations.size(); ++c) {
    first_record[c] = run.records.size();
    for (size_t t = 0; t < d.conversations[c].turns.size(); ++t) {
      RequestRecord r;
      r.conversation = c;
      r.turn = t;
      run.records.push_back(std::move(r));
    }
  }
  const size_t total = run.records.size();

  {
    OpenAiStreamClient probe(url, cfg.api_key, std::min(cfg.timeout_s, 10.0));
    run.metrics_before = scrape(probe, url);
  }

  // Counting prompt tokens may call a tokenizer, whose counter is only promised to be
  // deterministic, not thread-safe: serialise the counters.
  std::mutex count_mu;
  std::mutex progress_mu;
  size_t done = 0;

  auto run_conversation = [&](OpenAiStreamClient& client, size_t c) {
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
        rec.result = client.send(cfg.endpoint, req);
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
  const std::vector<double> arrivals = arrival_times(n_conv, cfg.request_rate, cfg.seed);
  ArrivalQueue queue;
  std::vector<std::thread> workers;
  workers.reserve(n_workers);
  const auto start = Clock::now();
  // The health prober: how long the server takes to answer GET /health while it is loaded.
  std::atomic<bool> stop_probe{false};
  std::thread prober;
  if (cfg.probe_health_ms > 0) {
    prober = std::thread([&] {
      OpenAiStreamClient client(url, cfg.api_key, std::min(cfg.timeout_s, 10.0));
      const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(cfg.probe_health_ms));
      while (!stop_probe.load()) {
        const auto t0 = Clock::now();
        const bool ok = client.get("/health").has_value();
        run.health_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!ok) ++run.health_failures;
        std::this_thread::sleep_until(t0 + gap);
      }
    });
  }
  for (size_t w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      OpenAiStreamClient client(url, cfg.api_key, cfg.timeout_s);
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
  if (prober.joinable()) prober.join();

  {
    OpenAiStreamClient probe(url, cfg.api_key, std::min(cfg.timeout_s, 10.0));
    run.metrics_after = scrape(probe, url);
  }
  return run;
}

}  // namespace strata::bench
