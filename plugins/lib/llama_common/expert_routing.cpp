#include "llama_common/expert_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagedllm::llama {

void ExpertRouting::route(const float* logits, int64_t tokens, int64_t experts, int64_t top_k, bool normalize) {
  const auto k = std::size_t(top_k);
  chosen_.resize(std::size_t(tokens) * k);
  chosen_weights_.resize(chosen_.size());
  order_.resize(std::size_t(experts));
  probabilities_.resize(std::size_t(experts));
  std::vector<float>& p = probabilities_;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    const float max = *std::max_element(row, row + experts);
    float sum = 0.0f;
    for (int64_t j = 0; j < experts; ++j) sum += p[std::size_t(j)] = std::exp(row[j] - max);
    for (float& v : p) v /= sum;
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + top_k, order_.end(), [&](int32_t a, int32_t b) {
      return p[std::size_t(a)] > p[std::size_t(b)] || (p[std::size_t(a)] == p[std::size_t(b)] && a < b);
    });
    float chosen_sum = 0.0f;
    for (std::size_t j = 0; j < k; ++j) chosen_sum += p[std::size_t(order_[j])];
    for (std::size_t j = 0; j < k; ++j) {
      const float weight = p[std::size_t(order_[j])];
      chosen_[std::size_t(t) * k + j] = order_[j];
      chosen_weights_[std::size_t(t) * k + j] = normalize ? weight / chosen_sum : weight;
    }
  }
  offsets.assign(std::size_t(experts + 1), 0);
  for (int32_t expert : chosen_) ++offsets[std::size_t(expert) + 1];
  for (std::size_t j = 0; j < std::size_t(experts); ++j) offsets[j + 1] += offsets[j];
  rows.resize(chosen_.size());
  weights.resize(chosen_.size());
  fill_.assign(offsets.begin(), offsets.end() - 1);
  for (std::size_t i = 0; i < chosen_.size(); ++i) {
    const auto slot = std::size_t(fill_[std::size_t(chosen_[i])]++);
    rows[slot] = int32_t(i / k);
    weights[slot] = chosen_weights_[i];
  }
}

}  // namespace pagedllm::llama
