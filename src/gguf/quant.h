// Reference (scalar, exact) conversion between f32 and every GGML block type Strata reads or
// writes: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Kernels in backend/ must agree with these functions; tests compare against them.
// Block layouts are in gguf/quant_blocks.h. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "gguf/tensor_type.h"

namespace strata {

bool can_dequantize(GgmlType type);
bool can_quantize(GgmlType type);

// Converts one row: `n` elements, a multiple of the type's block size; src holds
// ggml_row_size(type, n) bytes. Precondition: can_dequantize(type).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes one row of `n` elements (multiple of the block size) into ggml_row_size(type, n) bytes
// at dst, choosing scales that minimise the reconstruction error as ggml's reference quantizers do.
// Precondition: can_quantize(type).
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace strata
