#pragma once
// Lossless verification of drafts (Leviathan et al. 2023; Chen et al. 2023),
// as pllm_verify_args specifies: for row s with drafts d_1..d_n,
//   accept d_i when u_i * q_i(d_i) < p_i(d_i)   (probability min(1, p_i/q_i));
//   at the first rejection emit a token from normalize(max(0, p_i - q_i))
//   (from p_i itself when that residual has no mass, i.e. p_i == q_i
//   numerically) and stop; when all n are accepted emit a bonus from p_{n+1}.
// Greedy rows accept while d_i == argmax p_i (ties: the lowest id) and then
// emit the argmax of the first unmatched p_i, or of p_{n+1}.
//
// Stream convention: with seed = seeds[s] and o = random_offsets[s],
//   accept test of d_{i+1} (i = 0..n-1):  uniform01(mix64(seed ^ kAcceptStream), o + i)
//   the emitted token, after j accepted:  uniform01(mix64(seed ^ kEmitStream), o + j)
// (plugins/common/counter_rng.h). Both streams are keyed by the output index,
// like the sampler's own uniform01(seed, o), and are derived from the seed by
// a bijective hash of a tagged seed, so they are independent of the sampler's
// stream and of each other. Categorical draws are inverse CDFs over the ids in
// increasing order, accumulated in double.

#include <cstdint>

#include "pagedllm/sdk.h"

namespace pagedllm::spec_eagle {

inline constexpr std::uint64_t kAcceptStream = 0x5350454341434350ull;  // "SPECACCP"
inline constexpr std::uint64_t kEmitStream = 0x53504543454d4954ull;    // "SPECEMIT"

// Validates `args` (pllm::Error PLLM_ERROR_INVALID_ARGUMENT naming the field)
// and writes every row's output tokens. On an error the outputs are undefined.
void verify_drafts(const pllm_verify_args& args, pllm_verify_output& out);

}  // namespace pagedllm::spec_eagle
