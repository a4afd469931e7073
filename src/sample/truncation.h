// Candidate selection for top-k, top-p and min-p without sorting the vocabulary.
// Rank order is: higher logit first, lower token id on ties. It is a strict total order, so every
// selection below is unique and the same on every standard library.
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/types.h"

namespace strata {

struct Candidate {
  float logit = 0.0f;
  TokenId token = kNoToken;
  float weight = 0.0f;  // unnormalized probability, filled by the caller where needed
};

inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// The min(k, #finite logits) best tokens in rank order (-inf and NaN never qualify).
// `block_max` is max_logit's per-block output for `logits`. O(V) with whole blocks skipped once the
// k-th best exceeds their max, plus O(k log k).
void select_top_k(std::span<const float> logits, std::span<const float> block_max, size_t k,
                  std::vector<Candidate>& out);

// Every token with logit >= threshold, in id order (NaN never qualifies).
void select_at_least(std::span<const float> logits, std::span<const float> block_max, float threshold,
                     std::vector<Candidate>& out);

// Keeps, in their current order, exactly the candidates of the shortest rank-order prefix whose
// weights sum to >= target (all of them when even the total falls short: rounding).
// Finds the boundary by a radix select on the logits' bits, 8 bits a pass, with the weight of
// each bucket summed in input order: O(n) however flat the distribution, no comparison sort, and
// the same result on every platform. `scratch` is working memory.
void keep_top_p(std::vector<Candidate>& cands, double target, std::vector<Candidate>& scratch);

}  // namespace strata
