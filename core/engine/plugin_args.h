#pragma once
// What the config says, in the terms of the plugins' create args: shared by the engine (rank 0)
// and the tensor-parallel worker, which must create their plugins alike.

#include <string>

#include "core/config/config.h"
#include "pagedllm/sdk/tensor.h"

namespace pagedllm {

inline pllm_device to_plugin_device(const DeviceConfig& device) {
  return {device.type == DeviceType::kCuda ? PLLM_DEVICE_CUDA : PLLM_DEVICE_CPU, device.index};
}

inline pllm_dtype to_plugin_dtype(const std::string& dtype) {
  if (dtype == "f32") return PLLM_DTYPE_F32;
  if (dtype == "f16") return PLLM_DTYPE_F16;
  if (dtype == "bf16") return PLLM_DTYPE_BF16;
  return PLLM_DTYPE_INVALID;  // "auto": as stored
}

// The config's spelling of a float dtype, for messages; other dtypes by number.
inline std::string config_dtype_name(pllm_dtype dtype) {
  if (dtype == PLLM_DTYPE_F32) return "f32";
  if (dtype == PLLM_DTYPE_F16) return "f16";
  if (dtype == PLLM_DTYPE_BF16) return "bf16";
  return "dtype " + std::to_string(static_cast<int>(dtype));
}

}  // namespace pagedllm
