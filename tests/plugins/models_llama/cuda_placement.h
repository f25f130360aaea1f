#pragma once
// PagedRunner on CUDA: models_llama and attention_cuda on a CUDA device, and
// the device memory the runner needs for the NaN poison of the cache. Shared
// by the CUDA tests and the benchmark; needs the CUDA runtime.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama_common/tensor_view.h"
#include "tests/plugins/models_llama/paged_runner.h"

namespace llama_test {

inline void expect_cuda(cudaError_t status, const char* what) {
  expect(status == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(status));
}

// Device memory for the tensors the runner hands the backend itself (the
// NaN poison of the cache), freed with the object.
class DeviceTensors {
 public:
  explicit DeviceTensors(int32_t device = 0) : device_(device) {}
  DeviceTensors(const DeviceTensors&) = delete;
  DeviceTensors& operator=(const DeviceTensors&) = delete;
  ~DeviceTensors() {
    for (void* p : allocations_) (void)cudaFree(p);
  }

  // [rows, heads, head_dim] of `dtype`, every element 0 or NaN.
  pllm_tensor make(int64_t rows, int64_t heads, int64_t head_dim, pllm_dtype dtype, float fill) {
    const int64_t count = rows * heads * head_dim, size = pllm_dtype_size(dtype);
    expect(fill == 0.0f || std::isnan(fill), "device tensors are filled with 0 or NaN");
    std::vector<unsigned char> host(std::size_t(count * size), 0);
    if (std::isnan(fill)) {
      // Quiet NaN of each dtype.
      const uint32_t f32 = 0x7fc00000u;
      const uint16_t f16 = 0x7e00u, bf16 = 0x7fc0u;
      for (int64_t i = 0; i < count; ++i) {
        unsigned char* dst = host.data() + i * size;
        if (dtype == PLLM_DTYPE_F32) std::memcpy(dst, &f32, 4);
        if (dtype == PLLM_DTYPE_F16) std::memcpy(dst, &f16, 2);
        if (dtype == PLLM_DTYPE_BF16) std::memcpy(dst, &bf16, 2);
      }
    }
    void* p = nullptr;
    expect_cuda(cudaSetDevice(device_), "cudaSetDevice");
    expect_cuda(cudaMalloc(&p, host.size()), "cudaMalloc");
    allocations_.push_back(p);
    expect_cuda(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return pagedllm::llama::tensor_view(p, dtype, {PLLM_DEVICE_CUDA, device_}, {rows, heads, head_dim});
  }

 private:
  int32_t device_;
  std::vector<void*> allocations_;
};

// models_llama and attention_cuda on cuda:`device`, the model in `dtype`
// (INVALID: as stored); `tensors` must be on the same device.
inline Placement cuda_placement(DeviceTensors& tensors, pllm_dtype dtype, int32_t device = 0) {
  Placement p;
  p.device = {PLLM_DEVICE_CUDA, device};
  p.attention_plugin = "attention_cuda";
  p.dtype = dtype;
  p.device_tensor = [&tensors](int64_t rows, int64_t heads, int64_t head_dim, pllm_dtype t, float fill) {
    return tensors.make(rows, heads, head_dim, t, fill);
  };
  p.synchronize = [] { expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };
  return p;
}

}  // namespace llama_test
