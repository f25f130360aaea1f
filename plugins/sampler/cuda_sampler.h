#pragma once
// The sampler on a CUDA device: the same pipeline and arithmetic as the CPU's
// (row_sampler.h, sampling_math.h), one block per row (sampler_kernels.cu).
// Per call one host-to-device copy (the rows' parameters, penalty and logit adjustment lists)
// and one device-to-host copy (ids, statuses, raw logprobs, requested top
// logprobs): nothing vocabulary-sized crosses unless probabilities() is asked
// for host memory.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "logit_adjustments.h"
#include "pagedllm/sdk.h"
#include "sampler_kernels.h"
#include "token_history.h"

namespace pagedllm::sampler {

class CudaSampler {
 public:
  explicit CudaSampler(int device_index);
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  void sample(const pllm_sample_batch& batch, pllm_sample_output& out);
  void probabilities(const pllm_sample_batch& batch, const pllm_probabilities_output& out);

 private:
  // Grow-only memory: device (cudaMalloc) or pinned host (cudaMallocHost).
  struct Buffer {
    bool pinned = false;
    void* data = nullptr;
    std::size_t bytes = 0;
    void reserve(std::size_t wanted, int device);
    void release();
  };
  bool accepts(const pllm_device& device) const;
  // Validates, stages and uploads the rows; returns the vocabulary. Fills
  // args' logits, rows, penalties and work.
  int64_t upload(const pllm_sample_batch& batch, SampleKernelArgs& args);
  void synchronize();

  int device_;
  cudaStream_t stream_ = nullptr;
  Buffer inputs_, staged_inputs_{true}, logits_copy_, masked_logits_, work_, outputs_, staged_outputs_{true}, top_keys_, probs_;
  TokenHistory history_;
  std::vector<DeviceRow> rows_;
  std::vector<PenaltyEntry> penalties_;
  std::vector<AdjustmentEntry> adjustments_;
  std::vector<int32_t> banned_;  // min_tokens scratch
};

}  // namespace pagedllm::sampler
