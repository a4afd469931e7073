// The fused decode step (decode_fused.cu): every layer of a one-token, one-sequence decode pass in
// one persistent kernel, so that the weight stream does not stop at kernel boundaries. Opt-in
// (STRATA_CUDA_FUSED_DECODE=1, CudaBackend::decode_layers): on the H200 it is correct and level
// with the layer loop, not faster (docs/PERFORMANCE.md, "The fused decode step").
//
// Why: a decode step of a 1 B model on an H200 ran ~80 kernels (5 per layer); each one's ramp-up
// and tail, and the attention's chain of dependent loads at short contexts, left DRAM idle for
// about half of the step (docs/PERFORMANCE.md, "Where the time goes"). Here one block per
// multiprocessor runs the whole step: a producer warp streams the block's share of every weight
// matrix, layer after layer, into a ring of shared-memory slots by bulk copies (TMA, marked to leave
// L2 first, so that the KV rows and the activations the phases exchange stay there), and never
// waits for activations (weights do not depend on them), only for free slots; consumer warps take
// the slots as they fill, multiply them on the tensor cores, and wait, between the phases of a
// layer (QKV, attention, O, gate/up, down), at grid-wide barriers. While the consumers wait
// (attention, barriers), the ring fills.
//
// Numerics: f32 activations; each product of 16-bit weights and an f32 vector is taken on the
// tensor cores as the vector's two 16-bit halves (x = hi + lo, ~22 bits), summed in f32: ~1e-6 of
// the f32 product, in another summation order than the layer kernels (not the same bits); RMSNorm
// with 1 / sqrt(mean + eps) in f32; RoPE angles in double as rope.cuh; KV stored with round to
// nearest even as kv_store; softmax with expf. Deterministic: no float atomics but one residual
// add per element and phase.
// Thread-safety: launchers are called from the engine thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "backend/cuda/kernels.h"
#include "backend/cuda/rope.cuh"
#include "kv/kv_types.h"

namespace strata::cuda {

// One layer as the kernel reads it (device memory, an array of n_layer).
struct FusedLayerDev {
  const uint8_t* wq;
  const uint8_t* wk;
  const uint8_t* wv;
  const uint8_t* wo;
  const uint8_t* wg;
  const uint8_t* wu;
  const uint8_t* wd;
  const float* attn_norm;
  const float* ffn_norm;
  const float* bq;  // or null (qwen2 has them)
  const float* bk;
  const float* bv;
  KvLayerView kv;  // hot blocks only (no warm tier, no host slots)
};

// Bytes of one ring slot: one tile (at most 16 rows of a matrix, whole or a column block of them).
inline constexpr int32_t kFusedSlotBytes = 16384;
// Consumer warps per block (plus one producer warp).
inline constexpr int32_t kFusedConsumerWarps = 8;
// Longest context the fused step takes (its attention splits a head's keys over at most 8 blocks).
inline constexpr int32_t kFusedMaxCtx = 4096;

struct FusedDecodeParams {
  const FusedLayerDev* layers = nullptr;
  int32_t n_layer = 0;
  int32_t n_embd = 0, n_head = 0, n_kv = 0, head_dim = 0, n_ff = 0;
  bool bf16 = false;  // weights: bf16, else f16
  float eps = 0, scale = 0;
  RopeArgs rope{};
  const int32_t* pos = nullptr;     // [1]
  const int32_t* slot = nullptr;    // [1]: the new token's KV slot
  const AttnSeqDev* seq = nullptr;  // [1]
  const int32_t* table = nullptr;   // the sequence's block table
  float* x = nullptr;               // [n_embd] residual, in and out
  float* work = nullptr;            // fused_decode_work_floats(...) floats
  unsigned* barrier = nullptr;      // the grid barrier's counter, zeroed by the launcher
  // Diagnostics (null: off): fused_decode_trace_words(...) words of globaltimer stamps, see
  // fused_decode_trace_report.
  unsigned long long* trace = nullptr;
  // Diagnostics (STRATA_CUDA_FUSED_EXP): bit 0 (results wrong): the consumers skip the arithmetic
  // of the tiles; bit 1 (results wrong): the producer copies nothing (the slots complete at once);
  // bit 3: the weights' copies without their evict-first L2 policy.
  int32_t exp = 0;
};

// Words of a trace buffer for this shape; a text report of one traced pass (host copy of it).
int64_t fused_decode_trace_words(int32_t n_layer);
std::string fused_decode_trace_report(const unsigned long long* trace, int32_t n_layer);

// Whether the kernel takes this shape: n_embd and n_ff up to 8192 that tile (4, 8 or 16 rows of
// a multiple of 64, 32 or 16 columns per slot, or 4 rows of a column block), head_dim a multiple
// of 32 up to 128, n_head a multiple of n_kv, n_rot even and at most head_dim. (The caller checks
// the weights: one 16-bit type, plain rows, 16-byte aligned.)
bool fused_decode_fits(int32_t n_embd, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t n_ff, int32_t n_rot);
int64_t fused_decode_work_floats(int32_t n_embd, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t n_ff);
// Zeroes the barrier counter and launches the step (no programmatic dependent launch: the grid must
// be resident as a whole, and launched cooperatively).
void fused_decode(const FusedDecodeParams& p, cudaStream_t s);

}  // namespace strata::cuda
