// Hyper-parameters of a model, read from GGUF metadata. Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_file.h"

namespace strata {

enum class ModelArch { kLlama, kQwen2 };
enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]) — llama.cpp's LLAMA_ROPE_TYPE_NORM
  kNeox,    // rotate halves (x[i], x[i + n_rot/2]) — Qwen2, GPT-NeoX
};

struct ModelConfig {
  ModelArch arch = ModelArch::kLlama;
  std::string arch_name;      // "llama", "qwen2"
  std::string name;           // general.name when present
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;    // context length the model was trained for
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;       // n_embd / n_head unless attention.key_length says otherwise
  int32_t n_ff = 0;
  int32_t n_rot = 0;          // rotary dimensions (rope.dimension_count), <= head_dim
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear scaling: positions multiplied by this
  RopeStyle rope_style = RopeStyle::kNormal;
  float rms_eps = 1e-5f;
  bool has_qkv_bias = false;

  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }

  // Reads and validates the config; throws strata::Error naming the key or the problem
  // (unsupported architecture, inconsistent head counts, ...).
  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace strata
