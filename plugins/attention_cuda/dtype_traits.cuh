#pragma once
// Element types of the cache and activations on the device, and 16-byte
// vector loads of them converted to f32 (all arithmetic is f32).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "pagedllm/sdk.hpp"

namespace pagedllm::attention_cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// A 16-bit element from its bit pattern.
template <class T>
__device__ __forceinline__ float bits_to_float(unsigned short bits) {
  if constexpr (std::is_same_v<T, __half>) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  } else {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
}

// Elements in one 16-byte load: 4 f32 or 8 f16/bf16.
template <class T>
inline constexpr int kVecElems = 16 / int(sizeof(T));

// Loads the 16 bytes at `p` (16-byte aligned) as kVecElems<T> floats.
template <class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[kVecElems<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little-endian: the lower-addressed element is the low half
      out[2 * i] = bits_to_float<T>(static_cast<unsigned short>(words[i] & 0xffffu));
      out[2 * i + 1] = bits_to_float<T>(static_cast<unsigned short>(words[i] >> 16));
    }
  }
}

// Calls f.template operator()<T>() for the storage type of `dtype` (f32, f16, bf16).
template <class F>
void dispatch_dtype(pllm_dtype dtype, F&& f) {
  switch (dtype) {
    case PLLM_DTYPE_F32: f.template operator()<float>(); return;
    case PLLM_DTYPE_F16: f.template operator()<__half>(); return;
    case PLLM_DTYPE_BF16: f.template operator()<__nv_bfloat16>(); return;
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
  throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: no kernel for dtype " + std::to_string(int(dtype)));
}

}  // namespace pagedllm::attention_cuda
