#pragma once
// The per-token arithmetic of sampling, shared by the CPU sampler
// (row_sampler.cpp) and the CUDA one (sampler_kernels.cu) so that both compute
// the same values bit for bit. The algorithm is chosen so that no result
// depends on the order of a reduction:
//
// - the draw is the Gumbel-max trick: token = argmax over the kept tokens of
//   x_i / T + g_i, g_i = -log(-log(u_i)), u_i a pure function of (seed,
//   random_offset, i); ties -> lowest id. That is a draw from softmax(x / T)
//   restricted to the kept set, and an argmax is exact in any order;
// - top-p's cut compares masses summed in 32.32 fixed point (exp(x_i - x_max)
//   rounded to 2^-32), and integer sums are associative, so the smallest
//   prefix reaching top_p is the same whatever order a GPU block adds in;
// - nothing is contracted into an FMA (the .cu is compiled with --fmad=false).
//
// So greedy and seeded sampling give the same token on the CPU and on CUDA;
// what can differ in the last bits are the reported log-probabilities and
// probabilities(), whose normalising sums are doubles added in another order.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagedllm/sdk/sampler.h"

#ifdef __CUDACC__
#define PAGEDLLM_SAMPLER_HD __host__ __device__
#else
#define PAGEDLLM_SAMPLER_HD
#endif

namespace pagedllm::sampler {

inline constexpr float kGreedyTemperature = PLLM_GREEDY_TEMPERATURE;  // pagedllm/sdk/sampler.h

PAGEDLLM_SAMPLER_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The row's key: the random_offset-th output of the request's SplitMix64 stream
// (pagedllm/sdk/cpp/counter_rng.hpp's random_bits(seed, offset)).
PAGEDLLM_SAMPLER_HD inline uint64_t row_key(uint64_t seed, uint64_t offset) {
  return mix64(mix64(seed) + (offset + 1) * 0x9e3779b97f4a7c15ull);
}

// Token id's Gumbel noise under `key`: u in (0, 1) from 53 hashed bits.
PAGEDLLM_SAMPLER_HD inline double gumbel_noise(uint64_t key, int32_t id) {
  const uint64_t bits = mix64(key ^ (uint64_t(uint32_t(id)) + 1) * 0xd1b54a32d192ed03ull);
  const double u = (double(bits >> 11) + 0.5) * 0x1p-53;
  return -log(-log(u));
}

// A token's logit after its logit_bias, or -infinity when min_tokens bans it
// (logit_adjustments.h lists them).
PAGEDLLM_SAMPLER_HD inline float adjusted_logit(float l, float bias, bool banned) {
  return banned ? -INFINITY : l + bias;
}

// The logit after repetition, frequency and presence penalties; `count` is
// the token's occurrences among the output tokens, `in_history` whether it is
// among the prompt's or the output's.
PAGEDLLM_SAMPLER_HD inline float penalized(float l, float repetition, float frequency, float presence,
                                           int32_t count) {
  if (repetition != 1.0f) l = l > 0.0f ? l / repetition : l * repetition;
  if (count > 0) {
    const float penalty = frequency * float(count);
    l -= penalty + presence;
  }
  return l;
}

// A float's bits as an unsigned integer in the float's order (NaN excluded).
PAGEDLLM_SAMPLER_HD inline uint32_t ordered_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// exp(x - max) in [0, 1]: a token's unnormalised weight.
PAGEDLLM_SAMPLER_HD inline double weight(float x, float max) { return exp(double(x) - double(max)); }

// A weight in 32.32 fixed point: sums of up to 2^31 of them fit in 63 bits.
PAGEDLLM_SAMPLER_HD inline uint64_t fixed_mass(double w) { return uint64_t(w * 0x1p32 + 0.5); }

// The mass the kept prefix must reach: ceil(top_p * total), at least 1.
PAGEDLLM_SAMPLER_HD inline uint64_t top_p_target(float top_p, uint64_t total) {
  const uint64_t target = uint64_t(ceil(double(top_p) * double(total)));
  return target > 0 ? target : 1;
}

// A token passes min-p when its weight is positive and at least min_p.
PAGEDLLM_SAMPLER_HD inline bool passes_min_p(double w, float min_p) { return w > 0.0 && w >= double(min_p); }

// (value desc, id asc): the order every filter keeps a prefix of.
PAGEDLLM_SAMPLER_HD inline bool ranks_before(float a, int32_t a_id, float b, int32_t b_id) {
  return a > b || (a == b && a_id < b_id);
}

}  // namespace pagedllm::sampler
