#pragma once
// The routing of a mixture-of-experts layer (Mixtral, Qwen3-MoE), as
// transformers computes it, shared by every backend: from the router's f32
// logits [tokens, experts], p = softmax(logits) in f32, each row's k largest
// (the lower expert first on a tie), divided by their sum when `normalize`;
// then the rows grouped by expert, so that each expert runs over only the rows
// routed to it.

#include <cstdint>
#include <vector>

namespace pagedllm::llama {

struct ExpertRouting {
  // Expert e's rows are rows[offsets[e], offsets[e + 1]), each with its weight; a row appears under k experts.
  std::vector<int32_t> offsets, rows;
  std::vector<float> weights;

  void route(const float* logits, int64_t tokens, int64_t experts, int64_t top_k, bool normalize);

 private:
  std::vector<int32_t> chosen_, order_, fill_;
  std::vector<float> chosen_weights_, probabilities_;
};

}  // namespace pagedllm::llama
