#pragma once
// Catch2 helpers of the models_llama tests on top of paged_runner.h: skipping
// without Python, and tolerance checks against the oracle.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/paged_runner.h"

namespace llama_test {

// Fails the test case unless the project's Python can run the transformers oracle.
inline void require_oracle() { pagedllm::testing::require_python_modules("torch, transformers, numpy"); }

// Fails the test case unless the project's Python can run the tiny-Llama generator.
inline void require_generator() { pagedllm::testing::require_python_modules("numpy"); }

// ---- Comparison ------------------------------------------------------------------

struct Tolerance {
  double atol;
  double rtol;
};

// The worst |got - ref| / (atol + rtol |ref|) over a row (> 1: out of
// tolerance; NaN in `got` counts as infinitely bad), and the worst |got - ref|.
struct Mismatch {
  double worst_ratio = 0.0;
  double worst_abs = 0.0;
  void add(const std::vector<float>& got, const std::vector<double>& ref, Tolerance tol) {
    REQUIRE(got.size() == ref.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double err = std::isfinite(got[i]) ? std::abs(double(got[i]) - ref[i]) : std::numeric_limits<double>::infinity();
      worst_abs = std::max(worst_abs, err);
      worst_ratio = std::max(worst_ratio, err / (tol.atol + tol.rtol * std::abs(ref[i])));
    }
  }
};

// A prompt of `count` tokens: bos, then tokens drawn from [0, vocab) by `seed`.
inline std::vector<int32_t> random_tokens(int32_t count, uint32_t seed, int32_t vocab = 964, int32_t bos = 959) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> out{bos};
  while (int32_t(out.size()) < count) out.push_back(token(rng));
  return out;
}

// Compares every row a step returned with the oracle's row for the same
// sequence and position, under the given tolerances; keeps the worst mismatch.
struct Checker {
  Checker(const OracleOutput& reference, Tolerance logits_tol, Tolerance hidden_tol)
      : oracle(reference), logits_tolerance(logits_tol), hidden_tolerance(hidden_tol) {}

  const OracleOutput& oracle;
  Tolerance logits_tolerance, hidden_tolerance;
  Mismatch logits, hidden;
  int64_t rows_checked = 0;

  void check(const PagedRunner::Step& step, const std::vector<int32_t>& logits_rows,
             const std::vector<int32_t>& hidden_rows) {
    REQUIRE(step.logits.size() == logits_rows.size());
    REQUIRE(step.hidden.size() == hidden_rows.size());
    for (std::size_t i = 0; i < logits_rows.size(); ++i) {
      const auto row = step.token_rows[std::size_t(logits_rows[i])];
      logits.add(step.logits[i], oracle.logits[std::size_t(row.seq)][std::size_t(row.position)], logits_tolerance);
      ++rows_checked;
    }
    for (std::size_t i = 0; i < hidden_rows.size(); ++i) {
      const auto row = step.token_rows[std::size_t(hidden_rows[i])];
      hidden.add(step.hidden[i], oracle.hidden[std::size_t(row.seq)][std::size_t(row.position)], hidden_tolerance);
    }
  }
  void check_all(const PagedRunner::Step& step) {
    std::vector<int32_t> all(step.token_rows.size());
    std::iota(all.begin(), all.end(), 0);
    check(step, all, all);
  }
  void require_within_tolerance() const {
    // Printed by passing runs too: the measured errors the tolerances are argued from.
    WARN("rows checked " << rows_checked << "; worst logits |err| " << logits.worst_abs << " (ratio "
                         << logits.worst_ratio << "), worst hidden |err| " << hidden.worst_abs << " (ratio "
                         << hidden.worst_ratio << ")");
    INFO("rows checked " << rows_checked << "; worst logits |err| " << logits.worst_abs << " (ratio to tolerance "
                         << logits.worst_ratio << "), worst hidden |err| " << hidden.worst_abs << " (ratio "
                         << hidden.worst_ratio << ")");
    CHECK(rows_checked > 0);
    CHECK(logits.worst_ratio <= 1.0);
    CHECK(hidden.worst_ratio <= 1.0);
  }
};

// Five sequences: prefill, then decodes first and prefill chunks after them
// (fresh, continued and finishing) in every later step.
inline const std::vector<int32_t> kMixedLengths = {24, 13, 30, 16, 17};
inline const std::vector<std::vector<PagedRunner::Chunk>> kMixedSteps = {
    {{0, 20}},
    {{0, 1}, {1, 6}, {2, 12}},
    {{0, 1}, {1, 5}, {2, 10}, {3, 14}},
    {{0, 1}, {1, 1}, {2, 8}, {4, 17}},
    {{0, 1}, {1, 1}, {3, 1}},
    {{3, 1}},
};

}  // namespace llama_test
