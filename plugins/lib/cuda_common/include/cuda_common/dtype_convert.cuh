#pragma once
// The device storage types of weights, activations and the KV cache (f32, f16,
// bf16) and their conversions to and from f32: every CUDA kernel of the
// plugins loads its elements as f32, computes in f32 and rounds once on store.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "pagedllm/sdk.hpp"
#include "common/dtype_name.h"

namespace pagedllm::cuda {

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

// Calls fn(T{}) with T the storage type of `dtype`; any other dtype is
// PLLM_ERROR_UNSUPPORTED naming `what` (the kernel that has no such instance).
template <class Fn>
void visit_storage_type(pllm_dtype dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case PLLM_DTYPE_F32: fn(float{}); return;
    case PLLM_DTYPE_F16: fn(__half{}); return;
    case PLLM_DTYPE_BF16: fn(__nv_bfloat16{}); return;
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
  throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string(what) + ": no kernel for dtype " +
                                                plugins::dtype_name(dtype) + " (f32, f16 or bf16)");
}

}  // namespace pagedllm::cuda
