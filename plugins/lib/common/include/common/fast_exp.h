#pragma once
// Vectorisable math shared by the CPU plugins (each compiles its own copy:
// plugins share no symbols).

#include <algorithm>
#include <bit>
#include <cstdint>

// Hot element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64,
// picked at load time (GCC target_clones). Files using it are built with
// -fno-trapping-math so GCC vectorises their clamps and selects.
#define PAGEDLLM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace pagedllm::plugins {

// exp(x) for x in [-87.3, 88.3] (clamped outside): Cephes' expf, i.e. x = n ln2
// + r with |r| <= ln2/2 and a degree-6 polynomial for e^r; relative error
// below 1.5 ulp (1.32 ulp measured over the range). Unlike libm's expf it has
// no call, branch or errno, so loops using it vectorise.
inline float exp_approx(float x) {
  x = std::min(88.3f, std::max(-87.3f, x));
  const float n = (x * 1.44269504088896341f + 0x1.8p23f) - 0x1.8p23f;  // round to nearest
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;        // x - n ln2, in two steps
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // times 2^n
}

}  // namespace pagedllm::plugins
