// A model's weights as the backend holds them (on CPU: views into the GGUF mapping, no copies of
// matrices; on a device: its uploaded copies), validated against the config at load. Thread-safety: immutable after load.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/tensor_parallel.h"

namespace strata {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightMatrix wq;              // [q_dim rows][n_embd]
  WeightMatrix wk;              // [kv_dim][n_embd]
  WeightMatrix wv;              // [kv_dim][n_embd]
  const float* bq = nullptr;         // [q_dim] (qwen2) or null
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;         // [kv_dim]
  WeightMatrix wo;              // [n_embd][q_dim]
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightMatrix w_gate;          // [n_ff][n_embd]
  WeightMatrix w_up;            // [n_ff][n_embd]
  WeightMatrix w_down;          // [n_embd][n_ff]
};

struct ModelWeights {
  WeightMatrix token_embd;       // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  WeightMatrix output;           // [n_vocab][n_embd]; = token_embd when tied
  const float* rope_freqs = nullptr;  // [n_rot/2] llama3 frequency divisors, or null
  std::vector<LayerWeights> layers;
  uint64_t matrix_bytes = 0;          // bytes of all matrices read by one decode step
  std::vector<std::vector<float>> owned;  // host f32 copies of small vectors stored in other types
  std::vector<std::vector<uint8_t>> owned_bytes;  // host copies of a rank's column slices and embedding

  // Reads every tensor from `f` and uploads it to `backend` (pointers above are backend memory).
  // Throws strata::Error naming the tensor when one is missing, misshapen or of a type the
  // backend cannot run.
  static ModelWeights load(const GgufFile& f, const ModelConfig& c, Backend& backend);
  // Rank shard.rank's part of the weights (model/tensor_parallel.h); `c` is the whole model's config.
  // Row slices are views (on CPU) of the file; column slices (wo, w_down) are packed copies; the
  // embedding is a copy of the rank's vocabulary rows plus one zero row (row shard.n_vocab: what a
  // token of another rank's slice reads). The layer matrices then have the shard config's shapes;
  // output has shard.n_vocab rows. Throws strata::Error as load(), and when a column slice of a
  // quantized matrix would cut its blocks.
  static ModelWeights load_shard(const GgufFile& f, const ModelConfig& c, const TpShard& shard, Backend& backend);
  // What load() checks that needs no backend: every tensor present, with its shape, and vectors of
  // a type that can be read. Cheap (reads only the tensor table); throws as load() does.
  static void check(const GgufFile& f, const ModelConfig& c);
};

}  // namespace strata
