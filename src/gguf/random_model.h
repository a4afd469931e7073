// Shapes of the random-weight models `strata gguf make-random` writes (named presets and explicit
// dimensions), and the writer that produces such a GGUF with the standard llama.cpp key and tensor
// names, so other GGUF tools load it. Used by tests and benchmarks.
// Thread-safety: pure data and a function with no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/tensor_type.h"

namespace strata {

struct RandomModelSpec {
  std::string arch = "llama";  // "llama" or "qwen2"
  uint32_t n_layer = 2;
  uint32_t n_embd = 256;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 4;
  uint32_t n_ff = 512;
  uint32_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tie_embeddings = false;    // no output.weight: the output projection reuses token_embd
  float llama3_rope_factor = 0;   // > 0: write rope_freqs.weight with Llama 3.1 scaling
  GgmlType dtype = GgmlType::kF16;  // type of the 2-D weight matrices (norms stay f32)
  uint64_t seed = 1;
  std::string name = "random";
};

// Named presets: "llama-134m", "llama-1b" (the Llama-3.2-1B shape), "qwen2-0.5b", "tiny".
std::optional<RandomModelSpec> random_model_preset(const std::string& name);
std::vector<std::string> random_model_preset_names();

// Writes the model to `path`, copying every tokenizer.* key of `vocab` (vocab size = its token
// count). Throws strata::Error for shapes the dtype cannot hold (e.g. rows not a multiple of 256 for
// q4_k) or for I/O errors. Returns the number of parameters written.
uint64_t write_random_model(const RandomModelSpec& spec, const GgufFile& vocab, const std::string& path);

}  // namespace strata
