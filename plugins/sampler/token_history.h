#pragma once
// The distinct tokens of a row's prompt + output, each with its count in the
// output: what the repetition, frequency and presence penalties read. Shared by
// the CPU and CUDA samplers.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"

namespace pagedllm::sampler {

// Whether any penalty reads the row's history.
inline bool has_penalties(const pllm_sampling_params& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

class TokenHistory {
 public:
  // Calls visit(token_id, output_count) once per distinct token of the row's
  // prompt and output, in first-seen order, and returns how many there were.
  // The per-vocabulary scratch is reset through the visited ids, so a row costs
  // O(history), not O(vocab).
  template <class Visit>
  int32_t for_each_token(const pllm_sample_row& row, int64_t vocab, Visit visit) {
    if (counts_.size() < std::size_t(vocab)) {
      counts_.resize(std::size_t(vocab), 0);
      in_history_.resize(std::size_t(vocab), 0);
    }
    touched_.clear();
    auto touch = [&](int32_t id) {
      if (!in_history_[std::size_t(id)]) {
        in_history_[std::size_t(id)] = 1;
        touched_.push_back(id);
      }
    };
    for (int32_t i = 0; i < row.num_prompt_tokens; ++i) touch(row.prompt_token_ids[i]);
    for (int32_t i = 0; i < row.num_output_tokens; ++i) {
      touch(row.output_token_ids[i]);
      ++counts_[std::size_t(row.output_token_ids[i])];
    }
    for (int32_t id : touched_) {
      visit(id, counts_[std::size_t(id)]);
      in_history_[std::size_t(id)] = 0;
      counts_[std::size_t(id)] = 0;
    }
    return int32_t(touched_.size());
  }

 private:
  std::vector<int32_t> counts_;
  std::vector<uint8_t> in_history_;
  std::vector<int32_t> touched_;
};

}  // namespace pagedllm::sampler
