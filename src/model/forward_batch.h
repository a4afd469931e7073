// The input of one forward pass: for each sequence its new tokens (a prompt chunk or one decode
// token, the model does not care which), their first position, its block table, and which rows
// need logits. Thread-safety: a plain value; the spans borrow from the caller for one call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/types.h"
#include "kv/kv_types.h"

namespace strata {

enum class LogitsMode : uint8_t {
  kNone,  // no logits (a prompt chunk that is not the last)
  kLast,  // logits of the last new token (sampling)
  kAll,   // logits of every new token (perplexity, consistency tests)
};

struct ForwardSeq {
  std::span<const TokenId> tokens;  // new tokens, at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;            // tokens before it are already in the KV cache
  std::span<const BlockId> blocks;  // covers slots [0, kv_start + tokens.size())
  LogitsMode logits = LogitsMode::kLast;
  // KV slot of the first new token: -1 = start_pos. A sequence that evicted tokens
  // (kv/kv_manager.h) holds them in slots [0, kv_start), all attended to.
  int32_t kv_start = -1;
  // Where the attention mass each slot receives goes (AttentionSeq::importance), summed over
  // layers and query heads, for rows >= importance_from; null: not computed.
  float* importance = nullptr;
  int32_t importance_from = 0;
  // Where the query of the last new token goes, per layer, after RoPE ([n_layer][n_head][head_dim],
  // host memory; --kv-recall ranks demoted blocks with it); null: not copied.
  float* query = nullptr;
};

struct ForwardBatch {
  std::vector<ForwardSeq> seqs;

  int64_t n_tokens() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += static_cast<int64_t>(s.tokens.size());
    return n;
  }
  int64_t n_logit_rows() const {
    int64_t n = 0;
    for (const auto& s : seqs) {
      if (s.tokens.empty()) continue;
      n += s.logits == LogitsMode::kAll ? static_cast<int64_t>(s.tokens.size()) : s.logits == LogitsMode::kLast ? 1 : 0;
    }
    return n;
  }
};

}  // namespace strata
