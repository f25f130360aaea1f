#pragma once
// The random streams of a request, derived from its seed so that runs
// reproduce exactly. SplitMix64's finaliser (a bijection on 64 bits) keeps
// the derived seeds independent of one another.

#include <cstdint>

namespace pagedllm {

inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The seed of sequence `index` of a request: sequence 0 uses the request's
// seed itself (so n=1 and the first of n agree), the others a mix of it, so
// forks sample independently yet reproducibly.
inline std::uint64_t sequence_seed(std::uint64_t seed, int index) {
  if (index == 0) return seed;
  return mix64(seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(index));
}

// The stream a sequence's draft tokens are drawn from: not the one its target
// tokens and the rejection sampler use, since a draft correlated with the
// accept test would bias verification.
inline std::uint64_t draft_seed(std::uint64_t sequence_seed) { return mix64(sequence_seed ^ 0xd1b54a32d192ed03ull); }

}  // namespace pagedllm
