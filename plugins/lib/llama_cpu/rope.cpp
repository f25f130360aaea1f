#include "llama_cpu/rope.h"

#include <cmath>

namespace pagedllm::llama_cpu {

void rope_tables(const std::vector<double>& inv_freq, const int32_t* positions, int64_t rows, float* cos, float* sin) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(positions[t]) * inv_freq[std::size_t(i)];
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void apply_rope(float* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim, const float* cos,
                const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < rows; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* x = data + t * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace pagedllm::llama_cpu
