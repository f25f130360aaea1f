#pragma once
// What every CUDA Llama forward runs on (models_llama's model, spec_eagle's
// draft head): its device made current, its own non-blocking stream, and a
// cuBLAS handle on that stream for the GEMMs, which accumulate in f32 whatever
// the storage dtype.

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <string_view>

#include "pagedllm/sdk.h"

struct cublasContext;

namespace pagedllm::llama_cuda {

class CudaContext {
 public:
  // Makes cuda:`device` current and creates the stream and the cuBLAS handle.
  // Throws pllm::Error(PLLM_ERROR_DEVICE) prefixed with `who`, naming the
  // device and CUDA's reason, when the device cannot be used (no driver, no
  // such ordinal).
  CudaContext(int device, std::string_view who);

  int device_index() const { return device_; }
  pllm_device device() const { return {PLLM_DEVICE_CUDA, device_}; }
  cudaStream_t stream() const { return stream_.get(); }
  // Makes the device current again (a call may come from another thread).
  void make_current() const;

  // y[m, n] = x[m, k] w[n, k]^T: row-major activations times HF's [out, in]
  // weights, both in `dtype` (F32, F16 or BF16), f32 accumulation, y in
  // `y_dtype` (dtype, or F32 for rows handed to the host). m = 0 does nothing.
  void linear(pllm_dtype dtype, const void* x, int64_t m, int64_t k, const void* w, int64_t n, void* y,
              pllm_dtype y_dtype) const;

 private:
  struct StreamDeleter {
    void operator()(CUstream_st* s) const;
  };
  struct CublasDeleter {
    void operator()(cublasContext* h) const;
  };

  int device_;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<cublasContext, CublasDeleter> cublas_;
};

}  // namespace pagedllm::llama_cuda
