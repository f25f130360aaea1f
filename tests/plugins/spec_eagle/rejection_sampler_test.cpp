// spec_eagle's verify(): the rejection sampler through the real plugin .so.
//
// Statistics. For synthetic target distributions p_1..p_{K+1} and draft
// distributions q_1..q_K over a vocabulary of 7 (K = 1..4; five families:
// dense, q = 0 where p > 0, p = 0 where q > 0 as top-k/top-p leave it,
// p == q, one-hot p), the test draws d_i ~ q_i itself and verifies N = 200,000
// rows in one call. Lossless means: the first output token is distributed as
// p_1, and the second one, over the rows that emitted >= 2 tokens (d_1
// accepted), as p_2. Each is a Pearson chi-square goodness-of-fit test over
// the support of p (a token outside it must never appear: checked exactly) at
// significance alpha = 1e-6. There are at most 5 x 4 x 2 = 40 such tests, so
// by Bonferroni the chance that a correct sampler fails any of them is below
// 4e-5 -- and the seeds are fixed, so the test is deterministic anyway. The
// number of rows with >= 2 tokens is also checked against its binomial
// expectation N * sum_x min(p_1(x), q_1(x)) (|z| < 5.5, alpha ~ 4e-8).
//
// Teeth: the same statistic computed on a local, deliberately wrong sampler
// (residual = p instead of max(0, p - q)) must exceed the critical value on
// the dense family.

#include <catch2/catch.hpp>

#include <boost/math/distributions/chi_squared.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "pagedllm/sdk/cpp/counter_rng.hpp"
#include "tests/plugins/spec_eagle/eagle_harness.h"
#include "tests/plugins/spec_eagle/rejection_cases.h"

using namespace eagle_test;
using Catch::Matchers::Contains;

namespace {

Speculator& speculator() {
  static Model target(kTargetDir, R"({"num_threads": 1})");
  static Speculator spec(kDraftDir, target);
  return spec;
}

// A deliberately wrong verifier: on rejection it resamples from p instead of
// max(0, p - q). Same streams as the plugin's.
std::vector<int32_t> wrong_first_tokens(const Case& c, const Rows& r) {
  using pllm::mix64;
  using pllm::uniform01;
  std::vector<int32_t> first(std::size_t(r.n));
  for (int64_t s = 0; s < r.n; ++s) {
    const uint64_t accept = mix64(r.seeds[std::size_t(s)] ^ 0x5350454341434350ull);
    const uint64_t emit = mix64(r.seeds[std::size_t(s)] ^ 0x53504543454d4954ull);
    const int32_t d = r.drafts[std::size_t(s * r.k)];
    const uint64_t o = r.offsets[std::size_t(s)];
    if (uniform01(accept, o) * c.q[0][std::size_t(d)] < c.p[0][std::size_t(d)]) {
      first[std::size_t(s)] = d;
      continue;
    }
    const double target = uniform01(emit, o);
    double cumulative = 0;
    int32_t chosen = int32_t(kVocab - 1);
    for (int64_t x = 0; x < kVocab; ++x) {
      cumulative += c.p[0][std::size_t(x)];
      if (target < cumulative) {
        chosen = int32_t(x);
        break;
      }
    }
    first[std::size_t(s)] = chosen;
  }
  return first;
}

}  // namespace

TEST_CASE("spec_eagle: verify's output distribution equals the target's (chi-square)", "[spec_eagle][verify]") {
  Speculator& spec = speculator();
  int tests = 0;
  for (int family = 0; family < 5; ++family) {
    for (int64_t k = 1; k <= 4; ++k) {
      const Case c = make_case(family, k);
      INFO(c.name << ", K = " << k);
      Rows r = sample_rows(c, kTrials, 77 + uint64_t(family) * 10 + uint64_t(k));
      const pllm_verify_args args = r.args(kVocab);
      pllm_verify_output out = r.output();
      spec.verify(args, out);

      std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
      int64_t two_or_more = 0;
      for (int64_t s = 0; s < r.n; ++s) {
        REQUIRE(r.count(s) >= 1);
        REQUIRE(r.count(s) <= k + 1);
        for (int64_t j = 0; j + 1 < r.count(s); ++j) REQUIRE(r.token(s, j) == r.drafts[std::size_t(s * k + j)]);
        ++first[std::size_t(r.token(s, 0))];
        if (r.count(s) >= 2) {
          ++two_or_more;
          ++second[std::size_t(r.token(s, 1))];
        }
      }
      const ChiSquare c1 = chi_square(first, c.p[0]);
      const ChiSquare c2 = chi_square(second, c.p[1]);
      tests += (c1.df > 0) + (c2.df > 0);
      std::printf("%-38s K=%lld  token 1: chi2 %8.2f df %d (critical %.2f)  token 2: chi2 %8.2f df %d over %lld rows\n",
                  c.name.c_str(), static_cast<long long>(k), c1.statistic, c1.df, c1.critical(), c2.statistic,
                  c2.df, static_cast<long long>(c2.total));
      CHECK(c1.outside_support == 0);
      CHECK(c2.outside_support == 0);
      CHECK(c1.passes());
      CHECK(c2.passes());

      double accept = 0;
      for (int64_t x = 0; x < kVocab; ++x) accept += std::min(c.p[0][std::size_t(x)], c.q[0][std::size_t(x)]);
      const double mean = double(kTrials) * accept, sd = std::sqrt(double(kTrials) * accept * (1 - accept));
      if (sd > 0) {
        CHECK(std::abs(double(two_or_more) - mean) < 5.5 * sd);
      } else {
        CHECK(double(two_or_more) == mean);
      }
    }
  }
  CHECK(tests <= 40);  // the Bonferroni bound in the header comment
}

TEST_CASE("spec_eagle: the chi-square test rejects a sampler that resamples from p", "[spec_eagle][verify]") {
  const Case c = make_case(0, 1);
  const Rows r = sample_rows(c, kTrials, 5);
  std::vector<int64_t> counts(kVocab, 0);
  for (int32_t t : wrong_first_tokens(c, r)) ++counts[std::size_t(t)];
  const ChiSquare wrong = chi_square(counts, c.p[0]);
  std::printf("wrong sampler (residual = p): chi2 %.1f, df %d, critical %.2f\n", wrong.statistic, wrong.df,
              wrong.critical());
  CHECK_FALSE(wrong.passes());
}

TEST_CASE("spec_eagle: greedy rows accept while the draft is the argmax", "[spec_eagle][verify]") {
  Speculator& spec = speculator();
  constexpr int64_t vocab = 5, k = 3;
  // p rows: argmax 2 (tied with 4: the lowest id wins), 1, 3, 0.
  const std::vector<std::vector<float>> p = {
      {0.1f, 0.1f, 0.3f, 0.2f, 0.3f}, {0.0f, 0.9f, 0.1f, 0.0f, 0.0f},
      {0.2f, 0.2f, 0.0f, 0.4f, 0.2f}, {0.6f, 0.1f, 0.1f, 0.1f, 0.1f}};
  struct Row {
    int32_t n;
    std::vector<int32_t> drafts;
    std::vector<int32_t> expected;
  };
  const std::vector<Row> rows = {
      {3, {2, 1, 3}, {2, 1, 3, 0}},  // all accepted, bonus argmax p_4
      {3, {0, 1, 3}, {2}},           // first rejected
      {3, {4, 1, 3}, {2}},           // 4 ties with 2 for the max; the argmax is 2
      {3, {2, 1, 0}, {2, 1, 3}},     // third rejected
      {0, {0, 0, 0}, {2}},           // no drafts: argmax p_1
      {2, {2, 1, 0}, {2, 1, 3}},     // two drafts, both accepted, bonus argmax p_3
  };
  Rows r(int64_t(rows.size()), k, vocab);
  for (std::size_t s = 0; s < rows.size(); ++s) {
    r.num_drafts[s] = rows[s].n;
    r.greedy[s] = 1;
    for (int64_t i = 0; i < k; ++i) r.drafts[s * k + std::size_t(i)] = rows[s].drafts[std::size_t(i)];
    for (int64_t i = 0; i <= k; ++i) {
      const auto first = std::ptrdiff_t((s * (k + 1) + std::size_t(i)) * vocab);
      std::copy(p[std::size_t(i)].begin(), p[std::size_t(i)].end(), r.p.begin() + first);
    }
    // q is ignored by the greedy path, even where it makes a draft impossible.
  }
  pllm_verify_output out = r.output();
  spec.verify(r.args(vocab), out);
  for (std::size_t s = 0; s < rows.size(); ++s) {
    INFO("row " << s);
    REQUIRE(r.count(int64_t(s)) == int32_t(rows[s].expected.size()));
    for (std::size_t j = 0; j < rows[s].expected.size(); ++j) {
      CHECK(r.token(int64_t(s), int64_t(j)) == rows[s].expected[j]);
    }
  }
}

TEST_CASE("spec_eagle: verify reproduces for the same seeds and offsets, whatever the batch", "[spec_eagle][verify]") {
  Speculator& spec = speculator();
  const Case c = make_case(0, 4);
  Rows a = sample_rows(c, 2000, 9);
  for (int64_t s = 0; s < a.n; ++s) a.seeds[std::size_t(s)] = 1000 + uint64_t(s % 13);
  Rows b = a;
  pllm_verify_output out_a = a.output(), out_b = b.output();
  spec.verify(a.args(kVocab), out_a);
  spec.verify(b.args(kVocab), out_b);
  CHECK(a.out_counts == b.out_counts);
  CHECK(a.out_tokens == b.out_tokens);

  SECTION("a row alone gives what it gave inside the batch") {
    for (int64_t s : {int64_t(0), int64_t(517), a.n - 1}) {
      Rows one(1, a.k, kVocab);
      one.drafts.assign(a.drafts.begin() + s * a.k, a.drafts.begin() + (s + 1) * a.k);
      one.q.assign(a.q.begin() + s * a.k * kVocab, a.q.begin() + (s + 1) * a.k * kVocab);
      one.p.assign(a.p.begin() + s * (a.k + 1) * kVocab, a.p.begin() + (s + 1) * (a.k + 1) * kVocab);
      one.seeds[0] = a.seeds[std::size_t(s)];
      one.offsets[0] = a.offsets[std::size_t(s)];
      pllm_verify_output o = one.output();
      spec.verify(one.args(kVocab), o);
      REQUIRE(one.count(0) == a.count(s));
      for (int64_t j = 0; j < one.count(0); ++j) CHECK(one.token(0, j) == a.token(s, j));
    }
  }
  SECTION("other offsets give other outputs") {
    for (uint64_t& o : b.offsets) o += 1;
    pllm_verify_output o = b.output();
    spec.verify(b.args(kVocab), o);
    int64_t differing = 0;
    for (int64_t s = 0; s < a.n; ++s) {
      bool same = a.count(s) == b.count(s);
      for (int64_t j = 0; same && j < a.count(s); ++j) same = a.token(s, j) == b.token(s, j);
      differing += !same;
    }
    CHECK(differing > a.n / 4);
  }
}

TEST_CASE("spec_eagle: verify refuses malformed arguments", "[spec_eagle][verify]") {
  Speculator& spec = speculator();
  const Case c = make_case(0, 2);
  Rows r = sample_rows(c, 3, 1);
  auto error_of = [&](const pllm_verify_args& args) {
    pllm_verify_output out = r.output();
    try {
      spec.verify(args, out);
    } catch (const pagedllm::PluginCallError& e) {
      return std::string(e.what());
    }
    FAIL("verify accepted the arguments");
    return std::string();
  };
  SECTION("num_drafts above K") {
    r.num_drafts[1] = 3;
    CHECK_THAT(error_of(r.args(kVocab)), Contains("num_drafts[1] = 3 is outside [0, 2]"));
  }
  SECTION("a draft id outside the vocabulary") {
    r.drafts[2 * 2 + 1] = int32_t(kVocab);
    CHECK_THAT(error_of(r.args(kVocab)), Contains("draft_token_ids[2 * 2 + 1] = 7 is outside the vocabulary [0, 7)"));
  }
  SECTION("target_probs without the bonus row") {
    pllm_verify_args args = r.args(kVocab);
    r.p_tensor.shape[1] = 2;
    CHECK_THAT(error_of(args), Contains("target_probs must be a CPU f32 [3, 3, 7] tensor"));
  }
  SECTION("draft_probs of another vocabulary") {
    pllm_verify_args args = r.args(kVocab);
    r.q_tensor.shape[2] = 6;
    CHECK_THAT(error_of(args), Contains("draft_probs must be a CPU f32 [3, 2, 7] tensor"));
  }
  SECTION("a negative probability") {
    std::fill(r.p.begin(), r.p.begin() + kVocab, -0.5f);
    CHECK_THAT(error_of(r.args(kVocab)), Contains("must be finite and non-negative"));
  }
  SECTION("no draft_probs") {
    pllm_verify_args args = r.args(kVocab);
    args.draft_probs = nullptr;
    CHECK_THAT(error_of(args), Contains("null target_probs or draft_probs"));
  }
}
