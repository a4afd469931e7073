// How a model is cut for tensor parallelism (--tensor-parallel N, Megatron style): which heads,
// feed-forward slice and vocabulary slice rank r of N holds, and the config its forward pass runs.
//
//   wq, wk, wv (and qwen2's biases): rows by head — rank r has query heads [r*H/N, (r+1)*H/N) and
//     the KV heads those need: KV heads [r*Hkv/N, ...) when Hkv >= N, else the one KV head its
//     query heads share (replicated on N/Hkv ranks);
//   wo: columns by query head;  w_gate, w_up: rows [r*F/N, (r+1)*F/N);  w_down: those columns;
//   token_embd and the output head: rows [r*V/N, (r+1)*V/N) of the vocabulary.
// A column split of a quantized matrix must fall on its blocks (256 columns for K-quants):
// ModelWeights::load checks it.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace strata {

struct TpShard {
  int32_t rank = 0;
  int32_t n_ranks = 1;
  int32_t head0 = 0;     // first query head of this rank (config.n_head of them)
  int32_t kv_head0 = 0;  // first KV head (config.n_head_kv of them)
  int32_t ff0 = 0;       // first feed-forward row (config.n_ff of them)
  int32_t vocab0 = 0;    // first vocabulary row of the embedding and the output head
  int32_t n_vocab = 0;   // vocabulary rows of this rank (V/N)
  // The rank's config: n_head = H/N, n_head_kv its KV heads, n_ff = F/N; everything else (n_embd,
  // head_dim, n_vocab: token ids stay the model's) as the model's.
  ModelConfig config;
};

// Rank `rank` of `n`. Throws strata::Error naming what does not divide: the query heads, the KV
// heads (Hkv % N when Hkv >= N, else N % Hkv), the feed-forward width or the vocabulary.
TpShard tp_shard(const ModelConfig& c, int32_t rank, int32_t n);

// The KV heads one rank stores (the KV cache of every rank has this many heads per layer).
inline int32_t tp_kv_heads(const ModelConfig& c, int32_t n) { return c.n_head_kv >= n ? c.n_head_kv / n : 1; }

}  // namespace strata
