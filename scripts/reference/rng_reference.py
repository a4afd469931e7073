#!/usr/bin/env python3
"""Reference numbers for the sampler's random stream, computed independently in pure Python.

Strata's Rng (src/sample/rng.h) is xoshiro256** (Blackman and Vigna) whose four state words are
the next four outputs of splitmix64 (Vigna) started at the seed; a nonzero stream number s is
mixed in first, state = seed ^ splitmix64(s). Uniform doubles are the top 53 bits times 2^-53.
The sampler draws the first token whose cumulative softmax probability exceeds that u.

This script recomputes, from those definitions alone, the constants pinned by
  tests/sample/rng_test.cpp      Rng.Splitmix64MatchesTheReferenceOutputs, Rng.StreamForASeedIsPinned
  tests/sample/sampler_test.cpp  Sampler.SeedIsPinnedAcrossBuildsAndPlatforms
and first checks itself against the published vectors (splitmix64 from 0; xoshiro256** from the
state {1, 2, 3, 4}: 11520, 0, 1509978240).

Usage:
  python3 scripts/reference/rng_reference.py          print the numbers, as the tests write them
  python3 scripts/reference/rng_reference.py --check  also compare with the constants in the two
                                                      test files; exit 1 on any difference
"""

import argparse
import math
import os
import re
import sys

MASK = (1 << 64) - 1
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def splitmix64(state):
    """One step: returns (new_state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256ss:
    def __init__(self, words):
        self.s = list(words)

    @classmethod
    def seeded(cls, seed, stream=0):
        state = seed & MASK
        if stream:
            _, h = splitmix64(stream)
            state ^= h
        words = []
        for _ in range(4):
            state, out = splitmix64(state)
            words.append(out)
        return cls(words)

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def next_double(self):
        return (self.next_u64() >> 11) / float(1 << 53)


def self_test():
    state, outs = 0, []
    for _ in range(4):
        state, out = splitmix64(state)
        outs.append(out)
    # splitmix64.c from state 0 (the outputs every port of Vigna's code reproduces).
    assert outs[0] == 0xE220A8397B1DCDAF, hex(outs[0])
    x = Xoshiro256ss([1, 2, 3, 4])
    assert [x.next_u64() for _ in range(3)] == [11520, 0, 1509978240]


def sampler_draws(seed, logits, n, margin=0.01):
    """First-token-whose-cumulative-softmax-exceeds-u draws; also checks no u is near a boundary."""
    m = max(logits)
    w = [math.exp(l - m) for l in logits]
    total = sum(w)
    cum, acc = [], 0.0
    for x in w:
        acc += x / total
        cum.append(acc)
    rng = Xoshiro256ss.seeded(seed)
    tokens, closest = [], 1.0
    for _ in range(n):
        u = rng.next_double()
        closest = min(closest, min(abs(u - c) for c in cum[:-1]))
        tokens.append(next((i for i, c in enumerate(cum) if u < c), len(cum) - 1))
    if closest < margin:
        raise SystemExit(f"a draw lies within {closest:.4f} of a boundary: float rounding could flip it")
    return tokens, closest


def compute():
    """name -> list of values, in the order the tests assert them."""
    values = {}
    state, outs = 0, []
    for _ in range(4):
        state, out = splitmix64(state)
        outs.append(out)
    values["splitmix64 from state 0"] = outs
    for label, seed, stream, n in (("Rng(0)", 0, 0, 4), ("Rng(42)", 42, 0, 2), ("Rng(42, 1)", 42, 1, 2)):
        r = Xoshiro256ss.seeded(seed, stream)
        values[label] = [r.next_u64() for _ in range(n)]
    # Logits 0.25 * i for i in 0..7, temperature 1, no truncation, seed 42, eight draws.
    tokens, closest = sampler_draws(42, [0.25 * i for i in range(8)], 8)
    values["sampler seed 42, logits 0.25*i (8)"] = tokens
    return values, closest


def constants_in_tests():
    """The same numbers as the test files hold them."""
    rng = open(os.path.join(ROOT, "tests", "sample", "rng_test.cpp"), encoding="utf-8").read()
    sampler = open(os.path.join(ROOT, "tests", "sample", "sampler_test.cpp"), encoding="utf-8").read()

    def body(text, test):
        start = text.index(test)
        return text[start:text.index("\n}\n", start)]

    def hexes(text):
        return [int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]+)ull", text)]

    split = body(rng, "TEST(Rng, Splitmix64MatchesTheReferenceOutputs)")
    pinned = body(rng, "TEST(Rng, StreamForASeedIsPinned)")
    got = {"splitmix64 from state 0": hexes(split)}
    for label, var in (("Rng(0)", "zero"), ("Rng(42)", "seed42"), ("Rng(42, 1)", "stream1")):
        got[label] = [int(h, 16) for h in re.findall(var + r"\.next_u64\(\), 0x([0-9a-fA-F]+)ull", pinned)]
    seed_test = body(sampler, "TEST(Sampler, SeedIsPinnedAcrossBuildsAndPlatforms)")
    m = re.search(r"std::vector<TokenId>\{([0-9, ]+)\}", seed_test)
    got["sampler seed 42, logits 0.25*i (8)"] = [int(x) for x in m.group(1).split(",")] if m else []
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the constants in the tests")
    args = ap.parse_args()
    self_test()
    values, closest = compute()
    for label, vals in values.items():
        shown = ", ".join(str(v) if label.startswith("sampler") else f"0x{v:016x}ull" for v in vals)
        print(f"{label}: {shown}")
    print(f"(closest draw to a probability boundary: {closest:.4f})")
    if not args.check:
        return 0
    bad = 0
    for label, want in constants_in_tests().items():
        if want != values[label]:
            bad += 1
            print(f"DIFFERS {label}: tests hold {want}, Python computes {values[label]}")
    print("tests match" if not bad else f"{bad} difference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
