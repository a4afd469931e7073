// The sampler's random numbers: xoshiro256** seeded through splitmix64, with uniform doubles made
// from the top 53 bits. Everything is integer arithmetic and one exact multiplication, so a seed
// gives the same stream on every platform and standard library (std:: distributions do not).
// Thread-safety: an Rng is a plain value; use one per thread (one per sequence in practice).
#pragma once

#include <cstdint>

namespace strata {

// One step of splitmix64 (Vigna): advances `state` and returns the next output.
uint64_t splitmix64_next(uint64_t& state);

class Rng {
 public:
  // Streams with different `stream` numbers from the same seed are independent; stream 0 is the
  // plain seed. The engine uses stream i for the i-th of a request's n samples.
  explicit Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t next_u64();

  // Uniform in [0, 1), a multiple of 2^-53.
  double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// A seed from the operating system's entropy source, for requests that did not give one.
uint64_t random_seed();

}  // namespace strata
