#include "model/model_config.h"

#include "core/error.h"

namespace strata {

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.architecture();
  if (c.arch_name == "llama") {
    c.arch = ModelArch::kLlama;
    c.rope_style = RopeStyle::kNormal;
  } else if (c.arch_name == "qwen2") {
    c.arch = ModelArch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.has_qkv_bias = true;
  } else if (c.arch_name.empty()) {
    fail("{}: no 'general.architecture' key: not a model file (a vocabulary-only GGUF?)", f.source());
  } else {
    fail("{}: unsupported architecture '{}' (supported: llama, qwen2)", f.source(), c.arch_name);
  }
  const std::string& a = c.arch_name;
  c.name = f.find_string("general.name").value_or("");
  auto get_i32 = [&](const std::string& key) -> int32_t {
    const uint64_t v = f.get_uint(key);
    if (v == 0 || v > (1u << 30)) fail("{}: metadata key '{}' has the impossible value {}", f.source(), key, v);
    return static_cast<int32_t>(v);
  };
  c.n_ctx_train = get_i32(a + ".context_length");
  c.n_embd = get_i32(a + ".embedding_length");
  c.n_layer = get_i32(a + ".block_count");
  c.n_ff = get_i32(a + ".feed_forward_length");
  c.n_head = get_i32(a + ".attention.head_count");
  c.n_head_kv = f.has(a + ".attention.head_count_kv") ? get_i32(a + ".attention.head_count_kv") : c.n_head;
  if (c.n_head % c.n_head_kv != 0) {
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.source(), c.n_head, c.n_head_kv);
  }
  c.head_dim = f.has(a + ".attention.key_length") ? get_i32(a + ".attention.key_length") : c.n_embd / c.n_head;
  if (f.has(a + ".attention.value_length") && get_i32(a + ".attention.value_length") != c.head_dim) {
    fail("{}: different key and value head sizes are not supported", f.source());
  }
  if (!f.has(a + ".attention.key_length") && c.n_embd % c.n_head != 0) {
    fail("{}: embedding_length {} is not a multiple of head_count {}", f.source(), c.n_embd, c.n_head);
  }
  c.n_rot = f.has(a + ".rope.dimension_count") ? get_i32(a + ".rope.dimension_count") : c.head_dim;
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", f.source(), c.n_rot, c.head_dim);
  }
  c.rope_freq_base = static_cast<float>(f.find_float(a + ".rope.freq_base").value_or(10000.0));
  if (auto type = f.find_string(a + ".rope.scaling.type"); type && *type == "linear") {
    const double factor = f.find_float(a + ".rope.scaling.factor").value_or(1.0);
    if (factor > 0) c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (type && *type != "none" && *type != "llama3") {
    // llama3 scaling is carried by the rope_freqs.weight tensor; yarn is not implemented.
    fail("{}: unsupported rope scaling type '{}'", f.source(), *type);
  }
  if (auto s = f.find_float(a + ".rope.scale_linear"); s && *s > 0) c.rope_freq_scale = static_cast<float>(1.0 / *s);
  c.rms_eps = static_cast<float>(f.find_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(c.rms_eps > 0)) fail("{}: layer_norm_rms_epsilon must be positive", f.source());
  const auto n_tokens = f.get_array("tokenizer.ggml.tokens").items.size();
  c.n_vocab = static_cast<int32_t>(n_tokens);
  if (c.n_vocab == 0) fail("{}: the vocabulary is empty", f.source());
  return c;
}

}  // namespace strata
