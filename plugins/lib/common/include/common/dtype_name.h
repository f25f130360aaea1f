#pragma once
// The config spelling of an SDK dtype, for the error messages of the plugins and
// the names pagedllm-attn-bench prints.

#include "pagedllm/sdk.h"

namespace pagedllm::plugins {

inline const char* dtype_name(pllm_dtype dtype) {
  switch (dtype) {
    case PLLM_DTYPE_F32: return "f32";
    case PLLM_DTYPE_F16: return "f16";
    case PLLM_DTYPE_BF16: return "bf16";
    case PLLM_DTYPE_I32: return "i32";
    case PLLM_DTYPE_I64: return "i64";
    case PLLM_DTYPE_U8: return "u8";
    case PLLM_DTYPE_I8: return "i8";
    case PLLM_DTYPE_INVALID: return "invalid";
    case PLLM_DTYPE_FORCE_32BIT: break;  // never a dtype: unknown, like any value this code does not know
  }
  return "unknown";
}

}  // namespace pagedllm::plugins
