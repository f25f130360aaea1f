#pragma once
// Lossless verification of drafts (Leviathan et al. 2023; Chen et al. 2023),
// as pllm_verify_args specifies: for row s with drafts d_1..d_n,
//   accept d_i when u_i * q_i(d_i) < p_i(d_i)   (probability min(1, p_i/q_i));
//   at the first rejection emit a token from normalize(max(0, p_i - q_i))
//   (from p_i itself when that residual has no mass, i.e. p_i <= q_i
//   everywhere) and stop; when all n are accepted emit a bonus from p_{n+1}.
// Greedy rows accept while d_i == argmax p_i (ties: the lowest id) and then
// emit the argmax of the first unmatched p_i, or of p_{n+1}.
//
// Stream convention: with seed = seeds[s] and o = random_offsets[s],
//   accept test of d_{i+1} (i = 0..n-1):  u = uniform01(mix64(seed ^ kAcceptStream), o + i)
//   the emitted token, after j accepted:  bits = random_bits(mix64(seed ^ kEmitStream), o + j)
// (counter_rng.hpp). Both streams are keyed by the output index, like the
// sampler's own stream, and are derived from the seed by a bijective hash of a
// tagged seed, so they are independent of the sampler's stream and of each
// other.
//
// The emitted token is an inverse-CDF draw over the ids in increasing order
// whose sums are integers, so no token depends on the order a GPU block adds
// in (plugins/spec_eagle's CUDA verify() gives the same tokens as this one):
// each weight w (the residual or p) is scaled by 2^shift, the power of two that
// puts the row's largest weight just under 2^(63 - ceil(log2 vocab)) (exact:
// only the exponent changes), and truncated to an integer; the total is their
// sum (below 2^63); the target is floor(u * total), u the top 53 bits of
// `bits` (computed exactly in integers); the token is the first id whose
// running sum exceeds the target. A weight below 2^-(62 - ceil(log2 vocab)) of
// the largest one counts as zero (2^-45 at a 128k vocabulary).
//
// Header-only and installed with the SDK: every speculator plugin that verifies
// (spec_eagle, the test fixture, examples/prompt_lookup_speculator) compiles its
// own copy, as plugins share no symbols at runtime. Not part of sdk.hpp:
//   #include <pagedllm/sdk/cpp/rejection_sampler.hpp>
//   void verify(const pllm_verify_args& a, pllm_verify_output& o) { pllm::verify_drafts(a, o); }
// The per-token arithmetic (namespace pllm::rejection) is __host__ __device__
// under nvcc, for a verify() that runs on the device.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/counter_rng.hpp"

namespace pllm {

inline constexpr std::uint64_t kAcceptStream = 0x5350454341434350ull;  // "SPECACCP"
inline constexpr std::uint64_t kEmitStream = 0x53504543454d4954ull;    // "SPECEMIT"

namespace rejection {

// Finite and non-negative (NaN fails).
PLLM_HOST_DEVICE inline bool valid_probability(float x) { return x >= 0.0f && x <= 0x1.fffffep127f; }

// Draft d, with target probability p and draft probability q, is accepted under u.
PLLM_HOST_DEVICE inline bool accepts(double u, float p, float q) { return u * double(q) < double(p); }

// max(0, p - q) of one token.
PLLM_HOST_DEVICE inline double residual(float p, float q) { return p > q ? double(p) - double(q) : 0.0; }

// The greedy order: a higher probability, then a lower id.
PLLM_HOST_DEVICE inline bool ranks_before(float a, std::int32_t a_id, float b, std::int32_t b_id) {
  return a > b || (a == b && a_id < b_id);
}

// The power of two by which a row's weights become integers: the largest one
// (max_weight > 0) lands in [2^(62 - b), 2^(63 - b)), b = ceil(log2 vocab),
// so a sum over the vocabulary stays below 2^63.
PLLM_HOST_DEVICE inline int fixed_shift(double max_weight, std::int64_t vocab) {
  int b = 0;
  while ((std::int64_t(1) << b) < vocab) ++b;
  return 62 - b - int(ilogb(max_weight));
}

PLLM_HOST_DEVICE inline std::uint64_t fixed_weight(double w, int shift) { return std::uint64_t(ldexp(w, shift)); }

// floor(u * total) for u = (bits >> 11) / 2^53, exactly (a 117-bit product in
// 32-bit limbs); below total.
PLLM_HOST_DEVICE inline std::uint64_t draw_target(std::uint64_t bits, std::uint64_t total) {
  const std::uint64_t u = bits >> 11;
  const std::uint64_t u_lo = u & 0xffffffffu, u_hi = u >> 32, t_lo = total & 0xffffffffu, t_hi = total >> 32;
  const std::uint64_t ll = u_lo * t_lo, lh = u_lo * t_hi, hl = u_hi * t_lo, hh = u_hi * t_hi;
  const std::uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  const std::uint64_t low = (ll & 0xffffffffu) | (mid << 32);
  const std::uint64_t high = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
  return (high << 11) | (low >> 53);
}

// Why a row could not be verified: both implementations report the first
// offending value they read in the same order (the accept tests in draft
// order, p(d) before q(d); then the row the emitted token is drawn from, ids
// in increasing order, p(id) before q(id)).
enum Status : std::int32_t {
  kOk = 0,
  kInvalidTarget = 1,  // target_probs[row, position, id] = value is negative or not finite
  kInvalidDraft = 2,   // draft_probs[row, position, id] = value likewise
  kNoMass = 3,         // target_probs[row, position] is all zero where a token must be drawn from it
};

struct RowFailure {
  std::int32_t status = kOk;
  std::int32_t position = 0;
  std::int32_t id = 0;
  float value = 0.0f;
};

inline std::string failure_message(const RowFailure& f, std::int64_t row) {
  const std::string at = "[" + std::to_string(row) + ", " + std::to_string(f.position);
  switch (f.status) {
    case kInvalidTarget:
    case kInvalidDraft:
      return std::string(f.status == kInvalidTarget ? "target_probs" : "draft_probs") + at + ", " +
             std::to_string(f.id) + "] = " + std::to_string(f.value) +
             " (probabilities must be finite and non-negative)";
    case kNoMass:
      return "target_probs" + at + "] has no mass: a token must be drawn from it";
    default:
      return "verify: row " + std::to_string(row) + " failed with unknown status " + std::to_string(f.status);
  }
}

}  // namespace rejection

namespace rejection_detail {

inline std::string str(int64_t v) { return std::to_string(v); }

// The host names the plugin and the call ("plugin 'X': verify failed ...").
[[noreturn]] inline void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, message);
}

// A [rows, k, vocab] f32 tensor with contiguous vocab rows.
struct Probs {
  const float* data;
  int64_t stride0, stride1;
  pllm_device device;
  const float* row(int64_t s, int64_t i) const { return data + s * stride0 + i * stride1; }
};

template <class AcceptsDevice>
inline Probs probs_of(const pllm_tensor& t, const char* name, int64_t rows, int64_t k, int64_t vocab,
                      AcceptsDevice&& accepts_device, const char* where) {
  const bool ok = t.dtype == PLLM_DTYPE_F32 && accepts_device(t.device) && t.ndim == 3 && t.shape[0] == rows &&
                  t.shape[1] == k && t.shape[2] == vocab && t.strides[2] == 1 && (t.data || rows * k * vocab == 0);
  if (!ok) {
    invalid(std::string(name) + " must be a " + where + " f32 [" + str(rows) + ", " + str(k) + ", " + str(vocab) +
            "] tensor with contiguous rows; got ndim " + str(t.ndim) + " shape [" + str(t.shape[0]) + ", " +
            str(t.shape[1]) + ", " + str(t.shape[2]) + "]");
  }
  return {static_cast<const float*>(t.data), t.strides[0], t.strides[1], t.device};
}

// The first invalid value of row p (then q, when given) in id order, or kOk.
inline rejection::RowFailure first_invalid(const float* p, const float* q, int64_t vocab, int32_t position) {
  for (int64_t id = 0; id < vocab; ++id) {
    if (!rejection::valid_probability(p[id])) return {rejection::kInvalidTarget, position, int32_t(id), p[id]};
    if (q && !rejection::valid_probability(q[id])) return {rejection::kInvalidDraft, position, int32_t(id), q[id]};
  }
  return {};
}

// The inverse-CDF draw of the header comment over weights w(id), or -1 when
// they have no mass.
template <class Weight>
inline int32_t draw(int64_t vocab, std::uint64_t bits, Weight&& w) {
  double max_weight = 0.0;
  for (int64_t id = 0; id < vocab; ++id) max_weight = w(id) > max_weight ? w(id) : max_weight;
  if (!(max_weight > 0.0)) return -1;
  const int shift = rejection::fixed_shift(max_weight, vocab);
  std::uint64_t total = 0;
  for (int64_t id = 0; id < vocab; ++id) total += rejection::fixed_weight(w(id), shift);
  const std::uint64_t target = rejection::draw_target(bits, total);
  std::uint64_t cumulative = 0;
  for (int64_t id = 0; id < vocab; ++id) {
    cumulative += rejection::fixed_weight(w(id), shift);
    if (cumulative > target) return int32_t(id);
  }
  return -1;  // unreachable: target < total
}

}  // namespace rejection_detail

// The arguments of a verify call once checked: shapes and where p and q lie.
struct VerifyShape {
  int64_t rows = 0, k = 0, vocab = 0;
  rejection_detail::Probs p{}, q{};
};

// Validates `args` and `out` (pllm::Error PLLM_ERROR_INVALID_ARGUMENT naming
// the field): p and q must be f32 on a device `accepts_device` takes (`where`
// names them in the message), both on the same one. Probabilities themselves
// are checked as they are read.
template <class AcceptsDevice>
inline VerifyShape check_verify_args(const pllm_verify_args& a, const pllm_verify_output& out,
                                     AcceptsDevice&& accepts_device, const char* where) {
  using namespace rejection_detail;
  if (!PLLM_HAS_FIELD(pllm_verify_args, &a, random_offsets)) {
    invalid("args struct_size " + str(a.struct_size) + " is too small");
  }
  if (!PLLM_HAS_FIELD(pllm_verify_output, &out, num_output_tokens)) {
    invalid("output struct_size " + str(out.struct_size) + " is too small");
  }
  if (a.num_seqs < 0) invalid("num_seqs = " + str(a.num_seqs) + " is negative");
  if (a.max_draft_tokens < 0) invalid("max_draft_tokens = " + str(a.max_draft_tokens) + " is negative");
  VerifyShape shape;
  shape.rows = a.num_seqs;
  shape.k = a.max_draft_tokens;
  if (shape.rows == 0) return shape;
  if (!a.num_drafts || !a.greedy || !a.seeds || !a.random_offsets || (shape.k > 0 && !a.draft_token_ids)) {
    invalid("null num_drafts, draft_token_ids, greedy, seeds or random_offsets");
  }
  if (!out.output_token_ids || !out.num_output_tokens) invalid("null output arrays");
  if (!a.target_probs || !a.draft_probs) invalid("null target_probs or draft_probs");
  if (a.target_probs->ndim != 3) invalid("target_probs must have 3 dimensions, got " + str(a.target_probs->ndim));
  shape.vocab = a.target_probs->shape[2];
  if (shape.vocab <= 0) invalid("target_probs has an empty vocabulary");
  if (shape.vocab > INT32_MAX) invalid("target_probs' vocabulary " + str(shape.vocab) + " exceeds int32 ids");
  shape.p = probs_of(*a.target_probs, "target_probs", shape.rows, shape.k + 1, shape.vocab, accepts_device, where);
  shape.q = probs_of(*a.draft_probs, "draft_probs", shape.rows, shape.k, shape.vocab, accepts_device, where);
  if (shape.p.device.type != shape.q.device.type || shape.p.device.index != shape.q.device.index) {
    invalid("target_probs and draft_probs must be on the same device");
  }
  for (int64_t s = 0; s < shape.rows; ++s) {
    const int32_t n = a.num_drafts[s];
    if (n < 0 || n > shape.k) {
      invalid("num_drafts[" + str(s) + "] = " + str(n) + " is outside [0, " + str(shape.k) + "]");
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t d = a.draft_token_ids[s * shape.k + i];
      if (d < 0 || d >= shape.vocab) {
        invalid("draft_token_ids[" + str(s) + " * " + str(shape.k) + " + " + str(i) + "] = " + str(d) +
                " is outside the vocabulary [0, " + str(shape.vocab) + ")");
      }
    }
  }
  return shape;
}

// Verifies one row whose p and q are host memory; returns why it could not.
inline rejection::RowFailure verify_row(const pllm_verify_args& a, const VerifyShape& shape, int64_t s,
                                        int32_t* tokens, int32_t& num_tokens) {
  using namespace rejection_detail;
  using rejection::RowFailure;
  const int64_t vocab = shape.vocab;
  const int32_t n = a.num_drafts[s];
  const int32_t* drafts = a.draft_token_ids + s * shape.k;
  int32_t accepted = 0;
  if (a.greedy[s]) {
    for (;;) {
      const float* p = shape.p.row(s, accepted);
      if (const RowFailure f = first_invalid(p, nullptr, vocab, accepted); f.status != rejection::kOk) return f;
      int32_t best = 0;
      for (int32_t id = 1; id < vocab; ++id) best = rejection::ranks_before(p[id], id, p[best], best) ? id : best;
      if (accepted < n && drafts[accepted] == best) {
        tokens[accepted++] = best;
        continue;
      }
      tokens[accepted] = best;
      num_tokens = accepted + 1;
      return {};
    }
  }
  const uint64_t accept_seed = mix64(a.seeds[s] ^ kAcceptStream);
  const uint64_t offset = a.random_offsets[s];
  bool rejected = false;
  for (; accepted < n; ++accepted) {
    const int32_t d = drafts[accepted];
    const float pd = shape.p.row(s, accepted)[d], qd = shape.q.row(s, accepted)[d];
    if (!rejection::valid_probability(pd)) return {rejection::kInvalidTarget, accepted, d, pd};
    if (!rejection::valid_probability(qd)) return {rejection::kInvalidDraft, accepted, d, qd};
    if (!rejection::accepts(uniform01(accept_seed, offset + uint64_t(accepted)), pd, qd)) {
      rejected = true;
      break;
    }
    tokens[accepted] = d;
  }
  const float* p = shape.p.row(s, accepted);
  const float* q = rejected ? shape.q.row(s, accepted) : nullptr;
  if (const RowFailure f = first_invalid(p, q, vocab, accepted); f.status != rejection::kOk) return f;
  const uint64_t bits = random_bits(mix64(a.seeds[s] ^ kEmitStream), offset + uint64_t(accepted));
  int32_t token = -1;
  if (rejected) token = draw(vocab, bits, [&](int64_t id) { return rejection::residual(p[id], q[id]); });
  if (token < 0) token = draw(vocab, bits, [&](int64_t id) { return double(p[id]); });
  if (token < 0) return {rejection::kNoMass, accepted, 0, 0.0f};
  tokens[accepted] = token;
  num_tokens = accepted + 1;
  return {};
}

// Every row of a checked call whose p and q are host memory (pllm::Error
// naming the first row that cannot be verified).
inline void verify_on_host(const pllm_verify_args& a, const VerifyShape& shape, pllm_verify_output& out) {
  for (int64_t s = 0; s < shape.rows; ++s) {
    const rejection::RowFailure f =
        verify_row(a, shape, s, out.output_token_ids + s * (shape.k + 1), out.num_output_tokens[s]);
    if (f.status != rejection::kOk) rejection_detail::invalid(rejection::failure_message(f, s));
  }
}

// Validates `args` (pllm::Error PLLM_ERROR_INVALID_ARGUMENT naming the field
// or the offending probability) and writes every row's output tokens. p and q
// must be host memory. On an error the outputs are undefined.
inline void verify_drafts(const pllm_verify_args& a, pllm_verify_output& out) {
  verify_on_host(a, check_verify_args(a, out, [](const pllm_device& d) { return d.type == PLLM_DEVICE_CPU; }, "CPU"),
                 out);
}

}  // namespace pllm
