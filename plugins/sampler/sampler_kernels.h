#pragma once
// The CUDA sampler's kernel and the layouts host code fills for it
// (sampler_kernels.cu holds only the kernel and its launcher).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pagedllm::sampler {

// One row to sample, as the kernel reads it (host-built, copied in per call).
struct DeviceRow {
  float temperature, top_p, min_p, repetition, frequency, presence;
  int32_t top_k;
  int32_t num_top;        // top logprobs to report (<= the call's max_top)
  int32_t logits_row;
  int32_t penalty_begin;  // this row's entries in the penalty list
  int32_t penalty_count;
  int32_t adjustment_begin;  // this row's entries in the logit adjustment list
  int32_t adjustment_count;
  int32_t scored;  // PLLM_SAMPLE_ROW_SCORE: the token to report instead of sampling; -1 samples
  uint64_t key;           // row_key(seed, random_offset)
  int32_t constrained;    // nonzero: the row's token mask applies (launch_mask_rows)
};

// A distinct token of a row's logit_bias or min_tokens ban (logit_adjustments.h).
struct AdjustmentEntry {
  int32_t id;
  float bias;
  int32_t banned;  // min_tokens: the logit becomes -infinity
};

// A distinct token of a row's prompt + output, with its output count.
struct PenaltyEntry {
  int32_t id;
  int32_t count;
};

// What the kernel writes per row; copied to the host with the top arrays.
struct DeviceResult {
  int32_t token;   // -1 for a non-finite row
  int32_t status;  // pllm_sample_status
  float logprob;   // raw log-probability of token
};

struct SampleKernelArgs {
  const float* logits;       // [*, logits_stride]
  int64_t logits_stride;
  int64_t vocab;
  const DeviceRow* rows;
  const PenaltyEntry* penalties;
  const AdjustmentEntry* adjustments;
  float* work;               // [num_rows, vocab] scratch
  DeviceResult* results;     // [num_rows]
  int32_t max_top;
  int32_t* top_ids;          // [num_rows, max_top]
  float* top_logprobs;       // [num_rows, max_top]
  uint64_t* top_keys;        // [num_rows, max_top] scratch
  float* probs;              // [num_rows, probs_stride], or null: sample instead
  int64_t probs_stride;
  int32_t want_logprobs;
  // Nonzero: logits holds one row per batch row (launch_mask_rows' output), so
  // row r reads row r instead of its logits_row.
  int32_t gathered;
};

// Structured output: copies each row's logits row into masked[r] (vocab wide),
// a constrained row's disallowed tokens as -infinity.
struct MaskKernelArgs {
  const float* logits;
  int64_t logits_stride;
  int64_t vocab;
  const DeviceRow* rows;
  const uint32_t* bitmask;  // [num_rows, words]
  int32_t words;
  float* masked;            // [num_rows, vocab]
};
void launch_mask_rows(const MaskKernelArgs& args, int32_t num_rows, cudaStream_t stream);

// One block per row: logit_bias and min_tokens, penalties, greedy argmax or temperature + min-p + top-k +
// top-p (radix selects) + Gumbel-max; raw logprobs and top-N; or, with
// args.probs, the processed distribution.
void launch_sample_rows(const SampleKernelArgs& args, int32_t num_rows, cudaStream_t stream);

}  // namespace pagedllm::sampler
