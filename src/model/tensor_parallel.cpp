#include "model/tensor_parallel.h"

#include "core/check.h"
#include "core/error.h"

namespace strata {

TpShard tp_shard(const ModelConfig& c, int32_t rank, int32_t n) {
  STRATA_CHECK(n >= 1 && rank >= 0 && rank < n);
  if (c.n_head % n != 0) {
    fail("--tensor-parallel {}: the model's {} attention heads cannot be split over {} ranks (the head count must be a "
         "multiple of the rank count)",
         n, c.n_head, n);
  }
  if (c.n_head_kv >= n ? c.n_head_kv % n != 0 : n % c.n_head_kv != 0) {
    fail("--tensor-parallel {}: the model's {} KV heads cannot be split over {} ranks (either a multiple of the rank "
         "count, or a divisor of it: then replicated)",
         n, c.n_head_kv, n);
  }
  if (c.n_ff % n != 0) fail("--tensor-parallel {}: the feed-forward width {} is not a multiple of {}", n, c.n_ff, n);
  if (c.n_vocab % n != 0) fail("--tensor-parallel {}: the vocabulary of {} tokens is not a multiple of {}", n, c.n_vocab, n);
  TpShard s;
  s.rank = rank;
  s.n_ranks = n;
  s.config = c;
  s.config.n_head = c.n_head / n;
  s.head0 = rank * s.config.n_head;
  s.config.n_head_kv = tp_kv_heads(c, n);
  const int32_t group = c.n_head / c.n_head_kv;  // query heads per KV head
  // Each rank's query heads must use only its KV heads: with Hkv >= N whole groups per rank; else a
  // rank's heads lie within one group (N % Hkv == 0 and H % N == 0 make H/N divide the group).
  s.kv_head0 = c.n_head_kv >= n ? rank * s.config.n_head_kv : s.head0 / group;
  STRATA_CHECK(s.head0 / group == s.kv_head0 && (s.head0 + s.config.n_head - 1) / group < s.kv_head0 + s.config.n_head_kv);
  s.config.n_ff = c.n_ff / n;
  s.ff0 = rank * s.config.n_ff;
  s.n_vocab = c.n_vocab / n;
  s.vocab0 = rank * s.n_vocab;
  return s;
}

}  // namespace strata
