// `strata bench model`: llama-bench-like prompt-processing and generation speed, plus the machine's
// memory read bandwidth measured in the same run, so generation speed is reported as a share of
// the bandwidth limit.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <fstream>
#include <limits>
#include <string_view>
#include <thread>
#include <algorithm>
#include <cstring>

#include "cli/cli.h"
#include "cli/common_flags.h"
#include "core/error.h"
#include "core/jsonl.h"
#include "core/thread_pool.h"
#include "core/units.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "sample/logit_kernels.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

// Compute threads of every rank (--tensor-parallel splits --threads between them).
int n_threads(Model& m) { return m.backend().thread_pool() ? m.backend().thread_pool()->size() * m.tensor_parallel() : 0; }

using Clock = std::chrono::steady_clock;

struct Stats {
  double mean = 0, sd = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

struct BenchModelOptions {
  ModelFlags model;
  KvFlags kv;
  int32_t pp = 512;
  int32_t tg = 128;
  int32_t batch = 1;
  int32_t reps = 5;
  int32_t depth = 0;  // tg starts at this position (tokens placed in the KV cache, not computed)
  bool json = false;
  bool no_bandwidth = false;
  bool bandwidth_every_rep = false;
};

// Sequences with their own block tables over one KV storage in the backend's memory (device memory
// on a GPU); released between repetitions.
class BenchKv {
 public:
  BenchKv(const KvGeometry& g, const KvConfig& base, int32_t n_blocks, Model& model)
      : storage_(g, hot_only(base, n_blocks), model.backend().thread_pool(), model.rank_backends()),
        pool_(storage_.capacity().hot_blocks),
        block_size_(g.block_size) {
    const KvLayerView& v = storage_.views().front();
    if (v.host != nullptr) {  // --kv-offload: host slots that --depth places the oldest blocks in, zeroed
      host_slots_ = storage_.capacity().cold_host_slots;
      std::memset(v.host, 0, static_cast<size_t>(v.host_slot_bytes) * static_cast<size_t>(host_slots_));
    }
  }
  // Positions [0, depth) of sequence `seq`, never computed (the KV memory's zeros): what decoding
  // at that depth reads. With --kv-offload the oldest blocks are host slots (attended in place),
  // as many as leave `keep_free` hot blocks for what is generated after them.
  void place_depth(size_t seq, int32_t depth, int32_t keep_free) {
    auto& t = table(seq);
    const KvLayerView& v = storage_.views().front();
    const int32_t n = (depth + block_size_ - 1) / block_size_;
    int32_t host_n = std::max(0, n - std::max(0, pool_.num_free() - keep_free));
    if (depth % block_size_ != 0) host_n = std::min(host_n, n - 1);  // the partial last block is written: hot
    if (host_n > 0 && v.host == nullptr) {
      fail("--depth {}: the KV pool holds {} tokens; raise --kv-memory, or add --kv-host-memory and --kv-offload", depth,
           pool_.num_blocks() * block_size_);
    }
    if (next_host_ + host_n > host_slots_) fail("--depth {}: the host tier holds {} blocks; raise --kv-host-memory", depth, host_slots_);
    for (int32_t i = 0; i < host_n; ++i) t.push_back(v.host_base + next_host_++);
    host_blocks_ += host_n;
    reserve(seq, depth);
  }
  int32_t host_blocks() const { return host_blocks_; }  // placed in host slots, all sequences
  uint64_t block_bytes() const { return storage_.capacity().hot_block_bytes; }
  std::vector<BlockId>& table(size_t i) {
    if (tables_.size() <= i) tables_.resize(i + 1);
    return tables_[i];
  }
  void reserve(size_t seq, int32_t n_tokens) {
    auto& t = table(seq);
    while (static_cast<int32_t>(t.size()) * block_size_ < n_tokens) {
      auto b = pool_.allocate_plain();
      if (!b) fail("KV pool too small for the benchmark; raise --kv-memory");
      t.push_back(*b);
    }
  }
  void release_all() {
    const int32_t host_base = storage_.views().front().host_base;
    for (auto& t : tables_) {
      for (BlockId b : t) {
        if (b < host_base) pool_.decref(b);
      }
      t.clear();
    }
    next_host_ = 0;
    host_blocks_ = 0;
  }
  std::span<const KvLayerView> views() const { return storage_.views(); }

 private:
  static KvConfig hot_only(KvConfig c, int32_t n_blocks) {
    c.num_blocks = n_blocks;
    c.memory_bytes.reset();
    c.warm_format = WarmFormat::kNone;
    c.spill_dir.clear();
    if (!c.offload) c.host_bytes = 0;  // --kv-offload: a host tier for --depth
    return c;
  }
  KvStorage storage_;
  BlockPool pool_;
  int32_t block_size_;
  int32_t host_slots_ = 0, next_host_ = 0, host_blocks_ = 0;
  std::vector<std::vector<BlockId>> tables_;
};

int run_bench_model(const BenchModelOptions& o) {
  // Flags first: a usage error is reported before the model loads.
  const KvConfig kvc = o.kv.to_config();
  if (o.pp < 0) fail("--pp must be >= 0 (0: skip), got {}", o.pp);
  if (o.tg < 0) fail("--tg must be >= 0 (0: skip), got {}", o.tg);
  if (o.pp == 0 && o.tg == 0) fail("--pp and --tg are both 0: nothing to measure");
  if (o.batch < 1) fail("--batch must be >= 1, got {}", o.batch);
  if (o.reps < 1) fail("--reps must be >= 1, got {}", o.reps);
  if (o.depth < 0) fail("--depth must be >= 0, got {}", o.depth);
  if (o.no_bandwidth && o.bandwidth_every_rep) fail("--bandwidth-every-rep measures the bandwidth, --no-bandwidth skips it: pick one");
  // The forward pass runs over hot blocks (and, with --kv-offload, host slots for --depth): flags for
  // the engine's other tiers and policies would change nothing here, so they are refused, not ignored
  // (--kv-recall needs --kv-evict, refused here).
  const std::pair<bool, const char*> engine_only[] = {
      {o.kv.warm_dtype != "none", "--kv-warm-dtype"},
      {!o.kv.spill_dir.empty(), "--kv-spill-dir"},
      {!o.kv.remote.empty(), "--kv-remote"},
      {o.kv.evict != "none", "--kv-evict"},
  };
  for (const auto& [given, flag] : engine_only) {
    if (given) {
      fail("{}: bench model times the forward pass over hot KV blocks only; the KV tiers and policies of the "
           "engine are measured by bench offline (or generate, serve)",
           flag);
    }
  }
  auto model = Model::load(o.model.model, o.model.backend_options());
  const ModelConfig& mc = model->config();
  const KvGeometry geo = model->kv_geometry(kvc.block_size, kvc.dtype);
  const int32_t per_seq_blocks = (std::max(o.pp, o.depth + o.tg + 1) + kvc.block_size - 1) / kvc.block_size;
  const int32_t needed = per_seq_blocks * std::max(1, o.batch);
  int32_t n_blocks = needed;
  if (kvc.num_blocks || kvc.memory_bytes) n_blocks = kvc.resolve_num_blocks(geo);
  BenchKv kv(geo, kvc, n_blocks, *model);

  std::mt19937 rng(1234);
  auto random_tokens = [&](int32_t n) {
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<TokenId>(rng() % static_cast<uint32_t>(mc.n_vocab));
    return t;
  };

  double bandwidth = 0;
  // The probe's readings: one before the repetitions, and with --bandwidth-every-rep one after each.
  std::vector<double> probes;
  auto probe = [&] { probes.push_back(model->backend().measure_read_bandwidth_gbs(uint64_t{1} << 30, 3)); };
  if (!o.no_bandwidth) probe();

  // Warm-up: touch the weights once so the first repetition does not pay page faults (CPU), and run
  // a prompt of the measured length once so that library set-up (cuBLAS) is not timed (GPU).
  {
    const int32_t n = std::max<int32_t>(8, model->backend().host_visible() ? 8 : o.pp);
    const auto t = random_tokens(n);
    kv.reserve(0, n);
    ForwardBatch b;
    b.seqs.push_back({t, 0, kv.table(0), LogitsMode::kLast});
    model->forward(b, kv.views());
    kv.release_all();
  }
  // B sequences decode o.tg tokens together from an empty context, one token each per step
  // (greedy, to keep the work realistic); returns the seconds it took.
  // With --depth D each sequence starts at position D, its first D positions placed, not computed.
  int32_t host_blocks = 0;
  Communicator::Stats tg_collectives;  // rank 0's, over the timed decode steps (--tensor-parallel)
  int64_t tg_steps = 0;
  std::vector<float> block_max(logit_blocks(static_cast<size_t>(mc.n_vocab)));
  // STRATA_BENCH_HOST_PICKS=1: each step's logits copied to the host and picked there before the
  // next step is enqueued (the loop before Model::forward_pick; an A/B switch).
  const char* hp = std::getenv("STRATA_BENCH_HOST_PICKS");
  const bool host_picks = hp != nullptr && std::string_view(hp) == "1";
  auto decode = [&] {
    std::vector<TokenId> toks = random_tokens(o.batch);
    if (o.depth > 0) {
      const int32_t keep = o.batch * ((o.depth % kvc.block_size + o.tg) / kvc.block_size + 2);
      for (int32_t s = 0; s < o.batch; ++s) kv.place_depth(static_cast<size_t>(s), o.depth, keep);
      host_blocks = kv.host_blocks();
    }
    const Communicator::Stats c0 = model->collective_stats();
    const auto t0 = Clock::now();
    uint64_t last = 0;  // the ticket of the step before (Model::forward_pick)
    for (int32_t step = 0; step < o.tg; ++step) {
      ForwardBatch b;
      const int32_t pos = o.depth + step;
      for (int32_t s = 0; s < o.batch; ++s) {
        kv.reserve(static_cast<size_t>(s), pos + 1);
        b.seqs.push_back({std::span<const TokenId>(&toks[static_cast<size_t>(s)], 1), pos, kv.table(static_cast<size_t>(s)),
                          LogitsMode::kLast});
      }
      if (host_picks) {
        auto logits = model->forward(b, kv.views());
        for (int32_t s = 0; s < o.batch; ++s) {
          const auto row = logits.subspan(static_cast<size_t>(s) * mc.n_vocab, mc.n_vocab);
          toks[static_cast<size_t>(s)] = std::max(greedy_token(row, block_max), 0);  // -1 (no finite logit): 0
        }
        continue;
      }
      // Greedy picks where the logits are: on a GPU step t + 1 (its tokens = step t's picks, on the
      // device) is enqueued before step t's tokens are read back, as a serving loop streams them.
      const uint64_t ticket = model->forward_pick(b, kv.views(), step > 0);
      if (step > 0) {
        const std::span<const TokenId> p = model->picked(last);
        for (size_t s = 0; s < p.size(); ++s) toks[s] = std::max(p[s], 0);  // -1 (no finite logit): 0
      }
      last = ticket;
    }
    if (!host_picks && o.tg > 0) {
      const std::span<const TokenId> p = model->picked(last);
      for (size_t s = 0; s < p.size(); ++s) toks[s] = std::max(p[s], 0);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const Communicator::Stats c1 = model->collective_stats();
    tg_collectives.calls += c1.calls - c0.calls;
    tg_collectives.seconds += c1.seconds - c0.seconds;
    tg_steps += o.tg;
    kv.release_all();
    return secs;
  };
  // GPU: one untimed decode of the measured shape too, so that recording its CUDA graphs (one per
  // context-length bucket, made on first use and replayed after, as in a serving steady state)
  // does not land in the first repetition.
  if (!model->backend().host_visible() && o.tg > 0) {
    decode();
    tg_collectives = {};
    tg_steps = 0;
  }

  const bool every_rep = o.bandwidth_every_rep && !probes.empty() && o.tg > 0;
  std::vector<double> pp_runs, tg_runs;
  for (int32_t rep = 0; rep < o.reps; ++rep) {
    if (o.pp > 0) {
      const auto prompt = random_tokens(o.pp);
      kv.reserve(0, o.pp);
      ForwardBatch b;
      b.seqs.push_back({prompt, 0, kv.table(0), LogitsMode::kLast});
      const auto t0 = Clock::now();
      model->forward(b, kv.views());
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      pp_runs.push_back(o.pp / s);
      kv.release_all();
    }
    if (o.tg > 0) tg_runs.push_back(static_cast<double>(o.tg) * o.batch / decode());
    if (every_rep) probe();
  }
  const Stats pp = stats(pp_runs), tg = stats(tg_runs);
  const uint64_t bytes_per_step = model->step_weight_bytes();
  // Each decode step streams every weight matrix once, whatever the batch size.
  const auto weight_gbs = [&](double tok_s) { return tok_s / o.batch * static_cast<double>(bytes_per_step) / 1e9; };
  const double achieved_gbs = weight_gbs(tg.mean);
  double pct = 0;
  std::vector<double> rep_pct;  // --bandwidth-every-rep: each repetition's share of the probes around it
  if (every_rep) {
    for (size_t i = 0; i < tg_runs.size(); ++i) rep_pct.push_back(100.0 * weight_gbs(tg_runs[i]) / ((probes[i] + probes[i + 1]) / 2));
    pct = stats(rep_pct).mean;
    bandwidth = stats(probes).mean;
  } else if (!probes.empty()) {
    bandwidth = probes.front();
    pct = 100.0 * achieved_gbs / bandwidth;
  }
  const uint64_t file_bytes = model->file().file_size();

  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = o.model.model;
    j["model_bytes"] = file_bytes;
    j["step_weight_bytes"] = bytes_per_step;
    j["threads"] = n_threads(*model);
    j["tensor_parallel"] = model->tensor_parallel();
    j["batch"] = o.batch;
    j["pp"] = o.pp;
    j["tg"] = o.tg;
    j["reps"] = o.reps;
    j["depth"] = o.depth;
    j["kv_dtype"] = kv_dtype_name(kvc.dtype);
    j["backend"] = model->backend().description();
    // --depth with --kv-offload: the blocks each decode step reads from host memory (every layer).
    j["tg_host_blocks"] = host_blocks;
    j["tg_host_bytes_per_step"] = static_cast<uint64_t>(host_blocks) * kv.block_bytes();
    j["pp_tok_s"] = pp.mean;
    j["pp_tok_s_sd"] = pp.sd;
    j["tg_tok_s"] = tg.mean;
    j["tg_tok_s_sd"] = tg.sd;
    j["bandwidth_gb_s"] = bandwidth;
    j["tg_weight_gb_s"] = achieved_gbs;
    j["tg_bandwidth_pct"] = pct;
    if (every_rep) {
      j["bandwidth_probes_gb_s"] = probes;
      j["tg_rep_tok_s"] = tg_runs;
      j["tg_rep_bandwidth_pct"] = rep_pct;
    }
    if (model->tensor_parallel() > 1 && tg_steps > 0) {
      // Rank 0's wall time in collectives per decode step (waiting for slower ranks included).
      j["tg_collectives_per_step"] = static_cast<double>(tg_collectives.calls) / static_cast<double>(tg_steps);
      j["tg_collective_ms_per_step"] = 1e3 * tg_collectives.seconds / static_cast<double>(tg_steps);
    }
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("model: {} ({}, {} of weights streamed per decode step), threads {}{}, KV {}\n", o.model.model,
             format_bytes(file_bytes), format_bytes(bytes_per_step), n_threads(*model),
             model->tensor_parallel() > 1 ? fmt::format(" over {} tensor-parallel ranks", model->tensor_parallel()) : "",
             kv_dtype_name(kvc.dtype));
  fmt::print("backend: {}\n", model->backend().description());
  if (every_rep) {
    fmt::print("memory read bandwidth: {:.1f} GB/s (the mean of {} probes, {:.1f}-{:.1f} GB/s: one before the repetitions, one after each)\n",
               bandwidth, probes.size(), *std::min_element(probes.begin(), probes.end()), *std::max_element(probes.begin(), probes.end()));
  } else if (bandwidth > 0) {
    fmt::print("memory read bandwidth: {:.1f} GB/s\n", bandwidth);
  }
  fmt::print("| test | tok/s |\n| --- | --- |\n");
  if (o.pp > 0) fmt::print("| pp{} | {:.1f} ± {:.1f} |\n", o.pp, pp.mean, pp.sd);
  if (o.tg > 0) {
    fmt::print("| tg{}{}{} | {:.1f} ± {:.1f} |\n", o.tg, o.batch > 1 ? fmt::format(" x{} seqs", o.batch) : "",
               o.depth > 0 ? fmt::format(" @ depth {}", o.depth) : "", tg.mean, tg.sd);
    if (host_blocks > 0) {
      fmt::print("each decode step reads {} blocks ({:.1f} MiB) of KV from host memory (--kv-offload)\n", host_blocks,
                 static_cast<double>(host_blocks) * static_cast<double>(kv.block_bytes()) / (1 << 20));
    }
    if (bandwidth > 0) {
      fmt::print("generation streams {:.1f} GB/s of weights = {:.1f}% of the measured bandwidth limit{}\n", achieved_gbs, pct,
                 every_rep ? " (the mean of each repetition's share of the probes before and after it)" : "");
    }
    if (model->tensor_parallel() > 1 && tg_steps > 0 && tg.mean > 0) {
      const double ms = 1e3 * tg_collectives.seconds / static_cast<double>(tg_steps);
      fmt::print("collectives of rank 0: {:.1f} per decode step, {:.3f} ms per step ({:.1f}% of the step; waiting for the "
                 "other ranks included)\n",
                 static_cast<double>(tg_collectives.calls) / static_cast<double>(tg_steps), ms,
                 100.0 * ms / (1e3 * o.batch / tg.mean));
    }
  }
  return kExitOk;
}

// --- bench offline ----------------------------------------------------------------------------

struct BenchOfflineOptions {
  ModelFlags model;
  KvFlags kv;
  EngineFlags engine;
  int32_t num_prompts = 64;
  int32_t input_len = 128;
  int32_t output_len = 64;
  int32_t shared_prefix = 0;
  std::string dataset;
  std::string request_rate = "inf";
  uint64_t seed = 0;
  bool json = false;
};

struct Dist {
  double mean = 0, p50 = 0, p99 = 0;
  nlohmann::ordered_json to_json() const { return {{"mean", mean}, {"p50", p50}, {"p99", p99}}; }
};

Dist distribution(std::vector<double> v) {
  Dist d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  for (double x : v) d.mean += x;
  d.mean /= static_cast<double>(v.size());
  auto pct = [&](double p) {
    const double idx = p * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(idx);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
  };
  d.p50 = pct(0.5);
  d.p99 = pct(0.99);
  return d;
}

int run_bench_offline(const BenchOfflineOptions& o) {
  if (o.num_prompts < 1) fail("--num-prompts must be >= 1, got {}", o.num_prompts);
  if (o.input_len < 1) fail("--input-len must be >= 1, got {}", o.input_len);
  if (o.output_len < 1) fail("--output-len must be >= 1, got {}", o.output_len);
  if (o.shared_prefix < 0 || o.shared_prefix >= o.input_len)
    fail("--shared-prefix must be in [0, --input-len {}), got {}", o.input_len, o.shared_prefix);
  double rate = 0;  // requests per second; 0 = all at once
  if (o.request_rate != "inf") {
    try {
      rate = std::stod(o.request_rate);
    } catch (const std::exception&) {
      rate = -1;
    }
    if (!(rate > 0)) fail("--request-rate must be a positive number or 'inf', got '{}'", o.request_rate);
  }
  const BackendOptions backend = o.model.backend_options();
  const EngineConfig cfg = o.engine.to_config(o.kv, backend.device);
  fmt::print(stderr, "scheduler: --max-seqs {}, --max-batched-tokens {}\n", cfg.sched.max_seqs,
             cfg.sched.max_batched_tokens);  // stderr: stdout may carry JSON
  auto model = Model::load(o.model.model, backend);
  auto tokenizer = Tokenizer::from_gguf(model->file());
  const int32_t V = model->config().n_vocab;

  std::mt19937_64 rng(o.seed);
  std::vector<Request> requests;
  if (!o.dataset.empty()) {
    read_jsonl(o.dataset, [&](const nlohmann::json& j, size_t n) {
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        fail("{}:{}: needs a string 'prompt'", o.dataset, n);
      Request r;
      r.prompt = tokenizer->encode(j["prompt"].get<std::string>(), true, false);
      r.params.max_tokens = j.contains("max_tokens") && j["max_tokens"].is_number_integer() ? j["max_tokens"].get<int32_t>() : o.output_len;
      requests.push_back(std::move(r));
      return static_cast<int32_t>(requests.size()) < o.num_prompts;
    });
    if (requests.empty()) fail("--dataset '{}' holds no prompts", o.dataset);
  } else {
    // Random token ids (greedy decoding of them is as costly as of real text); the first
    // --shared-prefix tokens are common to all prompts.
    auto random_id = [&] { return static_cast<TokenId>(rng() % static_cast<uint64_t>(V)); };
    std::vector<TokenId> prefix;
    if (tokenizer->bos() != kNoToken && tokenizer->add_bos()) prefix.push_back(tokenizer->bos());
    while (static_cast<int32_t>(prefix.size()) < std::max(o.shared_prefix, 1)) prefix.push_back(random_id());
    for (int32_t i = 0; i < o.num_prompts; ++i) {
      Request r;
      r.prompt.assign(prefix.begin(), prefix.begin() + std::max<int32_t>(o.shared_prefix, prefix.empty() ? 0 : 1));
      while (static_cast<int32_t>(r.prompt.size()) < o.input_len) r.prompt.push_back(random_id());
      r.params.max_tokens = o.output_len;
      requests.push_back(std::move(r));
    }
  }
  for (auto& r : requests) {
    r.params.temperature = 0;
    r.params.ignore_eos = true;
  }

  Engine engine(*model, *tokenizer, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles(requests.size());
  std::vector<Clock::time_point> submitted(requests.size());
  const auto t0 = Clock::now();
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  std::thread submitter([&] {
    auto next = Clock::now();
    for (size_t i = 0; i < requests.size(); ++i) {
      if (rate > 0) {
        std::this_thread::sleep_until(next);
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      }
      submitted[i] = Clock::now();
      handles[i] = engine.submit(std::move(requests[i]));
    }
  });
  submitter.join();
  std::vector<double> ttft, tpot, e2e;
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    EngineEvent e;
    std::optional<Clock::time_point> first;
    Clock::time_point last = submitted[i];
    int32_t n = 0;
    while (handles[i]->next(e)) {
      if (e.kind == EngineEvent::Kind::kToken) {
        if (!first) first = e.time;
        ++n;
      } else if (e.kind == EngineEvent::Kind::kDone) {
        last = e.time;
        prompt_tokens += e.usage.prompt_tokens;
        output_tokens += e.usage.completion_tokens;
      }
    }
    const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    if (first) ttft.push_back(ms(*first - submitted[i]));
    if (first && n > 1) tpot.push_back(ms(last - *first) / (n - 1));
    e2e.push_back(ms(last - submitted[i]));
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const EngineStats st = engine.stats();
  engine.shutdown(true, std::chrono::seconds(10));
  const double hit_rate = st.kv.prefix_queried_tokens > 0
                              ? static_cast<double>(st.kv.prefix_hit_tokens) / static_cast<double>(st.kv.prefix_queried_tokens)
                              : 0.0;
  const Dist d_ttft = distribution(ttft), d_tpot = distribution(tpot), d_e2e = distribution(e2e);
  nlohmann::ordered_json j;
  j["model"] = o.model.model;
  j["num_prompts"] = handles.size();
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["shared_prefix"] = o.shared_prefix;
  j["request_rate"] = o.request_rate;
  j["threads"] = n_threads(*model);
  j["tensor_parallel"] = model->tensor_parallel();
  j["duration_s"] = wall;
  j["prompt_tokens"] = prompt_tokens;
  j["output_tokens"] = output_tokens;
  j["request_throughput"] = static_cast<double>(handles.size()) / wall;
  j["output_tok_s"] = static_cast<double>(output_tokens) / wall;
  j["total_tok_s"] = static_cast<double>(prompt_tokens + output_tokens) / wall;
  j["ttft_ms"] = d_ttft.to_json();
  j["tpot_ms"] = d_tpot.to_json();
  j["e2e_ms"] = d_e2e.to_json();
  j["prefix_hit_rate"] = hit_rate;
  j["preemptions"] = st.preemptions;
  j["kv_peak_usage"] = st.kv_usage_peak;
  j["steps"] = st.steps;
  j["max_batch_seqs"] = st.max_batch_seqs;  // the most sequences one step ran: the concurrency KV memory allowed
  const TransferStats& xfer = st.kv_device_transfer;
  const bool transfers = xfer.bytes_to_host + xfer.bytes_to_device > 0;
  if (transfers) {  // KV block transfers of a GPU (the host tier): the share of the run the compute stream waited
    j["kv_transfer"] = {{"bytes_to_host", xfer.bytes_to_host},
                        {"bytes_to_device", xfer.bytes_to_device},
                        {"seconds_to_host", xfer.seconds_to_host},
                        {"seconds_to_device", xfer.seconds_to_device},
                        {"compute_wait_s", xfer.compute_wait_seconds},
                        {"compute_wait_share", xfer.compute_wait_seconds / wall},
                        {"pcie_to_host_gbs", st.kv_pcie_to_host_gbs},
                        {"pcie_to_device_gbs", st.kv_pcie_to_device_gbs}};
  }
  if (st.kv.cold.slots > 0) {  // the cold tier: blocks moved into and out of each part, and between them
    j["kv_cold"] = {{"host_slots", st.kv.host.slots},
                    {"file_slots", st.kv.file.slots},
                    {"swap_outs", st.kv.swap_outs},
                    {"host_spills", st.kv.host_spills},
                    {"file_spills", st.kv.file_spills},
                    {"host_fetches", st.kv.host_fetches},
                    {"file_fetches", st.kv.file_fetches},
                    {"file_migrations", st.kv.file_migrations},
                    {"evicted_blocks", st.kv.evicted_blocks}};
  }
  if (cfg.kv.offload) {  // --kv-offload: blocks of running sequences attended in host slots
    j["kv_offload"] = {{"offloaded_blocks", st.kv.offloaded_blocks},
                       {"host_attended_blocks", st.kv.host_attended_blocks},
                       {"host_attended_bytes", st.kv.host_attended_bytes},
                       {"host_attended_bytes_per_step", st.steps > 0 ? static_cast<double>(st.kv.host_attended_bytes) / st.steps : 0.0}};
  }
  const KvTransferStats& kvx = st.kv.transfer;
  if (kvx.reencode_ops > 0) {  // re-encodes into the warm tier (host backends): the engine thread's share, per step
    const double steps = static_cast<double>(std::max<int64_t>(1, st.steps));
    j["kv_reencode"] = {{"ops", kvx.reencode_ops},
                        {"ops_ahead", kvx.reencode_ops_ahead},
                        {"blocking_s", kvx.reencode_blocking_seconds},
                        {"ahead_s", kvx.reencode_ahead_seconds},
                        {"blocking_ms_per_step", 1e3 * kvx.reencode_blocking_seconds / steps},
                        {"ahead_ms_per_step", 1e3 * kvx.reencode_ahead_seconds / steps}};
  }
  if (cfg.kv.evict.enabled()) {
    j["kv_evict"] = evict_kind_name(cfg.kv.evict.kind);
    j["kv_budget"] = cfg.kv.evict.auto_budget ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(cfg.kv.evict.budget);
    j["kv_budget_min"] = cfg.kv.evict.auto_budget ? st.kv_budget_min : cfg.kv.evict.budget;  // auto: 0 = never bounded
    j["kv_evicted_tokens"] = st.kv.evicted_tokens;
    j["kv_recalled_tokens"] = st.kv.recalled_tokens;
  }
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("requests: {} in {:.2f} s ({:.2f} req/s), {} prompt + {} generated tokens\n", handles.size(), wall,
             j["request_throughput"].get<double>(), prompt_tokens, output_tokens);
  fmt::print("throughput: {:.1f} generated tok/s, {:.1f} total tok/s\n", j["output_tok_s"].get<double>(),
             j["total_tok_s"].get<double>());
  fmt::print("| metric | mean | p50 | p99 |\n| --- | --- | --- | --- |\n");
  fmt::print("| TTFT ms | {:.1f} | {:.1f} | {:.1f} |\n", d_ttft.mean, d_ttft.p50, d_ttft.p99);
  fmt::print("| TPOT ms | {:.2f} | {:.2f} | {:.2f} |\n", d_tpot.mean, d_tpot.p50, d_tpot.p99);
  fmt::print("| E2E ms | {:.1f} | {:.1f} | {:.1f} |\n", d_e2e.mean, d_e2e.p50, d_e2e.p99);
  if (kvx.reencode_ops > 0) {
    fmt::print("warm re-encodes: {} ops ({} started ahead), {:.3f} ms/step on the engine thread, {:.3f} ms/step on the encoder thread\n",
               kvx.reencode_ops, kvx.reencode_ops_ahead, j["kv_reencode"]["blocking_ms_per_step"].get<double>(),
               j["kv_reencode"]["ahead_ms_per_step"].get<double>());
  }
  fmt::print("prefix-cache hit rate {:.1f}%, preemptions {}, KV peak usage {:.1f}%, {} steps, at most {} sequences in one\n",
             100 * hit_rate, st.preemptions, 100 * st.kv_usage_peak, st.steps, st.max_batch_seqs);
  if (transfers) {
    auto gbs = [](uint64_t b, double s) { return s > 0 ? static_cast<double>(b) / s / 1e9 : 0.0; };
    fmt::print("KV transfers: {:.1f} MiB to host at {:.1f} GB/s, {:.1f} MiB to device at {:.1f} GB/s (pinned limit {:.1f} / "
               "{:.1f}); compute stream waited {:.3f} s ({:.1f}% of the run)\n",
               static_cast<double>(xfer.bytes_to_host) / (1 << 20), gbs(xfer.bytes_to_host, xfer.seconds_to_host),
               static_cast<double>(xfer.bytes_to_device) / (1 << 20), gbs(xfer.bytes_to_device, xfer.seconds_to_device),
               st.kv_pcie_to_host_gbs, st.kv_pcie_to_device_gbs, xfer.compute_wait_seconds,
               100 * xfer.compute_wait_seconds / wall);
  }
  if (st.kv.cold.slots > 0) {
    fmt::print("KV cold tier: {} host + {} file slots; {} swap-outs; spills host {} / file {}, fetches host {} / file {}, "
               "{} blocks moved from host memory down to the file\n",
               st.kv.host.slots, st.kv.file.slots, st.kv.swap_outs, st.kv.host_spills, st.kv.file_spills, st.kv.host_fetches,
               st.kv.file_fetches, st.kv.file_migrations);
  }
  if (cfg.kv.offload) {
    fmt::print("KV offload: {} blocks moved to host slots; attention read {} blocks ({:.1f} MiB) from host memory over {} steps\n",
               st.kv.offloaded_blocks, st.kv.host_attended_blocks, static_cast<double>(st.kv.host_attended_bytes) / (1 << 20),
               st.steps);
  }
  if (cfg.kv.evict.enabled()) {
    fmt::print("eviction {}: budget {}{}, {} tokens evicted, {} recalled\n", evict_kind_name(cfg.kv.evict.kind),
               cfg.kv.evict.auto_budget ? std::string("auto") : std::to_string(cfg.kv.evict.budget),
               cfg.kv.evict.auto_budget ? fmt::format(" (lowest reached {})", st.kv_budget_min) : std::string(),
               st.kv.evicted_tokens, st.kv.recalled_tokens);
  }
  return kExitOk;
}

}  // namespace

void add_bench_commands(Cli& cli) {
  CLI::App* bench = cli.app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand("model",
                                         "Prompt-processing and generation speed of a model (like llama-bench), over hot "
                                         "KV blocks (refuses the engine's tier and policy flags: see bench offline)");
  add_model_flags(cmd, o->model);
  add_kv_flags(cmd, o->kv);
  cmd->add_option("--pp", o->pp, "Prompt tokens processed in one batch (0 = skip)")->capture_default_str();
  cmd->add_option("--tg", o->tg, "Tokens generated one step at a time (0 = skip)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences decoding together; tg reports aggregate tok/s")->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions (mean ± sd)")->capture_default_str();
  cmd->add_option("--depth", o->depth,
                  "Position tg starts at: that many tokens placed in the KV cache first, not computed (generation deep in a "
                  "long context; with --kv-host-memory and --kv-offload those beyond the KV pool are read from host memory)")
      ->capture_default_str();
  cmd->add_flag("--no-bandwidth", o->no_bandwidth, "Skip the memory bandwidth measurement");
  cmd->add_flag("--bandwidth-every-rep", o->bandwidth_every_rep,
                "Measure the bandwidth limit again after each repetition, and take each repetition's tg share of the mean "
                "of the probes just before and after it (for a host whose bandwidth drifts with its other tenants); the "
                "share reported is the mean of those");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([&cli, o] { cli.run = [o] { return run_bench_model(*o); }; });

  auto off = std::make_shared<BenchOfflineOptions>();
  CLI::App* oc = bench->add_subcommand("offline", "Throughput and latency of the engine on a batch of requests, in-process");
  add_model_flags(oc, off->model);
  add_engine_flags(oc, off->engine);
  add_kv_flags(oc, off->kv);
  oc->add_option("--num-prompts", off->num_prompts, "Requests")->capture_default_str();
  oc->add_option("--input-len", off->input_len, "Prompt tokens per request (random ids)")->capture_default_str();
  oc->add_option("--output-len", off->output_len, "Generated tokens per request (EOS ignored)")->capture_default_str();
  oc->add_option("--shared-prefix", off->shared_prefix, "Leading prompt tokens common to all requests")->capture_default_str();
  oc->add_option("--dataset", off->dataset, "JSONL of {\"prompt\": text, \"max_tokens\"?} instead of random prompts");
  oc->add_option("--request-rate", off->request_rate, "Poisson arrivals per second, or inf (all at once)")->capture_default_str();
  oc->add_option("--seed", off->seed, "Seed of the random prompts and arrivals")->capture_default_str();
  oc->add_flag("--json", off->json, "Print one JSON object");
  oc->callback([&cli, off] { cli.run = [off] { return run_bench_offline(*off); }; });

  add_bench_serve_command(cli, bench);
}

}  // namespace strata::cli
