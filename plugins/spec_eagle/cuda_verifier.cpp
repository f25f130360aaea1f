#include "cuda_verifier.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda_common/cuda_check.h"
#include "llama_cuda/device_memory.h"
#include "verify_kernels.h"

namespace pagedllm::spec_eagle {

CudaVerifier::CudaVerifier(int device) : device_(device) {
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_));
  PAGEDLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaVerifier::~CudaVerifier() {
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  (void)cudaStreamDestroy(stream_);
}

void CudaVerifier::reserve(llama_cuda::CudaMemory& memory, std::size_t bytes, int device, const char* what) {
  if (bytes <= memory.bytes()) return;
  memory.allocate(std::max(bytes, 2 * memory.bytes()), device, "spec_eagle: verify", what);
}

void CudaVerifier::verify(const pllm_verify_args& a, const pllm::VerifyShape& shape, pllm_verify_output& out) {
  const auto rows = std::size_t(shape.rows);
  if (rows == 0) return;
  const auto k = std::size_t(shape.k);
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_));

  // One copy up: the rows, then their drafts.
  const std::size_t rows_bytes = rows * sizeof(VerifyRowInput);
  const std::size_t input_bytes = rows_bytes + rows * k * sizeof(int32_t);
  reserve(staged_inputs_, input_bytes, device_, "the staged verify inputs");
  reserve(inputs_, input_bytes, device_, "the verify inputs");
  auto* staged_rows = reinterpret_cast<VerifyRowInput*>(staged_inputs_.data());
  for (std::size_t s = 0; s < rows; ++s) {
    staged_rows[s] = {a.seeds[s], a.random_offsets[s], a.num_drafts[s], a.greedy[s] ? 1 : 0};
  }
  if (k > 0) std::memcpy(staged_inputs_.data() + rows_bytes, a.draft_token_ids, rows * k * sizeof(int32_t));
  PAGEDLLM_CUDA_CHECK(
      cudaMemcpyAsync(inputs_.data(), staged_inputs_.data(), input_bytes, cudaMemcpyHostToDevice, stream_));

  // One copy down: the results, then the tokens (all 4-byte fields, unpadded).
  static_assert(sizeof(VerifyRowResult) == 20 && alignof(VerifyRowResult) == 4);
  const std::size_t results_bytes = rows * sizeof(VerifyRowResult);
  const std::size_t output_bytes = results_bytes + rows * (k + 1) * sizeof(int32_t);
  reserve(outputs_, output_bytes, device_, "the verify outputs");
  reserve(staged_outputs_, output_bytes, device_, "the staged verify outputs");

  VerifyKernelArgs args{};
  args.p = shape.p.data;
  args.p_stride0 = shape.p.stride0;
  args.p_stride1 = shape.p.stride1;
  args.q = shape.q.data;
  args.q_stride0 = shape.q.stride0;
  args.q_stride1 = shape.q.stride1;
  args.vocab = shape.vocab;
  args.max_drafts = int32_t(k);
  args.rows = reinterpret_cast<const VerifyRowInput*>(inputs_.data());
  args.drafts = reinterpret_cast<const int32_t*>(inputs_.data() + rows_bytes);
  args.results = reinterpret_cast<VerifyRowResult*>(outputs_.data());
  args.tokens = reinterpret_cast<int32_t*>(outputs_.data() + results_bytes);
  launch_verify_rows(args, int32_t(rows), stream_);
  PAGEDLLM_CUDA_CHECK(
      cudaMemcpyAsync(staged_outputs_.data(), outputs_.data(), output_bytes, cudaMemcpyDeviceToHost, stream_));
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));

  const auto* results = reinterpret_cast<const VerifyRowResult*>(staged_outputs_.data());
  for (std::size_t s = 0; s < rows; ++s) {
    if (results[s].status != pllm::rejection::kOk) {
      const pllm::rejection::RowFailure f{results[s].status, results[s].position, results[s].id, results[s].value};
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, pllm::rejection::failure_message(f, int64_t(s)));
    }
  }
  std::memcpy(out.output_token_ids, staged_outputs_.data() + results_bytes, rows * (k + 1) * sizeof(int32_t));
  for (std::size_t s = 0; s < rows; ++s) out.num_output_tokens[s] = results[s].num_tokens;
}

}  // namespace pagedllm::spec_eagle
