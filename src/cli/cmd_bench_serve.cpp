// `strata bench serve`: load-tests any OpenAI-compatible server over HTTP, like `vllm bench serve`:
// streamed requests from a synthetic or JSONL dataset with Poisson arrivals (a fixed rate or a
// linear ramp), reporting throughput, TTFT, TPOT, ITL, end-to-end latency, failures, the server's
// prefix-cache hit rate and preemptions, per QoS class with --qos-mix, and the KV usage sampled
// from /metrics during the run (the series as CSV with --kv-trace). Several
// --base-url spread the load over replicas (round-robin or sticky per conversation) and add a
// report per server. The client logic lives in src/bench_client/; this file is flags, wiring and
// output.
#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_client/bench_dataset.h"
#include "bench_client/bench_report.h"
#include "bench_client/bench_runner.h"
#include "bench_client/openai_stream_client.h"
#include "cli/cli.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct BenchServeOptions {
  std::vector<std::string> base_urls = {"http://127.0.0.1:8080"};  // strata serve's default port
  std::string route = "round-robin";
  int64_t route_prefix_chars = 256;
  std::string model;
  std::string endpoint = "completions";
  std::string dataset = "random";
  int32_t num_prompts = 100;
  int32_t input_len = 256;
  int32_t output_len = 128;
  std::optional<int32_t> shared_prefix_len;
  int32_t turns = 3;
  std::string request_rate = "inf";
  std::string ramp;
  std::string qos_mix;
  double random_range_ratio = 0;
  double kv_sample_ms = 250;
  std::string kv_trace;
  int32_t max_concurrency = 0;
  uint64_t seed = 0;
  std::string api_key;
  std::string tokenizer;
  std::string json_out;
  double timeout_s = 600;
  double probe_health_ms = 0;
  double temperature = 0;
  bool ignore_eos = false;
  bool quiet = false;
};

double parse_rate(const std::string& s) {
  if (s == "inf") return 0;
  double rate = -1;
  try {
    size_t used = 0;
    rate = std::stod(s, &used);
    if (used != s.size()) rate = -1;
  } catch (const std::exception&) {
  }
  if (!(rate > 0) || !std::isfinite(rate)) fail("--request-rate must be a positive number or 'inf', got '{}'", s);
  return rate;
}

// "FROM:TO", two request rates > 0.
std::pair<double, double> parse_ramp(const std::string& s) {
  const size_t colon = s.find(':');
  double v[2] = {-1, -1};
  if (colon != std::string::npos) {
    const std::string parts[2] = {s.substr(0, colon), s.substr(colon + 1)};
    for (int i = 0; i < 2; ++i) {
      try {
        size_t used = 0;
        v[i] = std::stod(parts[i], &used);
        if (used != parts[i].size()) v[i] = -1;
      } catch (const std::exception&) {
      }
    }
  }
  if (!(v[0] > 0 && v[1] > 0 && std::isfinite(v[0]) && std::isfinite(v[1]))) {
    fail("--ramp must be FROM:TO, two request rates per second > 0 (e.g. 2:6), got '{}'", s);
  }
  return {v[0], v[1]};
}

// The first model the first answering server lists, for when --model is not given (the API
// requires a name).
std::string discover_model(const std::vector<bench::ServerUrl>& urls, const std::string& api_key) {
  for (const auto& url : urls) {
    bench::OpenAiStreamClient client(url, api_key, 10);
    const auto body = client.get(url.api_prefix + "/models");
    if (body) {
      const auto j = nlohmann::json::parse(*body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
        return j["data"][0]["id"].get<std::string>();
      }
    }
  }
  fail("--model not given and GET {}{}/models named no model", urls.front().origin, urls.front().api_prefix);
}

int run_bench_serve(BenchServeOptions o) {
  // Every request in flight is a connection: take the open-file hard limit (the soft one is often 1024).
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  bench::Endpoint endpoint;
  if (o.endpoint == "completions") {
    endpoint = bench::Endpoint::kCompletions;
  } else if (o.endpoint == "chat") {
    endpoint = bench::Endpoint::kChat;
  } else {
    fail("--endpoint must be completions or chat, got '{}'", o.endpoint);
  }
  const double rate = parse_rate(o.request_rate);
  std::optional<std::pair<double, double>> ramp;
  if (!o.ramp.empty()) {
    ramp = parse_ramp(o.ramp);
    if (rate > 0) fail("--ramp and --request-rate exclude each other (the ramp sets the rate)");
  }
  std::vector<bench::QosShare> qos_mix;
  if (!o.qos_mix.empty()) qos_mix = bench::parse_qos_mix(o.qos_mix);
  if (!(o.kv_sample_ms >= 0 && std::isfinite(o.kv_sample_ms))) fail("--kv-sample-ms must be >= 0 (0 = off), got {}", o.kv_sample_ms);
  if (!o.kv_trace.empty() && !(o.kv_sample_ms > 0)) fail("--kv-trace needs --kv-sample-ms > 0");
  if (o.max_concurrency < 0) fail("--max-concurrency must be >= 0 (0 = no cap), got {}", o.max_concurrency);
  if (!(o.timeout_s > 0)) fail("--timeout-s must be > 0, got {}", o.timeout_s);
  if (!(o.probe_health_ms >= 0)) fail("--probe-health-ms must be >= 0 (0 = off), got {}", o.probe_health_ms);
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) o.api_key = env;
  }
  const std::vector<std::string> base_urls = bench::parse_base_urls(o.base_urls);
  std::vector<bench::ServerUrl> urls;
  for (const auto& u : base_urls) urls.push_back(bench::ServerUrl::parse(u));
  const bench::Route route = bench::parse_route(o.route);
  if (o.route_prefix_chars < 1) fail("--route-prefix-chars must be >= 1, got {}", o.route_prefix_chars);

  std::unique_ptr<Tokenizer> tokenizer;
  bench::TokenCounter counter;
  if (!o.tokenizer.empty()) {
    tokenizer = Tokenizer::from_gguf(*GgufFile::open(o.tokenizer));
    counter = [tok = tokenizer.get()](std::string_view text) {
      return static_cast<int32_t>(tok->encode(text, false, false).size());
    };
  }

  bench::DatasetOptions d;
  d.kind = bench::parse_dataset_kind(o.dataset);
  if (d.kind == bench::DatasetKind::kFile) d.path = o.dataset;
  d.num_prompts = o.num_prompts;
  d.input_len = o.input_len;
  d.output_len = o.output_len;
  d.shared_prefix_len = o.shared_prefix_len.value_or(o.input_len / 2);
  if (d.kind == bench::DatasetKind::kSharedPrefix && !o.shared_prefix_len && d.shared_prefix_len < 1) d.shared_prefix_len = 1;
  d.turns = o.turns;
  d.seed = o.seed;
  d.counter = counter;
  d.range_ratio = o.random_range_ratio;
  if (d.kind == bench::DatasetKind::kFile && o.random_range_ratio != 0) {
    fail("--random-range-ratio applies to the synthetic datasets, not to --dataset FILE");
  }
  if (d.kind == bench::DatasetKind::kMultiTurn && endpoint != bench::Endpoint::kChat) {
    fail("--dataset multi-turn sends growing message lists: use --endpoint chat");
  }
  bench::Dataset dataset = bench::make_dataset(d);
  bench::assign_qos(dataset, qos_mix, o.seed);
  // Opened before the run, so that an unwritable path is a usage error, not a lost run.
  std::ofstream trace_out;
  if (!o.kv_trace.empty()) {
    trace_out.open(o.kv_trace, std::ios::trunc);
    if (!trace_out) fail("cannot write --kv-trace '{}'", o.kv_trace);
  }

  bench::BenchConfig cfg;
  cfg.base_urls = base_urls;
  cfg.route = route;
  cfg.route_prefix_chars = static_cast<size_t>(o.route_prefix_chars);
  cfg.model = o.model.empty() ? discover_model(urls, o.api_key) : o.model;
  cfg.endpoint = endpoint;
  cfg.api_key = o.api_key;
  cfg.request_rate = rate;
  if (ramp) std::tie(cfg.ramp_from, cfg.ramp_to) = *ramp;
  cfg.trace_ms = o.kv_sample_ms;
  cfg.max_concurrency = o.max_concurrency;
  cfg.seed = o.seed;
  cfg.timeout_s = o.timeout_s;
  cfg.probe_health_ms = o.probe_health_ms;
  cfg.temperature = o.temperature;
  cfg.ignore_eos = o.ignore_eos;
  cfg.output_counter = counter;
  cfg.prompt_counter = counter;
  const size_t total = dataset.num_requests();
  if (!o.quiet) {
    const std::string target = urls.size() == 1 ? urls[0].origin + urls[0].path(endpoint)
                                                : fmt::format("{} servers ({}, {})", urls.size(), bench::route_name(route),
                                                              urls[0].path(endpoint));
    fmt::print(stderr, "bench serve: {} requests ({} conversations) to {} model '{}', rate {}, max concurrency {}\n", total,
               dataset.conversations.size(), target, cfg.model,
               ramp ? fmt::format("{} -> {} /s (ramp over {:.0f} s)", ramp->first, ramp->second,
                                  2.0 * static_cast<double>(dataset.conversations.size()) / (ramp->first + ramp->second))
                    : o.request_rate,
               o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "none");
    // Progress at every tenth of the run, on stderr so that stdout is only the report.
    cfg.progress = [total, last = std::make_shared<size_t>(0)](size_t done, size_t n) {
      const size_t tenth = done * 10 / n;
      if (tenth > *last || done == n) {
        *last = tenth;
        fmt::print(stderr, "bench serve: {}/{} done\n", done, total);
      }
    };
  }

  const bench::BenchRun run = bench::run_benchmark(cfg, dataset);
  const bench::BenchReport report = bench::make_report(run);
  fmt::print("{}", bench::format_report(report));
  if (trace_out.is_open()) {
    std::vector<bench::TracePoint> points;
    for (const auto& server : run.servers) points.insert(points.end(), server.trace.begin(), server.trace.end());
    std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.t_s < b.t_s; });
    trace_out << bench::trace_csv(points);
    if (!trace_out.flush()) fail("cannot write --kv-trace '{}'", o.kv_trace);
  }

  if (!o.json_out.empty()) {
    nlohmann::ordered_json j = bench::report_to_json(report);
    // One URL as given; several as the comma-separated list (also a valid --base-url value).
    std::string joined;
    for (const auto& u : base_urls) joined += (joined.empty() ? "" : ",") + u;
    j["base_url"] = joined;
    j["model"] = cfg.model;
    j["endpoint"] = o.endpoint;
    j["dataset"] = o.dataset;
    j["num_prompts"] = o.num_prompts;
    j["num_requests"] = total;
    j["input_len"] = o.input_len;
    j["output_len"] = o.output_len;
    j["shared_prefix_len"] = d.kind == bench::DatasetKind::kSharedPrefix ? nlohmann::ordered_json(d.shared_prefix_len) : nullptr;
    j["turns"] = d.kind == bench::DatasetKind::kMultiTurn ? nlohmann::ordered_json(d.turns) : nullptr;
    j["request_rate"] = ramp ? nlohmann::ordered_json(nullptr) : rate > 0 ? nlohmann::ordered_json(rate) : nlohmann::ordered_json("inf");
    j["ramp"] = ramp ? nlohmann::ordered_json{{"from", ramp->first}, {"to", ramp->second}} : nlohmann::ordered_json(nullptr);
    j["qos_mix"] = o.qos_mix.empty() ? nullptr : nlohmann::ordered_json(o.qos_mix);
    j["random_range_ratio"] = o.random_range_ratio;
    j["kv_sample_ms"] = o.kv_sample_ms;
    j["kv_trace"] = o.kv_trace.empty() ? nullptr : nlohmann::ordered_json(o.kv_trace);
    j["max_concurrency"] = o.max_concurrency > 0 ? nlohmann::ordered_json(o.max_concurrency) : nullptr;
    j["seed"] = o.seed;
    j["temperature"] = o.temperature;
    j["ignore_eos"] = o.ignore_eos;
    j["tokenizer"] = o.tokenizer.empty() ? nullptr : nlohmann::ordered_json(o.tokenizer);
    j["timeout_s"] = o.timeout_s;
    j["probe_health_ms"] = o.probe_health_ms;
    j["base_urls"] = base_urls;
    j["route"] = bench::route_name(route);
    j["route_prefix_chars"] = o.route_prefix_chars;
    std::ofstream out(o.json_out, std::ios::trunc);
    if (!out) fail("cannot write --json-out '{}'", o.json_out);
    out << j.dump(2) << "\n";
    if (!out.flush()) fail("cannot write --json-out '{}'", o.json_out);
  }
  // Failures are part of the measurement; only a run where nothing worked is a failed run.
  return report.completed > 0 ? kExitOk : kExitFailure;
}

}  // namespace

void add_bench_serve_command(Cli& cli, CLI::App* bench) {
  auto o = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "serve", "Load-test an OpenAI-compatible server over HTTP (like vllm bench serve): throughput, TTFT, TPOT, ITL");
  cmd->add_option("--base-url", o->base_urls,
                  "Server address, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine); repeat it or give a "
                  "comma-separated list to spread the load over several servers (see --route)")
      ->capture_default_str();
  cmd->add_option("--route", o->route,
                  "With several --base-url: round-robin (request i to server i mod N) or conversation (every request of "
                  "a conversation to one server, picked by a stable hash of its conversation_id or the start of its "
                  "first prompt / first non-system message)")
      ->capture_default_str();
  cmd->add_option("--route-prefix-chars", o->route_prefix_chars,
                  "--route conversation without a conversation_id: leading characters of the prompt that are hashed")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "Model name sent with each request (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", o->endpoint, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->capture_default_str();
  cmd->add_option("--dataset", o->dataset,
                  "random | shared-prefix | multi-turn | FILE.jsonl (lines with \"prompt\" or \"messages\", optional \"max_tokens\" and \"conversation_id\")")
      ->capture_default_str();
  cmd->add_option("--num-prompts", o->num_prompts, "Requests to send (multi-turn: turns in total)")->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Prompt length in tokens (words without --tokenizer); multi-turn: per turn")
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "max_tokens of each request")->capture_default_str();
  cmd->add_option("--shared-prefix-len", o->shared_prefix_len,
                  "shared-prefix: leading tokens common to every prompt (default: half of --input-len)");
  cmd->add_option("--turns", o->turns, "multi-turn: turns per conversation")->capture_default_str();
  cmd->add_option("--request-rate", o->request_rate, "Poisson arrivals per second, or inf (all at once)")->capture_default_str();
  cmd->add_option("--ramp", o->ramp,
                  "FROM:TO: Poisson arrivals whose rate goes linearly from FROM to TO requests/s over the run "
                  "(2 * num-prompts / (FROM + TO) seconds); instead of --request-rate");
  cmd->add_option("--qos-mix", o->qos_mix,
                  "NAME=WEIGHT,...: give each conversation a QoS class (the request's \"qos\" field; strata: interactive, "
                  "batch) in these shares, placed by the seed; the report adds figures per class");
  cmd->add_option("--random-range-ratio", o->random_range_ratio,
                  "Synthetic datasets: draw each prompt length and max_tokens uniformly from [L*(1-R), L*(1+R)] (R in [0, 1))")
      ->capture_default_str();
  cmd->add_option("--kv-sample-ms", o->kv_sample_ms,
                  "Read each server's /metrics this often during the run for KV usage, queues and preemptions (0 = off)")
      ->capture_default_str();
  cmd->add_option("--kv-trace", o->kv_trace,
                  "Write the sampled series (t_s, server, KV usage per tier, queues, preemptions, controller knobs) to "
                  "this CSV file");
  cmd->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0 = no cap)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the prompts and the arrival times")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Bearer token (default: $OPENAI_API_KEY when set)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "GGUF whose tokenizer makes prompts exactly --input-len tokens and counts output without usage");
  cmd->add_option("--temperature", o->temperature, "Sampling temperature sent with each request")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Send ignore_eos: true (vLLM/llama.cpp/strata extension) for exact output lengths");
  cmd->add_option("--json-out", o->json_out, "Also write the results and parameters as one JSON object to this file");
  cmd->add_option("--timeout-s", o->timeout_s, "Per-request time limit in seconds")->capture_default_str();
  cmd->add_option("--probe-health-ms", o->probe_health_ms,
                  "During the run, GET /health of each server every this many ms and report its answer times (0 = off)")
      ->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "No progress lines on stderr");
  cmd->callback([&cli, o] { cli.run = [o] { return run_bench_serve(*o); }; });
}

}  // namespace strata::cli
