#include "device_staging.h"

#include <cuda_runtime_api.h>

#include "pagedllm/sdk.hpp"

namespace pagedllm::collectives_mpi {
namespace {

void check(cudaError_t rc, int device, const std::string& what, const char* call) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();
  throw pllm::Error(rc == cudaErrorMemoryAllocation ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE,
                    "collectives_mpi on cuda:" + std::to_string(device) + ": " + what + ": " + call + ": " +
                        cudaGetErrorString(rc));
}

}  // namespace

DeviceStaging::DeviceStaging(int device) : device_(device) {
  check(cudaSetDevice(device_), device_, "create", "cudaSetDevice");
}

DeviceStaging::~DeviceStaging() {
  if (host_) (void)cudaFreeHost(host_);
}

void* DeviceStaging::host(std::size_t bytes, const std::string& what) {
  if (bytes <= capacity_) return host_;
  if (host_) (void)cudaFreeHost(host_);
  host_ = nullptr;
  capacity_ = 0;
  // Grown to twice the need, so that steps of slowly growing size do not reallocate each time.
  const std::size_t grown = 2 * bytes;
  const std::string call = "cudaMallocHost of " + std::to_string(grown) + " bytes";
  check(cudaMallocHost(&host_, grown), device_, what, call.c_str());
  capacity_ = grown;
  return host_;
}

void* DeviceStaging::to_host(const void* device, std::size_t bytes, void* stream, const std::string& what) {
  void* staged = host(bytes, what);
  copy_to_host(staged, device, bytes, stream, what);
  return staged;
}

void DeviceStaging::copy_to_host(void* host, const void* device, std::size_t bytes, void* stream,
                                 const std::string& what) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  check(cudaSetDevice(device_), device_, what, "cudaSetDevice");
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), device_, what, "cudaMemcpyAsync to the host");
  check(cudaStreamSynchronize(s), device_, what, "cudaStreamSynchronize");
}

void DeviceStaging::to_device(void* device, const void* host, std::size_t bytes, void* stream,
                              const std::string& what) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  check(cudaSetDevice(device_), device_, what, "cudaSetDevice");
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), device_, what,
        "cudaMemcpyAsync to the device");
  check(cudaStreamSynchronize(s), device_, what, "cudaStreamSynchronize");
}

}  // namespace pagedllm::collectives_mpi
