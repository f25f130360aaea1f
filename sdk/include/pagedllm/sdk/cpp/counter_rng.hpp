#pragma once
// Counter-based randomness: the uniform number for a request's token is a pure
// function of (seed, offset), where offset is the index of the token being
// sampled (pllm_sample_row::random_offset). No generator state lives between
// calls, so a request samples the same tokens whatever else shares its batch,
// in whatever order rows arrive, on any thread, and runs reproduce exactly.
//
// Construction: the offset-th output of a SplitMix64 stream (Steele, Lea &
// Flood 2014; Java's SplittableRandom) whose starting state is mix64(seed):
//   bits(seed, offset) = mix64(mix64(seed) + (offset + 1) * golden_gamma)
// mix64 is SplitMix64's finaliser (a bijection on 64 bits), so every (seed,
// offset) is one Weyl-sequence step hashed; SplitMix64 passes BigCrush. The
// top 53 bits become a double in [0, 1).
//
// The in-tree sampler keys the Gumbel noise of token `offset` of a request on
// random_bits(seed, offset) (plugins/sampler/README.md), the rejection sampler
// draws uniform01 from streams derived from the seed (rejection_sampler.hpp); a
// plugin that wants the same streams (a sampler meant to reproduce the in-tree
// one, a speculator deriving its own) includes this header. The functions are
// __host__ __device__ under nvcc, so a CUDA kernel draws the same numbers.

#include <cstdint>

#ifdef __CUDACC__
#define PLLM_HOST_DEVICE __host__ __device__
#else
#define PLLM_HOST_DEVICE
#endif

namespace pllm {

PLLM_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

PLLM_HOST_DEVICE inline std::uint64_t random_bits(std::uint64_t seed, std::uint64_t offset) {
  constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;
  return mix64(mix64(seed) + (offset + 1) * kGoldenGamma);
}

// Uniform in [0, 1), 53 bits of resolution.
PLLM_HOST_DEVICE inline double uniform01(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<double>(random_bits(seed, offset) >> 11) * 0x1p-53;
}

}  // namespace pllm
