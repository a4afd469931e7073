#include "cli/common_flags.h"

#include "redis/redis_url.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <stdexcept>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/error.h"
#include "core/units.h"

namespace strata::cli {
namespace {

// The cold tier creates its file when the engine starts, which `serve` does on its loader thread
// after the port is open: check now that a file can be created in `dir`, so that a bad directory
// is a usage error before anything starts.
void check_spill_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    fail("--kv-spill-dir '{}' is not a directory{}", dir, std::filesystem::exists(dir, ec) ? "" : " (it does not exist)");
  }
  std::string probe = dir + "/.strata-spill-probe-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) fail("--kv-spill-dir '{}': cannot create a file there: {}", dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

// "NAME=WEIGHT" with a non-empty name and a finite WEIGHT > 0, or nullopt.
std::optional<std::pair<std::string, double>> parse_tenant_weight(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) return std::nullopt;
  const std::string number = text.substr(eq + 1);
  char* end = nullptr;
  errno = 0;
  const double w = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size() || !std::isfinite(w) || !(w > 0)) return std::nullopt;
  return std::make_pair(text.substr(0, eq), w);
}

// "KP,KI,KD": three finite numbers >= 0, or nullopt.
std::optional<std::array<double, 3>> parse_gains(const std::string& text) {
  std::array<double, 3> g{};
  size_t pos = 0;
  for (size_t i = 0; i < 3; ++i) {
    const size_t comma = i < 2 ? text.find(',', pos) : text.size();
    if (comma == std::string::npos) return std::nullopt;
    const std::string number = text.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    g[i] = std::strtod(number.c_str(), &end);
    if (number.empty() || errno != 0 || end != number.c_str() + number.size() || !std::isfinite(g[i]) || g[i] < 0) {
      return std::nullopt;
    }
    pos = comma + 1;
  }
  return g;
}

}  // namespace

void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_required) {
  auto* opt = cmd->add_option("-m,--model", f.model, "GGUF model file");
  if (model_required) opt->required();
  cmd->add_option("-t,--threads", f.threads, "Compute threads (default: one per physical core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", f.device,
                  "Where the model runs: cpu, cuda (an NVIDIA GPU; needs a build with CUDA), or auto (cuda when "
                  "built with it and a GPU is usable, else cpu)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", f.tensor_parallel,
                  "Split the model over N ranks (attention heads, feed-forward slices and the vocabulary, "
                  "Megatron-style; KV heads per rank): N CPU backends in threads of this process, --threads split "
                  "between them (at least 1 each). The model's head, KV head, feed-forward and vocabulary counts must "
                  "divide by N (KV heads: or divide N). With --device cuda: one GPU per rank (rank r on GPU r, NCCL "
                  "between them). The cold KV tier, --kv-evict and --kv-remote are refused with N > 1")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--mmap-weights", f.mmap_weights,
                "CPU: multiply straight from the memory-mapped GGUF file instead of copying F32/F16/BF16 and "
                "quantized weights into huge pages at load (F16/BF16 in groups of 4 rows, quantized types in "
                "groups of 16 rows) (no copy, less memory while loading; decode is slower from the file's 4 KiB "
                "pages and, for the quantized types, from the rows as stored)");
}

BackendOptions ModelFlags::backend_options() const {
  const auto d = device_kind_from_name(device);
  if (!d) fail("--device '{}' is not one of cpu, cuda, auto", device);
  BackendOptions o{resolve_device(*d), threads};
  o.tensor_parallel = tensor_parallel;
  o.mapped_weights = mmap_weights;
  return o;
}

void add_kv_flags(CLI::App* cmd, KvFlags& f) {
  cmd->add_option("--kv-block-size", f.block_size, "Tokens per KV block")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-dtype", f.dtype, "Element type of hot KV blocks: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--kv-memory", f.memory, "KV pool size in bytes, e.g. 2GiB, 512M (default 1GiB)");
  cmd->add_option("--kv-blocks", f.blocks, "KV pool size in blocks (overrides --kv-memory)");
  cmd->add_flag("--no-prefix-cache", f.no_prefix_cache, "Do not share or cache KV blocks between requests by prefix");
  cmd->add_option("--kv-hot-tokens", f.hot_tokens, "Most recent tokens of each sequence kept at full precision")
      ->capture_default_str();
  cmd->add_option("--kv-warm-dtype", f.warm_dtype,
                  "Re-encode older blocks: none (exact), int8, fp8 (e4m3), int4 (KIVI-style)")
      ->capture_default_str();
  cmd->add_option("--kv-warm-fraction", f.warm_fraction, "Share of the KV memory given to warm blocks when on")
      ->capture_default_str();
  cmd->add_option("--kv-host-memory", f.host_memory,
                  "Size of the host-memory part of the cold KV tier, e.g. 16GiB (pinned on a GPU): blocks of swapped-out "
                  "sequences and prefix-cached blocks evicted from the KV pool go there first; with --kv-spill-dir the file "
                  "is a tier below it: when host memory is full, its least recently written blocks move down to the file");
  cmd->add_flag("--kv-no-host-migrate", f.no_host_migrate,
                "With --kv-host-memory and --kv-spill-dir: blocks never move from host memory down to the file; new blocks "
                "go to the file once host memory is full");
  cmd->add_flag("--kv-offload", f.offload,
               "With --kv-host-memory: a sequence that outgrows the KV pool keeps its oldest full blocks in the host tier, "
               "where attention reads them in place (over PCIe on a GPU), instead of waiting or being preempted: one "
               "sequence may be longer than the KV pool holds");
  cmd->add_option("--kv-spill-dir", f.spill_dir, "Directory for the file part of the cold KV tier (a file there, deleted on exit)");
  cmd->add_option("--kv-spill-size", f.spill_size, "Size of the file part of the cold KV tier, e.g. 8GiB (needs --kv-spill-dir)");
  cmd->add_option("--kv-remote", f.remote,
                  "Share prefix KV blocks with other replicas through Redis: redis://[user:password@]host:port[/db] or "
                  "redis-cluster://host:port,host:port,...");
  cmd->add_option("--kv-remote-timeout-ms", f.remote_timeout_ms,
                  "How long a new request waits for the remote lookup of its prefix; a later answer is a miss")
      ->capture_default_str();
  cmd->add_option("--kv-remote-ttl", f.remote_ttl_s, "Seconds a published block lives in Redis (0: no expiry)")->capture_default_str();
  cmd->add_option("--kv-remote-write", f.remote_write,
                  "Which blocks are published: always (every full prefix block once computed) or on-evict (when "
                  "evicted from RAM)")
      ->capture_default_str();
  cmd->add_option("--kv-remote-queue", f.remote_queue, "Blocks waiting to be published beyond which more are dropped (counted)")
      ->capture_default_str();
  cmd->add_option("--kv-evict", f.evict,
                  "Eviction within a sequence beyond --kv-budget tokens: none, window (sinks + most recent), h2o "
                  "(sinks + heavy hitters by attention + recent) or snapkv (the prompt's last queries vote, then h2o)")
      ->capture_default_str();
  cmd->add_option("--kv-budget", f.budget,
                  "Cached tokens kept per sequence with --kv-evict (0: none), or auto: an elastic budget that shrinks "
                  "the longest sequences as the KV pool fills (above 90% usage) and grows back as it empties (below 75%)")
      ->capture_default_str();
  cmd->add_option("--kv-budget-floor", f.budget_floor,
                  "With --kv-budget auto: no budget shrinks below --kv-sinks + --kv-recent + this many tokens")
      ->capture_default_str();
  cmd->add_option("--kv-sinks", f.sinks, "First tokens of a sequence never evicted (attention sinks)")->capture_default_str();
  cmd->add_option("--kv-recent", f.recent,
                  "Most recent tokens never evicted by h2o/snapkv (-1: half of the budget after the sinks)")
      ->capture_default_str();
  cmd->add_flag("--kv-recall", f.recall,
                "With --kv-evict: demote evicted tokens (kept outside the KV pool in blocks with a per-channel min/max "
                "key summary) instead of deleting them, and attend each step to the --kv-recall-blocks demoted blocks "
                "the previous step's query scores highest");
  cmd->add_option("--kv-recall-blocks", f.recall_blocks, "Demoted blocks recalled into attention per step with --kv-recall")
      ->capture_default_str();
  cmd->add_option("--kv-recall-choice", f.recall_choice,
                  "Which demoted blocks --kv-recall attends: quest (the query's per-head votes on the key summaries) or "
                  "recent (the most recently demoted: a baseline that ignores the query)")
      ->capture_default_str();
  cmd->add_option("--kv-recall-memory", f.recall_memory,
                  "Host memory the demoted blocks of --kv-recall may take, e.g. 512MiB; past it the oldest go to a file "
                  "in --kv-spill-dir (up to --kv-spill-size) when given, else are dropped")
      ->capture_default_str();
}

KvConfig KvFlags::to_config() const {
  KvConfig c;
  if (block_size <= 0) fail("--kv-block-size must be positive, got {}", block_size);
  c.block_size = block_size;
  auto dt = kv_dtype_from_name(dtype);
  if (!dt) fail("--kv-dtype '{}' is not one of f32, f16, bf16", dtype);
  c.dtype = *dt;
  if (!memory.empty()) {
    auto bytes = parse_bytes(memory);
    if (!bytes || *bytes == 0) fail("--kv-memory '{}' is not a size (examples: 2GiB, 512M, 1000000)", memory);
    c.memory_bytes = *bytes;
  }
  if (blocks) {
    if (*blocks <= 0) fail("--kv-blocks must be positive, got {}", *blocks);
    c.num_blocks = *blocks;
  }
  c.prefix_cache = !no_prefix_cache;
  if (hot_tokens < 0) fail("--kv-hot-tokens must be >= 0, got {}", hot_tokens);
  c.hot_tokens = hot_tokens;
  auto wf = warm_format_from_name(warm_dtype);
  if (!wf) fail("--kv-warm-dtype '{}' is not one of none, int8, fp8, int4", warm_dtype);
  c.warm_format = *wf;
  if (!(warm_fraction > 0 && warm_fraction < 1)) fail("--kv-warm-fraction must be in (0, 1), got {}", warm_fraction);
  c.warm_fraction = warm_fraction;
  if (!host_memory.empty()) {
    auto bytes = parse_bytes(host_memory);
    if (!bytes || *bytes == 0) fail("--kv-host-memory '{}' is not a size (examples: 16GiB, 512M)", host_memory);
    c.host_bytes = *bytes;
  }
  if (offload && c.host_bytes == 0) fail("--kv-offload needs --kv-host-memory (the host slots it keeps blocks in)");
  c.offload = offload;
  c.host_migrate = !no_host_migrate;
  if (spill_dir.empty() != spill_size.empty()) fail("--kv-spill-dir and --kv-spill-size go together");
  if (!spill_dir.empty()) {
    auto bytes = parse_bytes(spill_size);
    if (!bytes || *bytes == 0) fail("--kv-spill-size '{}' is not a size (examples: 8GiB, 512M)", spill_size);
    check_spill_dir(spill_dir);
    c.spill_dir = spill_dir;
    c.spill_bytes = *bytes;
  }
  if (!remote.empty()) {
    try {
      (void)redis::RedisUrl::parse(remote);  // names the problem, never the password
    } catch (const Error& e) {
      fail("--kv-remote: {}", e.what());
    }
    c.remote_url = remote;
  }
  if (!(remote_timeout_ms >= 0 && remote_timeout_ms <= 60000)) fail("--kv-remote-timeout-ms must be in [0, 60000], got {}", remote_timeout_ms);
  c.remote_timeout_ms = remote_timeout_ms;
  if (!(remote_ttl_s >= 0 && remote_ttl_s <= int64_t{1} << 31)) fail("--kv-remote-ttl must be in [0, 2^31] seconds, got {}", remote_ttl_s);
  c.remote_ttl_s = remote_ttl_s;
  if (remote_write == "always") c.remote_write = KvConfig::RemoteWrite::kAlways;
  else if (remote_write == "on-evict") c.remote_write = KvConfig::RemoteWrite::kOnEvict;
  else fail("--kv-remote-write '{}' is not one of always, on-evict", remote_write);
  if (remote_queue <= 0) fail("--kv-remote-queue must be positive, got {}", remote_queue);
  c.remote_queue_blocks = remote_queue;
  const auto ek = evict_kind_from_name(evict);
  if (!ek) fail("--kv-evict '{}' is not one of none, window, h2o, snapkv", evict);
  c.evict.kind = *ek;
  if (budget == "auto") {
    c.evict.auto_budget = true;
  } else {
    int64_t b = 0;
    size_t used = 0;
    try {
      b = std::stoll(budget, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != budget.size()) fail("--kv-budget must be a number of tokens or auto, got '{}'", budget);
    if (b < 0) fail("--kv-budget must be >= 0, got {}", b);
    if (b > INT32_MAX) fail("--kv-budget must be at most {}, got {}", INT32_MAX, b);
    c.evict.budget = static_cast<int32_t>(b);
  }
  c.evict.budget_floor = budget_floor;
  c.evict.sinks = sinks;
  c.evict.recent = recent;
  c.evict.recall = recall;
  c.evict.recall_blocks = recall_blocks;
  if (recall_choice != "quest" && recall_choice != "recent") {
    fail("--kv-recall-choice '{}' is not one of quest, recent", recall_choice);
  }
  c.evict.recall_recent = recall_choice == "recent";
  {
    auto bytes = parse_bytes(recall_memory);
    if (!bytes || *bytes == 0) fail("--kv-recall-memory '{}' is not a size (examples: 1GiB, 512M)", recall_memory);
    c.evict.recall_memory_bytes = *bytes;
  }
  c.evict.validate();
  return c;
}

void add_engine_flags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("--max-batched-tokens", f.max_batched_tokens,
                  fmt::format("Tokens per step (prompt chunks + decodes; default {} on cpu, {} on cuda)",
                              kCpuMaxBatchedTokens, kCudaMaxBatchedTokens))
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-seqs", f.max_seqs,
                  fmt::format("Sequences per step (default {} on cpu, {} on cuda)", kCpuMaxSeqs, kCudaMaxSeqs))
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--preempt", f.preempt,
                  "When KV blocks run out: swap (to the cold tier), recompute, or auto (per victim, whichever costs less by "
                  "measurement: moving its blocks to the cold tier and back, or recomputing its tokens; recompute "
                  "without a cold tier)")
      ->capture_default_str();
  cmd->add_option("--scheduling", f.scheduling,
                  "Queue order: fcfs, priority, fair (virtual token counter per tenant), drf (weighted dominant "
                  "resource fairness over tenants: KV blocks held, tokens computed per step)")
      ->capture_default_str();
  cmd->add_option("--batch-wait-ms", f.batch_wait_ms, "When idle, wait this long for more arrivals before a step")
      ->capture_default_str();
  cmd->add_option("--kv-watermark", f.watermark, "Share of KV blocks kept free when admitting new sequences")
      ->capture_default_str();
  cmd->add_option("-c,--ctx", f.ctx, "Context length per sequence (default: the model's)");
  cmd->add_option("--tenant-weight", f.tenant_weights, "Fair-share weight of a tenant, NAME=WEIGHT (repeatable)");
  cmd->add_option("--qos-window-ms", f.qos_window_ms,
                  "When idle and only batch-class requests wait, wait this long for more to fill the batch "
                  "(an interactive arrival ends the wait)")
      ->capture_default_str();
  cmd->add_option("--qos-interactive-ttft-ms", f.qos_interactive_ttft_ms,
                  "TTFT deadline of the interactive class (orders its queue: earliest deadline first)")
      ->capture_default_str();
  cmd->add_option("--qos-batch-ttft-ms", f.qos_batch_ttft_ms, "TTFT deadline of the batch class")->capture_default_str();
  cmd->add_option("--controller", f.controller,
                  "Adaptive control of the KV and batching knobs: off (static flags), pid (the default: batch admissions by projected "
                  "KV demand; PID loops on that demand and on interactive TPOT move a KV reserve for interactive work, "
                  "the token budget, --max-seqs and the hot window)")
      ->capture_default_str();
  cmd->add_option("--controller-kv-target", f.controller_kv_target,
                  "Projected KV demand (held + still needed by the running requests, share of the pool) the pid "
                  "controller holds, in (0, 1]")
      ->capture_default_str();
  cmd->add_option("--controller-horizon-tokens", f.controller_horizon_tokens,
                  "Tokens ahead per running request that the projected KV demand counts (at most to its max_tokens)")
      ->capture_default_str();
  cmd->add_option("--controller-reserve-max", f.controller_reserve_max,
                  "Largest share of the KV pool the pid controller keeps from batch admissions for interactive work, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--controller-tpot-slo-ms", f.controller_tpot_slo_ms,
                  "Interactive TPOT (p90) above which the pid controller shrinks the batch")
      ->capture_default_str();
  cmd->add_option("--controller-kv-gains", f.controller_kv_gains, "KP,KI,KD of the KV usage loop (per second)")
      ->capture_default_str();
  cmd->add_option("--controller-tpot-gains", f.controller_tpot_gains, "KP,KI,KD of the interactive TPOT loop (per second)")
      ->capture_default_str();
}

EngineConfig EngineFlags::to_config(const KvFlags& kv, DeviceKind device) const {
  EngineConfig c;
  c.kv = kv.to_config();
  const bool gpu = device == DeviceKind::kCuda;
  c.sched.max_batched_tokens = max_batched_tokens.value_or(gpu ? kCudaMaxBatchedTokens : kCpuMaxBatchedTokens);
  c.sched.max_seqs = max_seqs.value_or(gpu ? kCudaMaxSeqs : kCpuMaxSeqs);
  auto p = preempt_mode_from_name(preempt);
  if (!p) fail("--preempt '{}' is not one of auto, swap, recompute", preempt);
  c.sched.preempt = *p;
  if (*p == PreemptMode::kSwap && c.kv.spill_dir.empty() && c.kv.host_bytes == 0) {
    fail("--preempt swap needs a cold tier (--kv-host-memory or --kv-spill-dir)");
  }
  auto s = scheduling_policy_from_name(scheduling);
  if (!s) fail("--scheduling '{}' is not one of fcfs, priority, fair, drf", scheduling);
  c.sched.policy = *s;
  if (!(batch_wait_ms >= 0 && batch_wait_ms <= 10000)) fail("--batch-wait-ms must be in [0, 10000], got {}", batch_wait_ms);
  c.sched.batch_wait_ms = batch_wait_ms;
  if (!(watermark >= 0 && watermark < 1)) fail("--kv-watermark must be in [0, 1), got {}", watermark);
  c.sched.watermark = watermark;
  if (ctx < 0) fail("--ctx must be >= 0 (0: the model's context), got {}", ctx);
  c.n_ctx = ctx;
  for (const auto& tw : tenant_weights) {
    const auto parsed = parse_tenant_weight(tw);
    if (!parsed) fail("--tenant-weight '{}' is not NAME=WEIGHT with a non-empty NAME and a finite WEIGHT > 0", tw);
    c.sched.tenant_weights[parsed->first] = parsed->second;
  }
  if (!(qos_window_ms >= 0 && qos_window_ms <= 10000)) fail("--qos-window-ms must be in [0, 10000], got {}", qos_window_ms);
  c.sched.qos_window_ms = qos_window_ms;
  if (!(qos_interactive_ttft_ms > 0 && qos_interactive_ttft_ms <= 86400e3)) {
    fail("--qos-interactive-ttft-ms must be in (0, 86400000], got {}", qos_interactive_ttft_ms);
  }
  if (!(qos_batch_ttft_ms > 0 && qos_batch_ttft_ms <= 86400e3)) fail("--qos-batch-ttft-ms must be in (0, 86400000], got {}", qos_batch_ttft_ms);
  c.sched.qos_ttft_ms = {qos_interactive_ttft_ms, qos_batch_ttft_ms};
  if (controller != "off" && controller != "pid") fail("--controller '{}' is not one of off, pid", controller);
  c.controller.enabled = controller == "pid";
  if (!(controller_kv_target > 0 && controller_kv_target <= 1)) {
    fail("--controller-kv-target must be in (0, 1], got {}", controller_kv_target);
  }
  c.controller.kv_target = controller_kv_target;
  if (!(controller_tpot_slo_ms > 0 && controller_tpot_slo_ms <= 600e3)) {
    fail("--controller-tpot-slo-ms must be in (0, 600000], got {}", controller_tpot_slo_ms);
  }
  c.controller.tpot_slo_ms = controller_tpot_slo_ms;
  if (!(controller_horizon_tokens >= 1 && controller_horizon_tokens <= (1 << 24))) {
    fail("--controller-horizon-tokens must be in [1, 16777216], got {}", controller_horizon_tokens);
  }
  c.controller.horizon_tokens = controller_horizon_tokens;
  if (!(controller_reserve_max >= 0 && controller_reserve_max < 1)) {
    fail("--controller-reserve-max must be in [0, 1), got {}", controller_reserve_max);
  }
  c.controller.reserve_max = controller_reserve_max;
  for (auto [flag, text, loop] : {std::tuple{"--controller-kv-gains", &controller_kv_gains, &c.controller.memory},
                                  std::tuple{"--controller-tpot-gains", &controller_tpot_gains, &c.controller.latency}}) {
    const auto g = parse_gains(*text);
    if (!g) fail("{} '{}' is not KP,KI,KD (three finite numbers >= 0)", flag, *text);
    loop->kp = (*g)[0];
    loop->ki = (*g)[1];
    loop->kd = (*g)[2];
  }
  return c;
}

void add_sampling_flags(CLI::App* cmd, SamplingFlags& f) {
  cmd->add_option("-n,--max-tokens", f.max_tokens, "Tokens to generate at most (default: until the context is full)");
  cmd->add_option("--temperature,--temp", f.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "Nucleus sampling: keep this much probability mass; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", f.min_p, "Drop tokens below min_p x p(most likely); 0 = off")->capture_default_str();
  cmd->add_option("--repeat-penalty", f.repeat_penalty, "Repetition penalty over prompt+output; 1 = off")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", f.presence_penalty, "OpenAI presence penalty [-2, 2]")->capture_default_str();
  cmd->add_option("--frequency-penalty", f.frequency_penalty, "OpenAI frequency penalty [-2, 2]")->capture_default_str();
  cmd->add_option("-s,--seed", f.seed, "Random seed (same seed, same tokens); default: random");
  cmd->add_flag("--ignore-eos", f.ignore_eos, "Keep generating after end-of-generation tokens");
  cmd->add_option("--stop", f.stop, "Stop string (repeatable); not included in the output");
}

SamplingParams SamplingFlags::to_params(int32_t vocab_size) const {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.seed = seed;
  p.ignore_eos = ignore_eos;
  p.stop = stop;
  if (max_tokens && *max_tokens < 1) fail("--max-tokens must be >= 1, got {}", *max_tokens);
  if (auto err = p.validate(vocab_size)) fail("invalid sampling flag: {}", *err);
  return p;
}

}  // namespace strata::cli
