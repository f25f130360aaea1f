#pragma once
// f16 and bf16 (stored as 16-bit patterns) to f32, for weights and
// activations a plugin reads in another dtype. Exact: every f16 and bf16 value
// is an f32 value; NaN stays NaN, infinities stay infinite, f16 subnormals are
// widened exactly.

#include <bit>
#include <cstdint>
#include <cstring>

#include "pagedllm/sdk/tensor.h"

namespace pllm {

inline float bf16_to_f32(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

inline float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal or zero
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// True for the dtypes to_f32 converts: F32, F16, BF16.
inline bool is_float_dtype(pllm_dtype dtype) {
  return dtype == PLLM_DTYPE_F32 || dtype == PLLM_DTYPE_F16 || dtype == PLLM_DTYPE_BF16;
}

// Converts `count` little-endian elements of `dtype` (F32, F16 or BF16) at
// `src`, which needs no alignment, into dst[0, count). Returns false, writing
// nothing, for any other dtype.
inline bool to_f32(const void* src, pllm_dtype dtype, float* dst, std::int64_t count) {
  if (count <= 0) return is_float_dtype(dtype);  // nothing to copy; dst may be null (an empty vector's data())
  const auto* bytes = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case PLLM_DTYPE_F32:
      std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(float));
      return true;
    case PLLM_DTYPE_F16:
    case PLLM_DTYPE_BF16:
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        dst[i] = dtype == PLLM_DTYPE_F16 ? f16_to_f32(bits) : bf16_to_f32(bits);
      }
      return true;
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
  return false;
}

}  // namespace pllm
