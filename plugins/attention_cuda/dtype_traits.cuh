#pragma once
// 16-byte vector loads of the cache's element types, converted to f32 (all
// arithmetic is f32; the conversions are plugins/lib/cuda_common's).

#include <cstdint>
#include <type_traits>

#include "cuda_common/dtype_convert.cuh"

namespace pagedllm::attention_cuda {

using cuda::from_float;
using cuda::to_float;

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

}  // namespace pagedllm::attention_cuda
