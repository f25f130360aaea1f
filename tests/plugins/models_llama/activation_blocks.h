#pragma once
// The activations' per-block quantization linear() pairs GGUF block weights with, as weights.h and
// linear.cpp state it (llama.cpp's Q8_0 / Q8_1 for 32-element blocks, Q8_K for 256), written again
// here for the kernel tests' oracles.

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/float16_rounding.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"

namespace pagedllm::llama_cpu::testing {

// A quantized activation block: x_i ~ d * q_i.
struct ActBlock {
  double d = 0, s = 0;      // s: Q8_1's f16(d * sum q)
  std::vector<int> q;
  std::vector<int> sums16;  // Q8_K's sums of q per 16
};

inline double f16_rounded(float x) { return double(pllm::f16_to_f32(pagedllm::plugins::f32_to_f16(x))); }

// Q8_0 / Q8_1: d = max |x| / 127 (kept as f16), q = nearbyint(x / d).
inline ActBlock quantize32(const float* x) {
  ActBlock a;
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[i]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    a.q.push_back(int(std::nearbyint(x[i] * id)));
    sum += a.q.back();
  }
  a.d = f16_rounded(d);
  a.s = f16_rounded(d * float(sum));
  return a;
}

// Q8_K: q = min(127, nearbyint(x * -127 / x_max)) with x_max the element of largest magnitude, d its
// inverse scale in f32.
inline ActBlock quantize256(const float* x) {
  ActBlock a;
  float amax = 0, max = 0;
  for (int i = 0; i < 256; ++i) {
    if (std::abs(x[i]) > amax) {
      amax = std::abs(x[i]);
      max = x[i];
    }
  }
  a.q.assign(256, 0);
  a.sums16.assign(16, 0);
  if (amax == 0) return a;
  const float iscale = -127.0f / max;
  for (int i = 0; i < 256; ++i) {
    a.q[std::size_t(i)] = std::min(127, int(std::nearbyint(iscale * x[i])));
    a.sums16[std::size_t(i / 16)] += a.q[std::size_t(i)];
  }
  a.d = double(1.0f / iscale);
  return a;
}

}  // namespace pagedllm::llama_cpu::testing
