#include "core/engine/engine_metrics.h"

#include <algorithm>
#include <utility>

namespace pagedllm {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size(), 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::observe(double value) {
  // Cumulative buckets: every bucket whose bound is >= value counts it.
  const auto first = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  for (auto i = static_cast<std::size_t>(first - upper_bounds_.begin()); i < counts_.size(); ++i) {
    ++counts_[i];
  }
  ++count_;
  sum_ += value;
}

std::vector<double> time_to_first_token_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> inter_token_latency_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
          20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0,  20.0,  30.0,
          40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace pagedllm
