#pragma once
// A row's logit_bias and min_tokens (sdk/sampler.h, step 0): the distinct
// tokens whose logit changes before the penalties, each with its bias or a
// ban (-infinity). Shared by the CPU and CUDA samplers, so both apply the same
// float additions in the same places.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"

namespace pagedllm::sampler {

inline bool has_logit_bias(const pllm_sampling_params& p) {
  return PLLM_HAS_FIELD(pllm_sampling_params, &p, logit_bias_values) && p.num_logit_bias > 0;
}

// Whether the row's min_tokens bans tokens at this position.
inline bool min_tokens_bans(const pllm_sample_row& row) {
  const pllm_sampling_params& p = *row.params;
  return PLLM_HAS_FIELD(pllm_sampling_params, &p, min_tokens_banned_ids) && p.num_min_tokens_banned_ids > 0 &&
         row.num_output_tokens < p.min_tokens;
}

// The token a PLLM_SAMPLE_ROW_SCORE row reports instead of sampling; -1 for a row that samples.
inline int32_t scored_token(const pllm_sample_row& row) {
  return PLLM_HAS_FIELD(pllm_sample_row, &row, scored_token_id) && (row.flags & PLLM_SAMPLE_ROW_SCORE)
             ? row.scored_token_id
             : -1;
}

inline bool has_logit_adjustments(const pllm_sample_row& row) {
  return has_logit_bias(*row.params) || min_tokens_bans(row);
}

// Calls visit(id, bias, banned) once per distinct adjusted token of the row:
// first the biased tokens (banned or not), then banned tokens without a bias.
// `banned_scratch` is reused between rows.
template <class Visit>
void for_each_logit_adjustment(const pllm_sample_row& row, std::vector<int32_t>& banned_scratch, Visit visit) {
  const pllm_sampling_params& p = *row.params;
  banned_scratch.clear();
  if (min_tokens_bans(row)) {
    banned_scratch.assign(p.min_tokens_banned_ids, p.min_tokens_banned_ids + p.num_min_tokens_banned_ids);
    std::sort(banned_scratch.begin(), banned_scratch.end());
    banned_scratch.erase(std::unique(banned_scratch.begin(), banned_scratch.end()), banned_scratch.end());
  }
  const auto is_banned = [&](int32_t id) {
    return std::binary_search(banned_scratch.begin(), banned_scratch.end(), id);
  };
  const bool biased = has_logit_bias(p);
  for (int32_t i = 0; biased && i < p.num_logit_bias; ++i) {
    const int32_t id = p.logit_bias_token_ids[i];
    visit(id, p.logit_bias_values[i], is_banned(id));
  }
  for (const int32_t id : banned_scratch) {
    const bool also_biased =
        biased && std::find(p.logit_bias_token_ids, p.logit_bias_token_ids + p.num_logit_bias, id) !=
                      p.logit_bias_token_ids + p.num_logit_bias;
    if (!also_biased) visit(id, 0.0f, true);
  }
}

}  // namespace pagedllm::sampler
