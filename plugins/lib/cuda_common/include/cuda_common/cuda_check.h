#pragma once
// CUDA and cuBLAS failures as pllm::Error, for the CUDA plugins: a failing call
// becomes a status and a message naming the call, the file:line and CUDA's own
// reason, and never a crash. Out of memory maps to PLLM_ERROR_OUT_OF_MEMORY so
// core can say what ran out.

#include <cuda_runtime_api.h>

#include <string>

#include "pagedllm/sdk.hpp"

namespace pagedllm::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Reset the (non-sticky) last error so a later, unrelated check does not report it again.
  (void)cudaGetLastError();
  const pllm_status code =
      status == cudaErrorMemoryAllocation ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE;
  throw pllm::Error(code, std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                              cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace pagedllm::cuda

#define PAGEDLLM_CUDA_CHECK(call)                                                     \
  do {                                                                                \
    const cudaError_t pagedllm_cuda_status_ = (call);                                 \
    if (pagedllm_cuda_status_ != cudaSuccess) {                                       \
      ::pagedllm::cuda::throw_cuda_error(pagedllm_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the launch site.
#define PAGEDLLM_CUDA_CHECK_LAUNCH() PAGEDLLM_CUDA_CHECK(cudaPeekAtLastError())
