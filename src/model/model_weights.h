// Views of a model's weights inside the GGUF mapping (no copies of matrices), validated against the
// config at load. Thread-safety: immutable after load.
#pragma once

#include <memory>
#include <vector>

#include "backend/cpu/kernels.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace strata {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  cpu::WeightMatrix wq;              // [q_dim rows][n_embd]
  cpu::WeightMatrix wk;              // [kv_dim][n_embd]
  cpu::WeightMatrix wv;              // [kv_dim][n_embd]
  const float* bq = nullptr;         // [q_dim] (qwen2) or null
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;         // [kv_dim]
  cpu::WeightMatrix wo;              // [n_embd][q_dim]
  const float* ffn_norm = nullptr;   // [n_embd]
  cpu::WeightMatrix w_gate;          // [n_ff][n_embd]
  cpu::WeightMatrix w_up;            // [n_ff][n_embd]
  cpu::WeightMatrix w_down;          // [n_embd][n_ff]
};

struct ModelWeights {
  cpu::WeightMatrix token_embd;       // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  cpu::WeightMatrix output;           // [n_vocab][n_embd]; = token_embd when tied
  const float* rope_freqs = nullptr;  // [n_rot/2] llama3 frequency divisors, or null
  std::vector<LayerWeights> layers;
  uint64_t matrix_bytes = 0;          // bytes of all matrices read by one decode step
  std::vector<std::vector<float>> owned;  // f32 copies of small vectors stored in other types

  // Throws strata::Error naming the tensor when one is missing, misshapen or of a type the
  // kernels cannot run.
  static ModelWeights load(const GgufFile& f, const ModelConfig& c);
};

}  // namespace strata
