// Plain parameter types of the forward-pass ops, shared by the backend interface (backend.h), every
// backend's kernels and the model: a weight matrix, rotary-embedding parameters, one sequence of
// an attention batch. They say nothing about which device their pointers address; the backend
// that handed the pointers out (backend.h) is the only code that dereferences them.
// Thread-safety: plain values.
#pragma once

#include <cstdint>

#include "gguf/tensor_type.h"
#include "kv/kv_types.h"

namespace strata {

// A weight matrix in any GGML type: `rows` output features, each a contiguous row of `cols` input
// features (GGUF ne[0] = cols, ne[1] = rows). `data` is in the memory of the backend the matrix
// was uploaded to (Backend::upload_matrix; on CPU the GGUF mapping itself).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;
  // How the rows lie in `data`. 0: one after the other, row r at data + r * row_bytes. kRowGroup
  // (only from CpuBackend::upload_matrix, for F16/BF16 rows of a multiple of 64 bytes): rows in
  // groups of kRowGroup, group g at data + g * kRowGroup * row_bytes, its rows interleaved 64
  // bytes at a time (bytes [64c, 64c + 64) of row r at group + (kRowGroup * c + r % kRowGroup) * 64),
  // so that a tile of the group's rows reads one sequential stream; the last group is padded with
  // zero rows. kQuantGroup (only from CpuBackend::upload_matrix, for Q2_K .. Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1): rows in groups of 16,
  // each super-block (Q8_0: pair of blocks) of the group's rows with the same 32-bit word of the 16 rows side by side
  // (backend/cpu/quant_groups.h). Only the backend that made such a matrix reads it.
  static constexpr uint8_t kRowGroup = 4;
  static constexpr uint8_t kQuantGroup = 16;
  uint8_t row_group = 0;
};

struct RopeParams {
  int32_t n_rot = 0;           // rotated dims per head (even, <= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // positions are multiplied by this
  bool neox = false;           // rotate (i, i + n_rot/2) instead of (2i, 2i+1)
  const float* freq_factors = nullptr;  // [n_rot/2] divisors of each frequency (llama3), or null;
                                        // backend memory (Backend::upload_vector)
};

// One sequence of a batch for attention: its new tokens are rows [q_begin, q_begin + n_q) of q
// and out, stored in KV slots start_pos .. start_pos + n_q - 1; row i attends to the keys of
// slots [0, start_pos + i] read through `blocks` (block j holds slots
// [j*block_size, (j+1)*block_size)). Slots are positions unless the sequence evicted tokens
// (kv/kv_manager.h: its slots are then dense, and every cached slot precedes the new rows, so
// the slot order is the causal order attention needs; RoPE used the true positions).
// `blocks` is host memory (the scheduler's block table).
//
// Importance (--kv-evict; backends that report it: Backend::reports_attention_importance()):
// when `importance` is set (host memory, [start_pos + n_q] floats), the kernel adds to
// importance[k] the softmax weight key slot k received from every query head of every row
// i >= importance_from, i.e. the attention mass summed over the query heads (all KV groups);
// called once per layer, the buffer sums over layers too. Rows before importance_from and
// sequences without a buffer cost nothing extra.
struct AttentionSeq {
  int32_t q_begin = 0;
  int32_t n_q = 0;
  int32_t start_pos = 0;
  const BlockId* blocks = nullptr;
  int32_t n_blocks = 0;
  float* importance = nullptr;
  int32_t importance_from = 0;
};

}  // namespace strata
