#pragma once
// GPU tests skip cleanly on machines without a CUDA device (CI, dev machines):
// a case starts with PAGEDLLM_REQUIRE_CUDA_DEVICE(), which WARNs the marker
// "SKIPPED: no CUDA device (<CUDA's reason>)" and returns. Register such tests
// with pagedllm_add_test(... SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")
// so ctest reports them as skipped, not passed.

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace pagedllm::testing {

// Empty when a device is usable; otherwise why not ("no driver", "no device").
inline std::string cuda_device_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaGetErrorString(status);
  }
  if (count == 0) return "cudaGetDeviceCount() found none";
  return {};
}

// True when cuda:0 is the CUDA emulator's (the emulated build,
// plugins/lib/cuda_emulation) and PAGEDLLM_CUDA_EMULATION_FULL is not 1:
// device tests then use smaller shapes, which the emulator runs in CI time.
// scripts/cuda_emulation_full.sh runs the GPU-sized shapes under emulation.
inline bool emulated_small_shapes() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const char* full = std::getenv("PAGEDLLM_CUDA_EMULATION_FULL");
  return std::strncmp(prop.name, "pagedllm emulated", 17) == 0 && !(full && std::strcmp(full, "1") == 0);
}

}  // namespace pagedllm::testing

#define PAGEDLLM_REQUIRE_CUDA_DEVICE()                                              \
  do {                                                                              \
    const std::string pagedllm_no_cuda_ = ::pagedllm::testing::cuda_device_unavailable_reason(); \
    if (!pagedllm_no_cuda_.empty()) {                                               \
      WARN("SKIPPED: no CUDA device (" << pagedllm_no_cuda_ << ")");                \
      return;                                                                       \
    }                                                                               \
  } while (0)
