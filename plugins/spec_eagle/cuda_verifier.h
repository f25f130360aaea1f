#pragma once
// verify() on a CUDA device (SDK 2.0): when core hands spec_eagle p and q on
// the device the sampler wrote them to, the rejection sampling runs there
// (verify_kernels.cu, one block per sequence) and gives the same tokens as
// the host's pllm::verify_drafts on the same p, q and seeds
// (rejection_sampler.hpp: nothing that decides a token depends on the order
// of a reduction). Per call one host-to-device copy (the sequences' seeds,
// offsets, draft counts and drafts) and one device-to-host copy (20 bytes a
// sequence and its K + 1 output ids): nothing vocabulary-sized crosses.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/rejection_sampler.hpp"
#include "llama_cuda/device_memory.h"

namespace pagedllm::spec_eagle {

class CudaVerifier {
 public:
  explicit CudaVerifier(int device);
  ~CudaVerifier();
  CudaVerifier(const CudaVerifier&) = delete;
  CudaVerifier& operator=(const CudaVerifier&) = delete;

  // `shape` is check_verify_args' for `a`, with p and q on this device.
  // Throws pllm::Error naming the first offending row, as verify_drafts does.
  void verify(const pllm_verify_args& a, const pllm::VerifyShape& shape, pllm_verify_output& out);

 private:
  // Grow-only: reallocated (contents lost) when a call needs more.
  static void reserve(llama_cuda::CudaMemory& memory, std::size_t bytes, int device, const char* what);

  int device_;
  cudaStream_t stream_ = nullptr;
  llama_cuda::CudaMemory inputs_{llama_cuda::CudaMemory::Kind::kDevice};
  llama_cuda::CudaMemory staged_inputs_{llama_cuda::CudaMemory::Kind::kPinnedHost};
  llama_cuda::CudaMemory outputs_{llama_cuda::CudaMemory::Kind::kDevice};
  llama_cuda::CudaMemory staged_outputs_{llama_cuda::CudaMemory::Kind::kPinnedHost};
};

}  // namespace pagedllm::spec_eagle
