#include "sample/truncation.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#include "sample/logit_kernels.h"

namespace strata {

void select_top_k(std::span<const float> logits, std::span<const float> block_max, size_t k,
                  std::vector<Candidate>& out) {
  out.clear();
  if (k == 0) return;
  // A heap whose front is the worst kept candidate. Tokens arrive in id order, so a newcomer that
  // ties the worst loses the tie and only a strictly greater logit can enter.
  const auto worse_first = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t b = 0; b < block_max.size(); ++b) {
    if (out.size() == k && !(block_max[b] > out.front().logit)) continue;
    const size_t end = std::min(logits.size(), (b + 1) * kLogitBlock);
    for (size_t i = b * kLogitBlock; i < end; ++i) {
      const float x = logits[i];
      if (out.size() < k) {
        if (!(x > kNegInf)) continue;
        out.push_back({x, static_cast<TokenId>(i), 0.0f});
        std::push_heap(out.begin(), out.end(), worse_first);
      } else if (x > out.front().logit) {
        std::pop_heap(out.begin(), out.end(), worse_first);
        out.back() = {x, static_cast<TokenId>(i), 0.0f};
        std::push_heap(out.begin(), out.end(), worse_first);
      }
    }
  }
  std::sort(out.begin(), out.end(), ranks_before);
}

void select_at_least(std::span<const float> logits, std::span<const float> block_max, float threshold,
                     std::vector<Candidate>& out) {
  out.clear();
  for (size_t b = 0; b < block_max.size(); ++b) {
    if (!(block_max[b] >= threshold)) continue;
    const size_t end = std::min(logits.size(), (b + 1) * kLogitBlock);
    for (size_t i = b * kLogitBlock; i < end; ++i)
      if (logits[i] >= threshold) out.push_back({logits[i], static_cast<TokenId>(i), 0.0f});
  }
}

namespace {

// An unsigned key that orders like the logit (NaN excluded); -0 is folded into +0 first, since
// the rank order sees them as equal.
uint32_t order_key(float logit) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Copies the candidates of `in` that satisfy `keep` to `out` (which may be in.data()), in order,
// and returns how many. Branch-free: near the top-p boundary of a flat distribution `keep` is a
// coin flip, and a mispredicted branch per candidate would cost more than the copy.
template <typename Keep>
size_t compact(std::span<const Candidate> in, Candidate* out, Keep keep) {
  size_t n = 0;
  for (const Candidate& c : in) {
    const Candidate copy = c;
    out[n] = copy;
    n += keep(copy) ? 1 : 0;
  }
  return n;
}

}  // namespace

void keep_top_p(std::vector<Candidate>& cands, double target, std::vector<Candidate>& scratch) {
  if (cands.empty()) return;
  // Narrow down, 8 key bits a pass from the top, to the bucket of equal-prefix keys in which the
  // cumulative weight (higher keys first) reaches what is still needed. The first pass reads
  // `cands`, the later ones filter `scratch` in place.
  double need = target;
  uint32_t prefix = 0;  // the key bits fixed so far
  for (int shift = 24; shift >= 0; shift -= 8) {
    const std::span<const Candidate> bucket = shift == 24 ? std::span<const Candidate>(cands) : scratch;
    // Four interleaved histograms: flat distributions put most candidates in a few buckets, and
    // one histogram would chain every add to the previous one through memory.
    double part[4][256] = {};
    size_t i = 0;
    for (const Candidate& c : bucket) part[i++ & 3][(order_key(c.logit) >> shift) & 0xffu] += c.weight;
    double mass[256];
    for (size_t d = 0; d < 256; ++d) mass[d] = (part[0][d] + part[1][d]) + (part[2][d] + part[3][d]);
    int digit = 255;
    double above = 0.0;
    while (digit > 0 && above + mass[digit] < need) above += mass[digit--];
    if (above + mass[digit] < need) {
      // Rounding left the target just above the total: keep everything, i.e. descend into the
      // lowest non-empty bucket, where the boundary is the last candidate.
      while (mass[digit] == 0.0 && digit < 255) ++digit;
      need = std::numeric_limits<double>::infinity();
    }
    need -= above;
    prefix |= static_cast<uint32_t>(digit) << shift;
    const uint32_t mask = ~0u << shift;
    const auto inside = [&](const Candidate& c) { return (order_key(c.logit) & mask) == prefix; };
    if (shift == 24) {
      scratch.resize(cands.size());
      scratch.resize(compact(cands, scratch.data(), inside));
    } else {
      scratch.resize(compact(scratch, scratch.data(), inside));
    }
  }
  if (scratch.empty()) return;  // no positive weight anywhere: nothing to cut by
  // `scratch` now holds the candidates whose logit equals the boundary's. Among equal logits the
  // rank order is by id: take the lowest ids until the need is met. (Inputs in id or rank order,
  // the sampler's, already list them by id.)
  const auto by_id = [](const Candidate& a, const Candidate& b) { return a.token < b.token; };
  if (!std::is_sorted(scratch.begin(), scratch.end(), by_id)) std::sort(scratch.begin(), scratch.end(), by_id);
  TokenId last_id = scratch.back().token;
  double cum = 0.0;
  for (const Candidate& c : scratch) {
    cum += c.weight;
    if (cum >= need) {
      last_id = c.token;
      break;
    }
  }
  const float boundary = scratch.front().logit;
  cands.resize(compact(cands, cands.data(), [&](const Candidate& c) {
    return (c.logit > boundary) | ((c.logit == boundary) & (c.token <= last_id));
  }));
}

}  // namespace strata

