#include "llama_cpu/cpu_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/fast_exp.h"

namespace pagedllm::llama_cpu {
namespace {

using pagedllm::plugins::exp_approx;

PAGEDLLM_VECTOR_CLONES
void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
}

// The sum of squares in eight double lanes: exact enough for any hidden size,
// and still vectorised.
PAGEDLLM_VECTOR_CLONES
double sum_of_squares(const float* x, int64_t n) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lanes[j] += double(x[i + j]) * double(x[i + j]);
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += double(x[i]) * double(x[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

PAGEDLLM_VECTOR_CLONES
void scale_row(const float* x, const float* weight, float weight_offset, float inv, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = (weight[i] + weight_offset) * (x[i] * inv);
}

// GELU's tanh approximation (transformers' gelu_pytorch_tanh) of the gate times up, in f32 as torch computes it.
void gelu_tanh_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))) * up[i];
  }
}

}  // namespace

void rms_norm(ThreadPool& pool, const float* x, int64_t ld_x, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ld_out, float weight_offset) {
  parallel_rows(pool, rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const double mean_square = sum_of_squares(x + t * ld_x, dim) / double(dim);
      const auto inv = static_cast<float>(1.0 / std::sqrt(mean_square + double(eps)));
      scale_row(x + t * ld_x, weight, weight_offset, inv, out + t * ld_out, dim);
    }
  });
}

void head_rms_norm(ThreadPool& pool, float* x, int64_t rows, int64_t row_stride, int64_t first_head, int64_t heads,
                   int64_t head_dim, const float* weight, float eps, float weight_offset) {
  parallel_rows(pool, rows, heads * head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t j = first_head; j < first_head + heads; ++j) {
        float* head = x + t * row_stride + j * head_dim;
        const double mean_square = sum_of_squares(head, head_dim) / double(head_dim);
        scale_row(head, weight, weight_offset, static_cast<float>(1.0 / std::sqrt(mean_square + double(eps))), head,
                  head_dim);
      }
    }
  });
}

void add_bias(ThreadPool& pool, float* out, int64_t ld_out, int64_t rows, int64_t n, const float* bias) {
  parallel_rows(pool, rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = out + t * ld_out;
      for (int64_t i = 0; i < n; ++i) row[i] += bias[i];
    }
  });
}

void swiglu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out) {
  parallel_rows(pool, rows, inter * 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = gate_up + t * 2 * inter;
      swiglu_row(gate, gate + inter, out + t * inter, inter);
    }
  });
}

void gelu_tanh_glu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out) {
  parallel_rows(pool, rows, inter * 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = gate_up + t * 2 * inter;
      gelu_tanh_glu_row(gate, gate + inter, out + t * inter, inter);
    }
  });
}

void softcap(ThreadPool& pool, float* x, int64_t rows, int64_t n, float cap) {
  parallel_rows(pool, rows, n * 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * n; i < end * n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
  });
}

}  // namespace pagedllm::llama_cpu
