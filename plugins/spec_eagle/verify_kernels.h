#pragma once
// The CUDA verify()'s kernel and the layouts host code fills for it
// (verify_kernels.cu holds only the kernel and its launcher).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pagedllm::spec_eagle {

// One sequence to verify, as the kernel reads it (host-built, copied up per call).
struct VerifyRowInput {
  uint64_t seed;
  uint64_t random_offset;  // output index of the first draft
  int32_t num_drafts;
  int32_t greedy;
};

// What the kernel writes per sequence; copied down with the tokens.
struct VerifyRowResult {
  int32_t num_tokens;
  int32_t status;    // pllm::rejection::Status; the fields below say where when not kOk
  int32_t position;
  int32_t id;
  float value;
};

struct VerifyKernelArgs {
  const float* p;  // [rows, K + 1, vocab] with these strides, contiguous vocab rows
  int64_t p_stride0, p_stride1;
  const float* q;  // [rows, K, vocab]
  int64_t q_stride0, q_stride1;
  int64_t vocab;
  int32_t max_drafts;              // K
  const VerifyRowInput* rows;      // [num_rows]
  const int32_t* drafts;           // [num_rows, K]
  VerifyRowResult* results;        // [num_rows]
  int32_t* tokens;                 // [num_rows, K + 1]
};

// One block per sequence: pllm::verify_row's algorithm (rejection_sampler.hpp)
// with its scans done by the block, in integers or by order-independent
// reductions, so the tokens are the host's.
void launch_verify_rows(const VerifyKernelArgs& args, int32_t num_rows, cudaStream_t stream);

}  // namespace pagedllm::spec_eagle
