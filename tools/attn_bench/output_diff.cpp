#include "tools/attn_bench/output_diff.h"

#include <algorithm>
#include <cmath>

namespace pagedllm::attn_bench {

void OutputDiff::add(const std::vector<float>& a, const std::vector<float>& b, int64_t base) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    double diff = std::abs(x - y);
    // NaN on either side, or infinities that differ, count as an infinite difference.
    if (std::isnan(diff)) diff = (x == y) ? 0.0 : std::numeric_limits<double>::infinity();
    if (std::isnan(x) || std::isnan(y)) diff = std::numeric_limits<double>::infinity();
    if (diff > max_abs || (worst < 0 && diff > 0)) {
      max_abs = diff;
      worst = base + int64_t(i);
      worst_a = a[i];
      worst_b = b[i];
    }
    const double mag = std::max(std::abs(x), std::abs(y));
    if (mag >= kRelFloor) max_rel = std::max(max_rel, std::isfinite(mag) ? diff / mag : diff);
  }
  count += int64_t(n);
}

}  // namespace pagedllm::attn_bench
