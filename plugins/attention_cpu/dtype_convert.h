#pragma once
// f16 / bf16 <-> f32 conversions for the CPU attention backend. Storage types
// are plain 16-bit patterns; arithmetic always happens in f32.
// f32 -> f16/bf16 rounds to nearest, ties to even (what hardware converts do),
// keeps NaN a (quiet) NaN and overflows to infinity; f16 subnormals are exact.

#include <bit>
#include <cmath>
#include <cstdint>

#include "plugins/common/dtype_name.h"
#include "pagedllm/sdk/tensor.h"

namespace pagedllm::attention_cpu {

struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return static_cast<std::uint16_t>(u >> 16);
}

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal (or zero): exact
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 = halfway between the largest f16 (65504) and 2^16: ties to even go up, to infinity.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): a subnormal in units of 2^-24.
    // The scaling is exact; nearbyint rounds ties to even in the default mode.
    const float units = std::bit_cast<float>(a) * 0x1p24f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(units)));
  }
  const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);  // carries into the exponent correctly
  return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

inline float to_f32(float x) { return x; }
inline float to_f32(f16_t x) { return f16_to_f32(x.bits); }
inline float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }

template <class T>
T from_f32(float x);
template <>
inline float from_f32<float>(float x) { return x; }
template <>
inline f16_t from_f32<f16_t>(float x) { return {f32_to_f16(x)}; }
template <>
inline bf16_t from_f32<bf16_t>(float x) { return {f32_to_bf16(x)}; }

// Reads n elements of `dtype` into f32 (dtype is one of F32, F16, BF16).
inline void load_f32(const void* src, pllm_dtype dtype, float* dst, std::int64_t n) {
  switch (dtype) {
    case PLLM_DTYPE_F32:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<const float*>(src)[i];
      return;
    case PLLM_DTYPE_F16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
      return;
    case PLLM_DTYPE_BF16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
      return;
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
}

// Writes n f32 values as `dtype` (one of F32, F16, BF16).
inline void store_f32(const float* src, pllm_dtype dtype, void* dst, std::int64_t n) {
  switch (dtype) {
    case PLLM_DTYPE_F32:
      for (std::int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = src[i];
      return;
    case PLLM_DTYPE_F16:
      for (std::int64_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    case PLLM_DTYPE_BF16:
      for (std::int64_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
}

inline bool is_float_dtype(pllm_dtype dtype) {
  return dtype == PLLM_DTYPE_F32 || dtype == PLLM_DTYPE_F16 || dtype == PLLM_DTYPE_BF16;
}

using pagedllm::plugins::dtype_name;

}  // namespace pagedllm::attention_cpu
