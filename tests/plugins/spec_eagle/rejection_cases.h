#pragma once
// The rejection sampler's statistical cases, shared by the host's tests
// (rejection_sampler_test.cpp, whose header comment states the method and its
// error rates) and the device's (cuda_verify_test.cpp): synthetic p_1..p_{K+1}
// and q_1..q_K over a vocabulary of 7 in five families, rows with drafts drawn
// from q, and Pearson's chi-square of output tokens against p.

#include <boost/math/distributions/chi_squared.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/plugins/spec_eagle/eagle_harness.h"

namespace eagle_test {

inline constexpr int64_t kVocab = 7;
inline constexpr int64_t kTrials = 200'000;
inline constexpr double kAlpha = 1e-6;

using Dist = std::vector<double>;

inline Dist normalized(Dist d) {
  double total = 0;
  for (double x : d) total += x;
  for (double& x : d) x /= total;
  return d;
}

inline Dist random_dist(std::mt19937_64& rng, const std::vector<int64_t>& zeros = {}) {
  std::uniform_real_distribution<double> u(0.05, 1.0);
  Dist d(kVocab);
  for (double& x : d) x = u(rng);
  for (int64_t z : zeros) d[std::size_t(z)] = 0.0;
  return normalized(d);
}

// p_1..p_{K+1} and q_1..q_K of one case.
struct Case {
  std::string name;
  std::vector<Dist> p, q;
};

inline Case make_case(int family, int64_t k) {
  std::mt19937_64 rng(1000 * uint64_t(family) + uint64_t(k));
  Case c;
  for (int64_t i = 0; i <= k; ++i) {
    switch (family) {
      case 0:
        c.name = "dense p and q";
        c.p.push_back(random_dist(rng));
        if (i < k) c.q.push_back(random_dist(rng));
        break;
      case 1:
        c.name = "q = 0 where p > 0";
        c.p.push_back(random_dist(rng));
        if (i < k) c.q.push_back(random_dist(rng, {0, 3}));
        break;
      case 2:
        c.name = "p = 0 where q > 0 (truncated target)";
        c.p.push_back(random_dist(rng, {1, 4, 5}));
        if (i < k) c.q.push_back(random_dist(rng));
        break;
      case 3:
        c.name = "p == q";
        c.p.push_back(random_dist(rng));
        if (i < k) c.q.push_back(c.p.back());
        break;
      default: {
        c.name = "one-hot p";
        Dist hot(kVocab, 0.0);
        hot[std::size_t((i + 2) % kVocab)] = 1.0;
        c.p.push_back(hot);
        if (i < k) c.q.push_back(random_dist(rng));
      }
    }
  }
  return c;
}

// The arrays of one verify call; every row holds the same case.
struct Rows : VerifyArrays {
  int64_t n = 0;
  std::vector<int32_t> out_tokens, out_counts;
  mutable pllm_tensor q_tensor{}, p_tensor{};  // what args() points at

  Rows(int64_t rows, int64_t max_drafts, int64_t vocab) : n(rows) {
    k = max_drafts;
    num_drafts.assign(std::size_t(n), int32_t(k));
    drafts.assign(std::size_t(n * k), 0);
    q.assign(std::size_t(n * k * vocab), 0.0f);
    p.assign(std::size_t(n * (k + 1) * vocab), 0.0f);
    greedy.assign(std::size_t(n), 0);
    seeds.assign(std::size_t(n), 0);
    offsets.assign(std::size_t(n), 0);
    out_tokens.assign(std::size_t(n * (k + 1)), -1);
    out_counts.assign(std::size_t(n), 0);
  }
  // With p and q in host memory, or at p_data and q_data on `device`.
  pllm_verify_args args(int64_t vocab, const float* p_data = nullptr, const float* q_data = nullptr,
                        pllm_device device = {PLLM_DEVICE_CPU, 0}) const {
    return verify_args(n, vocab, p_data ? p_data : p.data(), q_data ? q_data : q.data(), device, p_tensor, q_tensor);
  }
  pllm_verify_output output() {
    pllm_verify_output o{};
    o.struct_size = sizeof o;
    o.output_token_ids = out_tokens.data();
    o.num_output_tokens = out_counts.data();
    return o;
  }
  int32_t token(int64_t s, int64_t j) const { return out_tokens[std::size_t(s * (k + 1) + j)]; }
  int32_t count(int64_t s) const { return out_counts[std::size_t(s)]; }
};

// `trials` rows of case `c`, drafts d_i ~ q_i drawn here, one seed, and
// offsets K + 1 apart (a request's output indices never overlap).
inline Rows sample_rows(const Case& c, int64_t trials, uint64_t draft_seed) {
  const int64_t k = int64_t(c.q.size());
  Rows r(trials, k, kVocab);
  std::mt19937_64 rng(draft_seed);
  std::vector<std::discrete_distribution<int32_t>> draw;
  for (const Dist& q : c.q) draw.emplace_back(q.begin(), q.end());
  for (int64_t s = 0; s < trials; ++s) {
    for (int64_t i = 0; i <= k; ++i) {
      for (int64_t x = 0; x < kVocab; ++x) {
        r.p[std::size_t((s * (k + 1) + i) * kVocab + x)] = float(c.p[std::size_t(i)][std::size_t(x)]);
        if (i < k) r.q[std::size_t((s * k + i) * kVocab + x)] = float(c.q[std::size_t(i)][std::size_t(x)]);
      }
      if (i < k) r.drafts[std::size_t(s * k + i)] = draw[std::size_t(i)](rng);
    }
    r.seeds[std::size_t(s)] = 0x5eed;
    r.offsets[std::size_t(s)] = 7 + uint64_t(s) * uint64_t(k + 1);
  }
  return r;
}

// Pearson's statistic of `counts` against `p` over p's support, its degrees
// of freedom, and whether any count falls outside the support.
struct ChiSquare {
  double statistic = 0;
  int df = 0;
  int64_t outside_support = 0;
  int64_t total = 0;
  double critical() const {
    return df == 0 ? 0.0 : boost::math::quantile(boost::math::chi_squared(df), 1.0 - kAlpha);
  }
  bool passes() const { return outside_support == 0 && (df == 0 || statistic <= critical()); }
};

inline ChiSquare chi_square(const std::vector<int64_t>& counts, const Dist& p) {
  ChiSquare c;
  for (int64_t x : counts) c.total += x;
  int support = 0;
  for (std::size_t x = 0; x < p.size(); ++x) {
    if (p[x] <= 0) {
      c.outside_support += counts[x];
      continue;
    }
    ++support;
    const double expected = double(c.total) * p[x];
    c.statistic += (double(counts[x]) - expected) * (double(counts[x]) - expected) / expected;
  }
  c.df = support - 1;
  return c;
}

}  // namespace eagle_test
