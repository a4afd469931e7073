#include "gguf/random_model.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf_writer.h"
#include "gguf/quant.h"

namespace strata {
namespace {

// splitmix64: fast, seedable and identical on every platform (std distributions are not).
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0); }
};

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

void check_row(const std::string& tensor, GgmlType type, uint64_t n) {
  const auto t = ggml_type_traits(type);
  if (n % t.block_size != 0) {
    fail("tensor '{}': a row of {} elements cannot be stored as {} (rows must be a multiple of {})", tensor, n, t.name,
         t.block_size);
  }
}

}  // namespace

std::optional<RandomModelSpec> random_model_preset(const std::string& name) {
  RandomModelSpec s;
  s.name = name;
  if (name == "llama-134m") {
    s.n_layer = 12, s.n_embd = 768, s.n_head = 12, s.n_head_kv = 12, s.n_ff = 2048, s.n_ctx = 2048;
  } else if (name == "llama-1b") {  // Llama-3.2-1B
    s.n_layer = 16, s.n_embd = 2048, s.n_head = 32, s.n_head_kv = 8, s.n_ff = 8192, s.n_ctx = 131072;
    s.rope_freq_base = 500000.0f, s.tie_embeddings = true, s.llama3_rope_factor = 32.0f;
  } else if (name == "qwen2-0.5b") {  // Qwen2.5-0.5B
    s.arch = "qwen2";
    s.n_layer = 24, s.n_embd = 896, s.n_head = 14, s.n_head_kv = 2, s.n_ff = 4864, s.n_ctx = 32768;
    s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f, s.tie_embeddings = true;
  } else if (name == "tiny") {
    s.n_layer = 2, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 512, s.n_ctx = 1024;
  } else {
    return std::nullopt;
  }
  return s;
}

std::vector<std::string> random_model_preset_names() { return {"llama-134m", "llama-1b", "qwen2-0.5b", "tiny"}; }

uint64_t write_random_model(const RandomModelSpec& spec, const GgufFile& vocab, const std::string& path) {
  if (spec.arch != "llama" && spec.arch != "qwen2") fail("unsupported architecture '{}' (llama or qwen2)", spec.arch);
  if (spec.n_layer == 0 || spec.n_embd == 0 || spec.n_head == 0 || spec.n_head_kv == 0 || spec.n_ff == 0 ||
      spec.n_ctx == 0) {
    fail("every model dimension must be positive");
  }
  if (spec.n_embd % spec.n_head != 0) fail("n_embd {} is not a multiple of n_head {}", spec.n_embd, spec.n_head);
  if (spec.n_head % spec.n_head_kv != 0) fail("n_head {} is not a multiple of n_head_kv {}", spec.n_head, spec.n_head_kv);
  const uint32_t head_dim = spec.n_embd / spec.n_head;
  if (head_dim % 2 != 0) fail("head dimension {} must be even for rotary embeddings", head_dim);
  if (!can_quantize(spec.dtype)) fail("cannot write weights of type {}", ggml_type_name(spec.dtype));
  const auto tokens = vocab.get_string_array("tokenizer.ggml.tokens");
  const uint64_t n_vocab = tokens.size();
  if (n_vocab == 0) fail("{}: the vocabulary is empty", vocab.source());

  GgufWriter w;
  const std::string& a = spec.arch;
  w.set("general.architecture", GgufValue::str(a));
  w.set("general.name", GgufValue::str(spec.name));
  w.set("general.description", GgufValue::str("random weights written by strata gguf make-random"));
  w.set(a + ".context_length", GgufValue::u32(spec.n_ctx));
  w.set(a + ".embedding_length", GgufValue::u32(spec.n_embd));
  w.set(a + ".block_count", GgufValue::u32(spec.n_layer));
  w.set(a + ".feed_forward_length", GgufValue::u32(spec.n_ff));
  w.set(a + ".attention.head_count", GgufValue::u32(spec.n_head));
  w.set(a + ".attention.head_count_kv", GgufValue::u32(spec.n_head_kv));
  w.set(a + ".rope.freq_base", GgufValue::f32(spec.rope_freq_base));
  w.set(a + ".rope.dimension_count", GgufValue::u32(head_dim));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(spec.rms_eps));
  w.set(a + ".vocab_size", GgufValue::u32(static_cast<uint32_t>(n_vocab)));
  // Llama-3 rope scaling lives in the rope_freqs.weight tensor alone: llama.cpp's converter writes no
  // rope.scaling.* keys for it, and llama.cpp rejects a scaling type named "llama3".
  for (const auto& kv : vocab.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  }

  const GgmlType out_type = spec.dtype == GgmlType::kQ4_K ? GgmlType::kQ6_K : spec.dtype;
  uint64_t n_params = 0;
  // Weights are uniform with the standard deviation of a 0.02 normal init (scaled for the output
  // projections), so activations stay in a realistic range through all layers.
  auto add_matrix = [&](const std::string& name, GgmlType type, uint64_t cols, uint64_t rows, float stddev) {
    check_row(name, type, cols);
    n_params += cols * rows;
    const float amp = stddev * std::numbers::sqrt3_v<float>;
    const uint64_t seed = name_seed(spec.seed, name);
    w.add_tensor(name, type, {cols, rows}, [=](std::span<uint8_t> out) {
      SplitMix rng{seed};
      std::vector<float> row(cols);
      const uint64_t row_bytes = ggml_row_size(type, cols);
      for (uint64_t r = 0; r < rows; ++r) {
        for (auto& x : row) x = amp * rng.uniform();
        quantize_row(type, row.data(), out.data() + r * row_bytes, static_cast<int64_t>(cols));
      }
    });
  };
  auto add_vector = [&](const std::string& name, uint64_t n, float base, float jitter) {
    n_params += n;
    const uint64_t seed = name_seed(spec.seed, name);
    w.add_tensor(name, GgmlType::kF32, {n}, [=](std::span<uint8_t> out) {
      SplitMix rng{seed};
      auto* f = reinterpret_cast<float*>(out.data());
      for (uint64_t i = 0; i < n; ++i) f[i] = base + jitter * rng.uniform();
    });
  };

  const uint64_t q_dim = spec.n_head * head_dim;
  const uint64_t kv_dim = spec.n_head_kv * head_dim;
  const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer));
  add_matrix("token_embd.weight", spec.dtype, spec.n_embd, n_vocab, 0.02f);
  add_vector("output_norm.weight", spec.n_embd, 1.0f, 0.1f);
  if (!spec.tie_embeddings) add_matrix("output.weight", out_type, spec.n_embd, n_vocab, 0.02f);
  if (spec.llama3_rope_factor > 0) {
    // Llama 3.1 rope scaling (low_freq_factor 1, high_freq_factor 4, original context 8192),
    // stored as per-dimension divisors of the rotation frequency, as llama.cpp's converter does.
    const float factor = spec.llama3_rope_factor, low = 1.0f, high = 4.0f, orig = 8192.0f;
    std::vector<float> f(head_dim / 2);
    for (uint32_t i = 0; i < head_dim / 2; ++i) {
      const float freq = std::pow(spec.rope_freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(head_dim));
      const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
      if (wavelen < orig / high) f[i] = 1.0f;
      else if (wavelen > orig / low) f[i] = factor;
      else {
        const float smooth = (orig / wavelen - low) / (high - low);
        f[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
      }
    }
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", GgmlType::kF32, {f.size()}, std::move(bytes));
  }
  for (uint32_t l = 0; l < spec.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add_vector(p + "attn_norm.weight", spec.n_embd, 1.0f, 0.1f);
    add_matrix(p + "attn_q.weight", spec.dtype, spec.n_embd, q_dim, 0.02f);
    add_matrix(p + "attn_k.weight", spec.dtype, spec.n_embd, kv_dim, 0.02f);
    add_matrix(p + "attn_v.weight", spec.dtype, spec.n_embd, kv_dim, 0.02f);
    if (spec.arch == "qwen2") {
      add_vector(p + "attn_q.bias", q_dim, 0.0f, 0.02f);
      add_vector(p + "attn_k.bias", kv_dim, 0.0f, 0.02f);
      add_vector(p + "attn_v.bias", kv_dim, 0.0f, 0.02f);
    }
    add_matrix(p + "attn_output.weight", spec.dtype, q_dim, spec.n_embd, out_std);
    add_vector(p + "ffn_norm.weight", spec.n_embd, 1.0f, 0.1f);
    add_matrix(p + "ffn_gate.weight", spec.dtype, spec.n_embd, spec.n_ff, 0.02f);
    add_matrix(p + "ffn_up.weight", spec.dtype, spec.n_embd, spec.n_ff, 0.02f);
    add_matrix(p + "ffn_down.weight", spec.dtype, spec.n_ff, spec.n_embd, out_std);
  }
  // general.file_type as llama.cpp numbers it (llama_ftype): f32 0, f16 1, q4_0 2, q8_0 7,
  // q4_k_m 15, bf16 32.
  uint32_t ftype = 0;
  switch (spec.dtype) {
    case GgmlType::kF16: ftype = 1; break;
    case GgmlType::kQ4_0: ftype = 2; break;
    case GgmlType::kQ8_0: ftype = 7; break;
    case GgmlType::kQ4_K: ftype = 15; break;
    case GgmlType::kBF16: ftype = 32; break;
    default: ftype = 0;
  }
  w.set("general.file_type", GgufValue::u32(ftype));
  w.write_file(path);
  return n_params;
}

}  // namespace strata
