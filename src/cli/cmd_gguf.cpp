// `strata gguf info`, `make-random`, `quantize` and `digest`.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf_file.h"
#include "gguf/quant.h"
#include "gguf/quantize_model.h"
#include "gguf/random_model.h"

namespace strata::cli {
namespace {

constexpr size_t kShownItems = 8;

nlohmann::ordered_json value_to_json(const GgufValue& v, size_t max_items) {
  switch (v.type()) {
    case GgufType::kString: return v.as_string();
    case GgufType::kBool: return v.as_bool();
    case GgufType::kFloat32:
    case GgufType::kFloat64: return v.as_float();
    case GgufType::kArray: {
      const GgufArray& a = v.as_array();
      nlohmann::ordered_json items = nlohmann::ordered_json::array();
      const size_t shown = std::min(a.items.size(), max_items);
      for (size_t i = 0; i < shown; ++i) items.push_back(value_to_json(a.items[i], max_items));
      if (shown == a.items.size()) return items;
      // Abbreviated: the first items and the full length.
      return {{"type", "array"}, {"elem_type", gguf_type_name(a.elem_type)}, {"length", a.items.size()}, {"first", items}};
    }
    default:
      if (v.type() == GgufType::kInt8 || v.type() == GgufType::kInt16 || v.type() == GgufType::kInt32 ||
          v.type() == GgufType::kInt64) {
        return v.as_int();
      }
      return v.as_uint();
  }
}

std::string human_count(uint64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return fmt::format("{}", n);
}

struct InfoOptions {
  std::string path;
  bool json = false;
  bool full = false;
};

int run_info(const InfoOptions& o) {
  auto f = GgufFile::open(o.path);
  const size_t max_items = o.full ? SIZE_MAX : kShownItems;
  uint64_t n_params = 0;
  std::map<std::string, size_t> type_counts;
  for (const auto& t : f->tensors()) {
    n_params += t.n_elements();
    ++type_counts[std::string(ggml_type_name(t.type))];
  }
  const std::string arch = f->architecture();
  std::optional<uint64_t> n_layer;
  if (!arch.empty()) {
    if (const GgufValue* v = f->find(arch + ".block_count"); v && v->is_integer()) n_layer = v->as_uint();
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["file"] = o.path;
    j["version"] = f->version();
    j["alignment"] = f->alignment();
    j["file_size"] = f->file_size();
    j["data_offset"] = f->data_offset();
    j["architecture"] = arch;
    if (n_layer) j["n_layer"] = *n_layer;
    j["tensor_count"] = f->tensors().size();
    j["parameter_count"] = n_params;
    j["tensor_types"] = type_counts;
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& kv : f->metadata()) meta[kv.key] = value_to_json(kv.value, max_items);
    j["metadata"] = std::move(meta);
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const auto& t : f->tensors()) {
      std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
      tensors.push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"shape", shape},
                         {"offset", t.offset}, {"n_bytes", t.n_bytes}});
    }
    j["tensors"] = std::move(tensors);
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return kExitOk;
  }
  std::string types;
  for (const auto& [name, count] : type_counts) types += fmt::format("{}{} ({})", types.empty() ? "" : ", ", name, count);
  fmt::print("file: {} ({})\n", o.path, format_bytes(f->file_size()));
  fmt::print("GGUF version {}, alignment {}, {} metadata keys, {} tensors\n", f->version(), f->alignment(),
             f->metadata().size(), f->tensors().size());
  fmt::print("architecture: {}{}\n", arch.empty() ? "(none)" : arch,
             n_layer ? fmt::format(", {} layers", *n_layer) : std::string());
  fmt::print("parameters: {} ({}), tensor types: {}\n", human_count(n_params), n_params, types.empty() ? "-" : types);
  fmt::print("\nmetadata:\n");
  for (const auto& kv : f->metadata()) {
    std::string type(gguf_type_name(kv.value.type()));
    if (kv.value.type() == GgufType::kArray) {
      const auto& arr = kv.value.as_array();
      type = fmt::format("array[{}; {}]", gguf_type_name(arr.elem_type), arr.items.size());
    }
    fmt::print("  {:<44} {:<22} = {}\n", kv.key, type, kv.value.to_string(max_items));
  }
  fmt::print("\ntensors:\n  {:<4} {:<36} {:<8} {:<22} {:>12} {:>12}\n", "#", "name", "type", "shape", "offset", "bytes");
  size_t i = 0;
  for (const auto& t : f->tensors()) {
    fmt::print("  {:<4} {:<36} {:<8} {:<22} {:>12} {:>12}\n", i++, t.name, ggml_type_name(t.type), t.shape_string(),
               t.offset, t.n_bytes);
  }
  return kExitOk;
}

struct MakeRandomOptions {
  std::string preset;
  std::string arch;
  std::optional<uint32_t> n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx;
  std::string vocab_from;
  std::string dtype = "f16";
  uint64_t seed = 1;
  bool tie = false;
  std::optional<float> rope_freq_base, rms_eps, llama3_rope_factor;
  std::string out;
};

int run_make_random(const MakeRandomOptions& o) {
  RandomModelSpec spec;
  if (!o.preset.empty()) {
    auto p = random_model_preset(o.preset);
    if (!p) {
      std::string names;
      for (const auto& n : random_model_preset_names()) names += (names.empty() ? "" : ", ") + n;
      fail("unknown preset '{}' (known: {})", o.preset, names);
    }
    spec = *p;
  }
  if (!o.arch.empty()) spec.arch = o.arch;
  if (o.n_layer) spec.n_layer = *o.n_layer;
  if (o.n_embd) spec.n_embd = *o.n_embd;
  if (o.n_head) spec.n_head = *o.n_head;
  if (o.n_head_kv) spec.n_head_kv = *o.n_head_kv;
  else if (o.n_head && o.preset.empty()) spec.n_head_kv = *o.n_head;
  if (o.n_ff) spec.n_ff = *o.n_ff;
  if (o.n_ctx) spec.n_ctx = *o.n_ctx;
  if (o.tie) spec.tie_embeddings = true;
  if (o.rope_freq_base) spec.rope_freq_base = *o.rope_freq_base;
  if (o.rms_eps) spec.rms_eps = *o.rms_eps;
  if (o.llama3_rope_factor) spec.llama3_rope_factor = *o.llama3_rope_factor;
  auto type = ggml_type_from_name(o.dtype);
  if (!type || (*type != GgmlType::kF32 && *type != GgmlType::kF16 && *type != GgmlType::kBF16 &&
                *type != GgmlType::kQ8_0 && *type != GgmlType::kQ4_0 && *type != GgmlType::kQ4_K &&
                *type != GgmlType::kQ5_K && *type != GgmlType::kQ6_K)) {
    fail("unsupported --dtype '{}' (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k)", o.dtype);
  }
  spec.dtype = *type;
  spec.seed = o.seed;
  if (o.preset.empty()) spec.name = "random-" + spec.arch;
  auto vocab = GgufFile::open(o.vocab_from);
  const uint64_t n = write_random_model(spec, *vocab, o.out);
  fmt::print(stderr, "wrote {}: {} {} layers, n_embd {}, {} heads ({} kv), ffn {}, ctx {}, {} weights, {} parameters\n",
             o.out, spec.arch, spec.n_layer, spec.n_embd, spec.n_head, spec.n_head_kv, spec.n_ff, spec.n_ctx, o.dtype,
             human_count(n));
  return kExitOk;
}

struct QuantizeOptions {
  std::string in, out, type;
};

int run_quantize(const QuantizeOptions& o) {
  auto type = ggml_type_from_name(o.type);
  if (!type || llama_file_type_of(*type) < 0 || !can_quantize(*type)) {
    fail("unsupported --type '{}' (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k)", o.type);
  }
  auto in = GgufFile::open(o.in);
  const int n = quantize_model(*in, *type, o.out);
  fmt::print(stderr, "wrote {}: {} matrices converted to {}\n", o.out, n, ggml_type_name(*type));
  return kExitOk;
}

int run_digest(const std::string& path) {
  auto f = GgufFile::open(path);
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [name, hex] : tensor_digests(*f)) j[name] = hex;
  fmt::print("{}\n", j.dump(1));
  return kExitOk;
}

}  // namespace

void add_gguf_commands(Cli& cli) {
  CLI::App* gguf = cli.app.add_subcommand("gguf", "Inspect and write GGUF files");
  gguf->require_subcommand(1);

  auto info = std::make_shared<InfoOptions>();
  CLI::App* info_cmd = gguf->add_subcommand("info", "Print a GGUF file's metadata and tensor table");
  info_cmd->add_option("file", info->path, "GGUF file")->required();
  info_cmd->add_flag("--json", info->json, "Print one JSON object instead of text");
  info_cmd->add_flag("--full", info->full, "Do not abbreviate long arrays");
  info_cmd->callback([&cli, info] { cli.run = [info] { return run_info(*info); }; });

  auto mr = std::make_shared<MakeRandomOptions>();
  CLI::App* mk = gguf->add_subcommand("make-random", "Write a random-weight Llama/Qwen2 model (for tests and benchmarks)");
  std::string presets;
  for (const auto& n : random_model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  mk->add_option("--preset", mr->preset, "Named shape: " + presets + " (explicit dimension flags override it)");
  mk->add_option("--arch", mr->arch, "Architecture: llama or qwen2 (default llama)");
  mk->add_option("--n-layer", mr->n_layer, "Number of transformer blocks")->check(CLI::PositiveNumber);
  mk->add_option("--n-embd", mr->n_embd, "Embedding width")->check(CLI::PositiveNumber);
  mk->add_option("--n-head", mr->n_head, "Attention heads")->check(CLI::PositiveNumber);
  mk->add_option("--n-head-kv", mr->n_head_kv, "Key/value heads (GQA); default = --n-head")->check(CLI::PositiveNumber);
  mk->add_option("--n-ff", mr->n_ff, "Feed-forward width")->check(CLI::PositiveNumber);
  mk->add_option("--ctx", mr->n_ctx, "Context length written to the metadata")->check(CLI::PositiveNumber);
  mk->add_option("--vocab-from", mr->vocab_from, "GGUF whose tokenizer.* metadata is copied (model or vocab-only)")
      ->required();
  mk->add_option("--dtype", mr->dtype, "Weight type: f32, f16, bf16, q8_0, q4_0, q4_k (output in q6_k), q5_k, q6_k")
      ->capture_default_str();
  mk->add_option("--seed", mr->seed, "Random seed (same seed, same weights)")->capture_default_str();
  mk->add_flag("--tie-embeddings", mr->tie, "Omit output.weight (the output projection reuses token_embd)");
  mk->add_option("--rope-freq-base", mr->rope_freq_base, "RoPE base frequency (default 10000, or the preset's)")
      ->check(CLI::PositiveNumber);
  mk->add_option("--rms-eps", mr->rms_eps, "RMSNorm epsilon (default 1e-5, or the preset's)")->check(CLI::PositiveNumber);
  mk->add_option("--llama3-rope-factor", mr->llama3_rope_factor,
                 "Write Llama-3.1 rope scaling with this factor (rope_freqs.weight); 0 = none")
      ->check(CLI::NonNegativeNumber);
  mk->add_option("-o,--output", mr->out, "Output GGUF path")->required();
  mk->callback([&cli, mr] { cli.run = [mr] { return run_make_random(*mr); }; });

  auto q = std::make_shared<QuantizeOptions>();
  CLI::App* qc = gguf->add_subcommand(
      "quantize", "Convert every weight matrix of a model to one type (like llama-quantize --pure, no imatrix)");
  qc->add_option("input", q->in, "Source GGUF")->required();
  qc->add_option("--type", q->type, "Target type: q8_0, q4_k, q6_k, f16, ... (norms and biases stay f32)")->required();
  qc->add_option("-o,--output", q->out, "Output GGUF path")->required();
  qc->callback([&cli, q] { cli.run = [q] { return run_quantize(*q); }; });

  auto dg = std::make_shared<std::string>();
  CLI::App* dc = gguf->add_subcommand("digest", "Print an XXH3-128 digest of each tensor's bytes (JSON)");
  dc->add_option("file", *dg, "GGUF file")->required();
  dc->callback([&cli, dg] { cli.run = [dg] { return run_digest(*dg); }; });
}

}  // namespace strata::cli
