// Re-quantizing a whole GGUF model (what llama.cpp's `llama-quantize --pure` does without an
// importance matrix): every weight matrix becomes one target type through the reference
// quantizers of gguf/quant.h, everything else is copied. And per-tensor digests, so that two files
// can be compared tensor by tensor without keeping either (the llama.cpp reference test data).
// Thread-safety: pure functions over their arguments.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/tensor_type.h"

namespace strata {

// llama.cpp's general.file_type (llama_ftype) for a model whose matrices are all `type`, or -1
// when llama.cpp has no such file type.
int llama_file_type_of(GgmlType type);

// Writes `in` to `out_path` with every tensor of two or more dimensions (the weight matrices,
// including token_embd and output) converted to `type`; 1-D tensors (norms, biases, rope_freqs)
// keep their type, and the metadata is copied with general.file_type updated. The conversion goes
// through f32 (dequantize_row, then quantize_row), as llama-quantize does. Throws strata::Error when
// `type` cannot be written or a matrix's row length is not a multiple of its block size (naming the
// tensor). Returns the number of tensors converted.
int quantize_model(const GgufFile& in, GgmlType type, const std::string& out_path);

// (name, XXH3-128 of the tensor's bytes as 32 hex digits), in file order.
std::vector<std::pair<std::string, std::string>> tensor_digests(const GgufFile& file);

}  // namespace strata
