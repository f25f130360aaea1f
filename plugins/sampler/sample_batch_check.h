#pragma once
// The argument checks both samplers (CPU and CUDA) make before reading a row:
// they throw pllm::Error naming what is wrong.

#include <cstdint>
#include <string>

#include "pagedllm/sdk.hpp"
#include "row_sampler.h"

namespace pagedllm::sampler {

[[noreturn]] inline void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "sampler: " + message);
}

inline const pllm_sample_row& row_of(const pllm_sample_batch& batch, int64_t r) { return pllm::sample_row(batch, r); }

// Validates the batch and every row; returns the vocabulary size. `device_ok`
// says whether the sampler reads logits on that device.
template <class DeviceOk>
int64_t check_batch(const pllm_sample_batch& batch, DeviceOk device_ok, const char* where) {
  if (!PLLM_HAS_FIELD(pllm_sample_batch, &batch, logits)) invalid("batch struct_size too small");
  if (batch.num_rows < 0) invalid("negative num_rows");
  const pllm_tensor& l = pllm::require(batch.logits, "sampler: batch logits");
  if (l.dtype != PLLM_DTYPE_F32) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "sampler: logits must be f32");
  if (!device_ok(l.device)) invalid(std::string("logits must be in ") + where);
  if (l.ndim != 2 || l.shape[0] < 0 || l.shape[1] <= 0 || l.strides[1] != 1 || l.strides[0] < l.shape[1]) {
    invalid("logits must be [num_logits_rows, vocab] with contiguous rows");
  }
  if (batch.num_rows == 0) return l.shape[1];
  if (!l.data || !batch.rows) invalid("null logits data or rows");
  if (batch.row_stride < sizeof(pllm_sample_row)) {
    invalid("row_stride " + std::to_string(batch.row_stride) + " is smaller than a row");
  }
  for (int32_t r = 0; r < batch.num_rows; ++r) RowSampler::validate(row_of(batch, r), l.shape[1], l.shape[0], r);
  return l.shape[1];
}

inline void check_sample_output(const pllm_sample_batch& batch, const pllm_sample_output& out) {
  if (!PLLM_HAS_FIELD(pllm_sample_output, &out, row_status)) invalid("output struct_size too small");
  if (batch.num_rows > 0 && !out.token_ids) invalid("null output token_ids");
  if (out.max_top_logprobs < 0) invalid("max_top_logprobs must be >= 0");
  if (out.max_top_logprobs > 0 && (!out.top_token_ids || !out.top_logprobs)) {
    invalid("max_top_logprobs > 0 but null top_token_ids or top_logprobs");
  }
}

template <class DeviceOk>
void check_probabilities_output(const pllm_sample_batch& batch, int64_t vocab, const pllm_probabilities_output& out,
                                DeviceOk device_ok, const char* where) {
  if (!PLLM_HAS_FIELD(pllm_probabilities_output, &out, row_status)) invalid("probabilities output struct_size too small");
  const pllm_tensor& p = pllm::require(out.probs, "sampler: probabilities output probs");
  if (p.dtype != PLLM_DTYPE_F32 || p.ndim != 2 || p.shape[0] != batch.num_rows || p.shape[1] != vocab ||
      p.strides[1] != 1 || p.strides[0] < vocab || !device_ok(p.device)) {
    invalid(std::string("probs must be an f32 [num_rows, vocab] tensor with contiguous rows in ") + where);
  }
  if (batch.num_rows > 0 && !p.data) invalid("null probs data");
}

// A row with non-finite logits: recorded in row_status, or an error for the call when there is none.
inline void non_finite_row(int32_t* row_status, int64_t r) {
  if (!row_status) invalid("row " + std::to_string(r) + ": logits contain NaN or +inf, or are all -inf");
  row_status[r] = PLLM_SAMPLE_NON_FINITE_LOGITS;
}

}  // namespace pagedllm::sampler
