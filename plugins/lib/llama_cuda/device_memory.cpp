#include "llama_cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama_cuda {

std::string mib(uint64_t bytes) { return std::to_string((bytes + (uint64_t(1) << 20) - 1) >> 20) + " MiB"; }
std::string device_name(int device) { return "cuda:" + std::to_string(device); }

void CudaMemory::allocate(std::size_t bytes, int device, std::string_view who, const std::string& what) {
  release();
  void* p = nullptr;
  const std::size_t size = std::max<std::size_t>(bytes, 1);
  const cudaError_t status =
      kind_ == Kind::kDevice ? cudaMalloc(&p, size) : cudaHostAlloc(&p, size, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    std::string where = "of pinned host memory";
    if (kind_ == Kind::kDevice) {
      where = "on " + device_name(device);
      std::size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        where += " (" + mib(free_bytes) + " free of " + mib(total_bytes) + ")";
      }
      (void)cudaGetLastError();
    }
    throw pllm::Error(status == cudaErrorMemoryAllocation ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE,
                      std::string(who) + ": " + what + " needs " + mib(bytes) + " (" + std::to_string(bytes) +
                          " bytes) " + where + ": " + cudaGetErrorName(status));
  }
  data_ = static_cast<std::byte*>(p);
  bytes_ = bytes;
}

void CudaMemory::release() {
  if (data_) (void)(kind_ == Kind::kDevice ? cudaFree(data_) : cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
}

void CudaMemory::swap(CudaMemory& other) noexcept {
  std::swap(kind_, other.kind_);
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
}

}  // namespace pagedllm::llama_cuda
