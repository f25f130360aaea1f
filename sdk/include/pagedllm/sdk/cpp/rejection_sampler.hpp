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
// (counter_rng.hpp). Both streams are keyed by the output index, like the
// sampler's own uniform01(seed, o), and are derived from the seed by a
// bijective hash of a tagged seed, so they are independent of the sampler's
// stream and of each other. Categorical draws are inverse CDFs over the ids in
// increasing order, accumulated in double.
//
// Header-only and installed with the SDK: every speculator plugin that verifies
// (spec_eagle, the test fixture, examples/prompt_lookup_speculator) compiles its
// own copy, as plugins share no symbols at runtime. Not part of sdk.hpp:
//   #include <pagedllm/sdk/cpp/rejection_sampler.hpp>
//   void verify(const pllm_verify_args& a, pllm_verify_output& o) { pllm::verify_drafts(a, o); }

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/counter_rng.hpp"

namespace pllm {

inline constexpr std::uint64_t kAcceptStream = 0x5350454341434350ull;  // "SPECACCP"
inline constexpr std::uint64_t kEmitStream = 0x53504543454d4954ull;    // "SPECEMIT"

namespace rejection_detail {

inline std::string str(int64_t v) { return std::to_string(v); }

// The host names the plugin and the call ("plugin 'X': verify failed ...").
[[noreturn]] inline void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, message);
}

// A [rows, k, vocab] f32 CPU tensor with contiguous vocab rows.
struct Probs {
  const float* data;
  int64_t stride0, stride1;
  const float* row(int64_t s, int64_t i) const { return data + s * stride0 + i * stride1; }
};

inline Probs probs_of(const pllm_tensor& t, const char* name, int64_t rows, int64_t k, int64_t vocab) {
  const bool ok = t.dtype == PLLM_DTYPE_F32 && t.device.type == PLLM_DEVICE_CPU && t.ndim == 3 &&
                  t.shape[0] == rows && t.shape[1] == k && t.shape[2] == vocab && t.strides[2] == 1 &&
                  (t.data || rows * k * vocab == 0);
  if (!ok) {
    invalid(std::string(name) + " must be a CPU f32 [" + str(rows) + ", " + str(k) + ", " + str(vocab) +
            "] tensor with contiguous rows; got ndim " + str(t.ndim) + " shape [" + str(t.shape[0]) + ", " +
            str(t.shape[1]) + ", " + str(t.shape[2]) + "]");
  }
  return {static_cast<const float*>(t.data), t.strides[0], t.strides[1]};
}

inline int32_t argmax(const float* p, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (p[i] > p[best]) best = i;  // strict: ties keep the lowest id
  }
  return int32_t(best);
}

// Inverse CDF over ids in increasing order of the weights w(id) (not
// necessarily normalised), accumulated in double; u in [0, 1).
template <class Weight>
inline int32_t sample_categorical(int64_t vocab, double u, Weight&& w, const char* what, int64_t s, int64_t i) {
  double total = 0.0;
  for (int64_t id = 0; id < vocab; ++id) {
    const double x = w(id);
    if (!(x >= 0.0) || !std::isfinite(x)) {
      invalid(std::string(what) + " of row " + str(s) + ", position " + str(i) + " holds " + std::to_string(x) +
              " at id " + str(id) + " (probabilities must be finite and non-negative)");
    }
    total += x;
  }
  if (!(total > 0.0)) invalid(std::string(what) + " of row " + str(s) + ", position " + str(i) + " has no mass");
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_positive = 0;
  for (int64_t id = 0; id < vocab; ++id) {
    const double x = w(id);
    if (x <= 0.0) continue;
    cumulative += x;
    last_positive = int32_t(id);
    if (target < cumulative) return int32_t(id);
  }
  return last_positive;  // rounding left target at the very top
}

inline double checked(float value, const char* what, int64_t s, int64_t i) {
  if (!(value >= 0.0f) || !std::isfinite(value)) {
    invalid(std::string(what) + " of row " + str(s) + ", position " + str(i) + " is " + std::to_string(value) +
            " (probabilities must be finite and non-negative)");
  }
  return double(value);
}

}  // namespace rejection_detail

// Validates `args` (pllm::Error PLLM_ERROR_INVALID_ARGUMENT naming the field)
// and writes every row's output tokens. On an error the outputs are undefined.
inline void verify_drafts(const pllm_verify_args& a, pllm_verify_output& out) {
  using namespace rejection_detail;
  if (!PLLM_HAS_FIELD(pllm_verify_args, &a, random_offsets)) {
    invalid("args struct_size " + str(a.struct_size) + " is too small");
  }
  if (!PLLM_HAS_FIELD(pllm_verify_output, &out, num_output_tokens)) {
    invalid("output struct_size " + str(out.struct_size) + " is too small");
  }
  if (a.num_seqs < 0) invalid("num_seqs = " + str(a.num_seqs) + " is negative");
  if (a.max_draft_tokens < 0) invalid("max_draft_tokens = " + str(a.max_draft_tokens) + " is negative");
  const int64_t rows = a.num_seqs, k = a.max_draft_tokens;
  if (rows == 0) return;
  if (!a.num_drafts || !a.greedy || !a.seeds || !a.random_offsets || (k > 0 && !a.draft_token_ids)) {
    invalid("null num_drafts, draft_token_ids, greedy, seeds or random_offsets");
  }
  if (!out.output_token_ids || !out.num_output_tokens) invalid("null output arrays");
  if (!a.target_probs || !a.draft_probs) invalid("null target_probs or draft_probs");
  if (a.target_probs->ndim != 3) invalid("target_probs must have 3 dimensions, got " + str(a.target_probs->ndim));
  const int64_t vocab = a.target_probs->shape[2];
  if (vocab <= 0) invalid("target_probs has an empty vocabulary");
  const Probs p = probs_of(*a.target_probs, "target_probs", rows, k + 1, vocab);
  const Probs q = probs_of(*a.draft_probs, "draft_probs", rows, k, vocab);
  for (int64_t s = 0; s < rows; ++s) {
    const int32_t n = a.num_drafts[s];
    if (n < 0 || n > k) invalid("num_drafts[" + str(s) + "] = " + str(n) + " is outside [0, " + str(k) + "]");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t d = a.draft_token_ids[s * k + i];
      if (d < 0 || d >= vocab) {
        invalid("draft_token_ids[" + str(s) + " * " + str(k) + " + " + str(i) + "] = " + str(d) +
                " is outside the vocabulary [0, " + str(vocab) + ")");
      }
    }
  }

  for (int64_t s = 0; s < rows; ++s) {
    const int32_t n = a.num_drafts[s];
    const int32_t* drafts = a.draft_token_ids + s * k;
    int32_t* tokens = out.output_token_ids + s * (k + 1);
    int32_t accepted = 0;
    if (a.greedy[s]) {
      while (accepted < n && drafts[accepted] == argmax(p.row(s, accepted), vocab)) {
        tokens[accepted] = drafts[accepted];
        ++accepted;
      }
      tokens[accepted] = argmax(p.row(s, accepted), vocab);
      out.num_output_tokens[s] = accepted + 1;
      continue;
    }
    const uint64_t accept_seed = mix64(a.seeds[s] ^ kAcceptStream);
    const uint64_t emit_seed = mix64(a.seeds[s] ^ kEmitStream);
    const uint64_t offset = a.random_offsets[s];
    bool rejected = false;
    while (accepted < n) {
      const int32_t d = drafts[accepted];
      const double pd = checked(p.row(s, accepted)[d], "target_probs(d)", s, accepted);
      const double qd = checked(q.row(s, accepted)[d], "draft_probs(d)", s, accepted);
      if (!(uniform01(accept_seed, offset + uint64_t(accepted)) * qd < pd)) {
        rejected = true;
        break;
      }
      tokens[accepted] = d;
      ++accepted;
    }
    const double u = uniform01(emit_seed, offset + uint64_t(accepted));
    const float* pi = p.row(s, accepted);
    if (rejected) {
      const float* qi = q.row(s, accepted);
      double residual_mass = 0.0;
      for (int64_t id = 0; id < vocab; ++id) {
        const double pv = checked(pi[id], "target_probs", s, accepted);
        const double qv = checked(qi[id], "draft_probs", s, accepted);
        residual_mass += std::max(0.0, pv - qv);
      }
      if (residual_mass > 0.0) {
        tokens[accepted] = sample_categorical(
            vocab, u, [&](int64_t id) { return std::max(0.0, double(pi[id]) - double(qi[id])); },
            "the residual max(0, p - q)", s, accepted);
      } else {
        tokens[accepted] = sample_categorical(vocab, u, [&](int64_t id) { return double(pi[id]); }, "target_probs",
                                              s, accepted);
      }
    } else {
      tokens[accepted] = sample_categorical(vocab, u, [&](int64_t id) { return double(pi[id]); }, "target_probs", s,
                                            accepted);
    }
    out.num_output_tokens[s] = accepted + 1;
  }
}

}  // namespace pllm
