#pragma once
// Catch2 helpers of the models_llama tests on top of paged_runner.h: skipping
// without Python, and tolerance checks against the oracle.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/paged_runner.h"

namespace llama_test {

// True when the oracle can run; otherwise prints the skip marker ctest looks for.
inline bool oracle_available() {
  static const bool available = python_has("torch") && python_has("numpy");
  if (!available) WARN("SKIPPED: " << kPython << " cannot import torch and numpy (the PyTorch oracle)");
  return available;
}

inline bool generator_available() {
  static const bool available = python_has("numpy");
  if (!available) WARN("SKIPPED: " << kPython << " cannot import numpy (the tiny-Llama generator)");
  return available;
}

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

}  // namespace llama_test
