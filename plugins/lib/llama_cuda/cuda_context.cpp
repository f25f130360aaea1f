#include "llama_cuda/cuda_context.h"

#include <cublas_v2.h>

#include "pagedllm/sdk.hpp"
#include "cuda_common/cuda_check.h"
#include "llama_cuda/device_memory.h"

namespace pagedllm::llama_cuda {
namespace {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw pllm::Error(status == CUBLAS_STATUS_ALLOC_FAILED ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE,
                    std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                        cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

#define LLAMA_CUBLAS_CHECK(call)                                               \
  do {                                                                         \
    const cublasStatus_t llama_cublas_status_ = (call);                       \
    if (llama_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                       \
      throw_cublas_error(llama_cublas_status_, #call, __FILE__, __LINE__);     \
    }                                                                          \
  } while (0)

// cuBLAS's name of a compute dtype (F32, F16 or BF16).
cudaDataType_t cuda_type(pllm_dtype dtype) {
  if (dtype == PLLM_DTYPE_F16) return CUDA_R_16F;
  if (dtype == PLLM_DTYPE_BF16) return CUDA_R_16BF;
  return CUDA_R_32F;
}

// Makes `device` current, with an error naming it and CUDA's reason (no
// driver, no such ordinal) when it cannot be used.
void use_device(int device, std::string_view who) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && device >= count) {
    throw pllm::Error(PLLM_ERROR_DEVICE, std::string(who) + ": there is no " + device_name(device) + " (" +
                                             std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  if (status == cudaSuccess) status = cudaSetDevice(device);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw pllm::Error(PLLM_ERROR_DEVICE, std::string(who) + ": cannot use " + device_name(device) + ": " +
                                             cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

}  // namespace

void CudaContext::StreamDeleter::operator()(CUstream_st* s) const { (void)cudaStreamDestroy(s); }
void CudaContext::CublasDeleter::operator()(cublasContext* h) const { (void)cublasDestroy(h); }

CudaContext::CudaContext(int device, std::string_view who) : device_(device) {
  use_device(device_, who);
  cudaStream_t stream = nullptr;
  PAGEDLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_.reset(stream);
  cublasHandle_t handle = nullptr;
  LLAMA_CUBLAS_CHECK(cublasCreate(&handle));
  cublas_.reset(handle);
  LLAMA_CUBLAS_CHECK(cublasSetStream(handle, stream));
}

void CudaContext::make_current() const { PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaContext::linear(pllm_dtype dtype, const void* x, int64_t m, int64_t k, const void* w, int64_t n, void* y,
                         pllm_dtype y_dtype) const {
  if (m <= 0) return;
  // Column-major cuBLAS sees row-major y[m, n] as y^T[n, m] = w[n, k] x^T: w
  // transposed (its rows are k long), x as is.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = cuda_type(dtype);
  LLAMA_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w, type,
                                  int(k), x, type, int(k), &beta, y, cuda_type(y_dtype), int(n), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

}  // namespace pagedllm::llama_cuda
