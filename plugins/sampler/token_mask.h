#pragma once
// Structured output's token masks (pllm_sample_batch.token_bitmask, SDK 2.1) on
// both devices: which rows are constrained, the checks, and the masking itself
// (a disallowed token's logit becomes -infinity before anything else reads it).

#include <cmath>
#include <cstdint>
#include <string>

#include "pagedllm/sdk.hpp"

namespace pagedllm::sampler {

inline bool has_token_mask(const pllm_sample_batch& batch) {
  return PLLM_HAS_FIELD(pllm_sample_batch, &batch, constrained_rows) && batch.token_bitmask != nullptr;
}

inline bool row_constrained(const pllm_sample_batch& batch, int64_t r) {
  return has_token_mask(batch) && (batch.constrained_rows == nullptr || batch.constrained_rows[r] != 0);
}

inline const uint32_t* mask_of(const pllm_sample_batch& batch, int64_t r) {
  return batch.token_bitmask + r * int64_t(batch.bitmask_words);
}

// A mask must cover the vocabulary exactly: ceil(vocab / 32) words a row.
inline void check_token_mask(const pllm_sample_batch& batch, int64_t vocab) {
  if (!has_token_mask(batch)) return;
  if (int64_t(batch.bitmask_words) != (vocab + 31) / 32) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "sampler: bitmask_words is " + std::to_string(batch.bitmask_words) +
                                                       ", but the vocabulary of " + std::to_string(vocab) +
                                                       " needs " + std::to_string((vocab + 31) / 32));
  }
}

inline bool token_allowed(const uint32_t* mask, int64_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; }

// dst[i] = src[i] where allowed, else -infinity.
inline void apply_token_mask(const float* src, const uint32_t* mask, int64_t vocab, float* dst) {
  for (int64_t i = 0; i < vocab; ++i) dst[i] = token_allowed(mask, i) ? src[i] : -INFINITY;
}

}  // namespace pagedllm::sampler
