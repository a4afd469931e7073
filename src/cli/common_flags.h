// Flag groups shared by several subcommands, defined once so that every command accepts the same
// names, defaults and help: model/threads, KV cache, sampling.
// Thread-safety: main thread only.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/kv_config.h"
#include "sample/sampling_params.h"

namespace strata::cli {

struct ModelFlags {
  std::string model;
  int threads = 0;  // 0 = physical cores
  std::string device = "auto";
  int tensor_parallel = 1;  // --tensor-parallel: ranks (threads of CPU backends), threads split between them
  bool mmap_weights = false;  // --mmap-weights: CPU compute from the file mapping (no copy in huge pages)

  // The backend to load the model on; throws strata::Error for an unknown or unusable --device
  // (e.g. cuda in a build without CUDA), so commands fail before any work.
  BackendOptions backend_options() const;
};
void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_required = true);

struct KvFlags {
  int32_t block_size = 16;
  std::string dtype = "f16";
  std::string memory;
  std::optional<int32_t> blocks;
  bool no_prefix_cache = false;
  int32_t hot_tokens = 256;
  std::string warm_dtype = "none";
  double warm_fraction = 0.75;
  std::string host_memory;
  bool offload = false;
  bool no_host_migrate = false;
  std::string spill_dir;
  std::string spill_size;
  std::string remote;
  int32_t remote_timeout_ms = 50;
  int64_t remote_ttl_s = 86400;
  std::string remote_write = "always";
  int32_t remote_queue = 1024;
  std::string evict = "none";
  std::string budget = "0";
  int32_t budget_floor = 64;
  int32_t sinks = 4;
  int32_t recent = -1;
  bool recall = false;
  int32_t recall_blocks = 4;
  std::string recall_choice = "quest";
  std::string recall_memory = "1GiB";

  // Validates and converts; throws strata::Error naming the flag.
  KvConfig to_config() const;
};
void add_kv_flags(CLI::App* cmd, KvFlags& f);

// Batch limits when the flags are not given: a GPU step of many sequences costs little more than
// one of a few (the weights are read once per step either way), so it takes more of them.
inline constexpr int32_t kCpuMaxBatchedTokens = 512, kCpuMaxSeqs = 64;
inline constexpr int32_t kCudaMaxBatchedTokens = 2048, kCudaMaxSeqs = 256;

struct EngineFlags {
  std::optional<int32_t> max_batched_tokens;  // default by device (above)
  std::optional<int32_t> max_seqs;
  std::string preempt = "auto";
  std::string scheduling = "fcfs";
  double batch_wait_ms = 0;
  double watermark = 0.01;
  int32_t ctx = 0;
  std::vector<std::string> tenant_weights;  // "name=weight"
  double qos_window_ms = 50;
  double qos_interactive_ttft_ms = 1000;
  double qos_batch_ttft_ms = 60000;
  std::string controller = "pid";
  double controller_kv_target = 0.9;
  double controller_tpot_slo_ms = 200;
  std::string controller_kv_gains = "0.3,0.5,0";
  std::string controller_tpot_gains = "0.3,0.5,0";
  int32_t controller_horizon_tokens = 512;
  double controller_reserve_max = 0.3;

  // The engine configuration with `kv` for a model on `device` (validated); throws strata::Error
  // naming the flag.
  EngineConfig to_config(const KvFlags& kv, DeviceKind device) const;
};
void add_engine_flags(CLI::App* cmd, EngineFlags& f);

struct SamplingFlags {
  std::optional<int32_t> max_tokens;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::vector<std::string> stop;

  // Validated sampling parameters for a vocabulary of `vocab_size`; throws strata::Error.
  SamplingParams to_params(int32_t vocab_size) const;
};
void add_sampling_flags(CLI::App* cmd, SamplingFlags& f);

}  // namespace strata::cli
