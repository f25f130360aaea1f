#pragma once
// f16 / bf16 <-> f32 conversions for the CPU attention backend. Storage types
// are plain 16-bit patterns; arithmetic always happens in f32. f16/bf16 -> f32
// are the SDK's (float_convert.hpp), f32 -> f16/bf16 plugins/lib/common's
// (float16_rounding.h).

#include <cstdint>

#include "common/dtype_name.h"
#include "common/float16_rounding.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "pagedllm/sdk/tensor.h"

namespace pagedllm::attention_cpu {

struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

using pllm::bf16_to_f32;
using pllm::f16_to_f32;
using pllm::is_float_dtype;
using plugins::f32_to_bf16;
using plugins::f32_to_f16;

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
    case PLLM_DTYPE_FORCE_32BIT:
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
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
}

using pagedllm::plugins::dtype_name;

}  // namespace pagedllm::attention_cpu
