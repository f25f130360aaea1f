#pragma once
// How far backend b's output is from backend a's, element by element.

#include <cstdint>
#include <limits>
#include <vector>

namespace pagedllm::attn_bench {

struct OutputDiff {
  // Relative differences are taken only where max(|a|, |b|) >= this: near
  // zero they say nothing (outputs are convex combinations of V in [-1, 1]).
  static constexpr double kRelFloor = 1e-3;

  double max_abs = 0;  // max |a - b|; infinity when one side is NaN/inf and the other not equal
  double max_rel = 0;  // max |a - b| / max(|a|, |b|) over elements with max(|a|, |b|) >= kRelFloor
  int64_t worst = -1;  // flat index of the max_abs element, -1 when all are equal
  float worst_a = 0, worst_b = 0;
  int64_t count = 0;

  // Folds in one more pair of outputs (same length).
  void add(const std::vector<float>& a, const std::vector<float>& b, int64_t base = 0);
};

}  // namespace pagedllm::attn_bench
