#include "plugins/spec_eagle/rejection_sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "plugins/common/counter_rng.h"

namespace pagedllm::spec_eagle {
namespace {

using plugins::mix64;
using plugins::uniform01;

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: verify: " + message);
}

// A [rows, k, vocab] f32 CPU tensor with contiguous vocab rows.
struct Probs {
  const float* data;
  int64_t stride0, stride1;
  const float* row(int64_t s, int64_t i) const { return data + s * stride0 + i * stride1; }
};

Probs probs_of(const pllm_tensor& t, const char* name, int64_t rows, int64_t k, int64_t vocab) {
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

int32_t argmax(const float* p, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (p[i] > p[best]) best = i;  // strict: ties keep the lowest id
  }
  return int32_t(best);
}

// Inverse CDF over ids in increasing order of the weights w(id) (not
// necessarily normalised), accumulated in double; u in [0, 1).
template <class Weight>
int32_t sample_categorical(int64_t vocab, double u, Weight&& w, const char* what, int64_t s, int64_t i) {
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

double checked(float value, const char* what, int64_t s, int64_t i) {
  if (!(value >= 0.0f) || !std::isfinite(value)) {
    invalid(std::string(what) + " of row " + str(s) + ", position " + str(i) + " is " + std::to_string(value) +
            " (probabilities must be finite and non-negative)");
  }
  return double(value);
}

}  // namespace

void verify_drafts(const pllm_verify_args& a, pllm_verify_output& out) {
  if (a.struct_size < offsetof(pllm_verify_args, random_offsets) + sizeof(a.random_offsets)) {
    invalid("args struct_size " + str(a.struct_size) + " is too small");
  }
  if (out.struct_size < offsetof(pllm_verify_output, num_output_tokens) + sizeof(out.num_output_tokens)) {
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
  if (a.target_probs.ndim != 3) invalid("target_probs must have 3 dimensions, got " + str(a.target_probs.ndim));
  const int64_t vocab = a.target_probs.shape[2];
  if (vocab <= 0) invalid("target_probs has an empty vocabulary");
  const Probs p = probs_of(a.target_probs, "target_probs", rows, k + 1, vocab);
  const Probs q = probs_of(a.draft_probs, "draft_probs", rows, k, vocab);
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

}  // namespace pagedllm::spec_eagle
