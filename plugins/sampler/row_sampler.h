#pragma once
// One row of logits -> a token, its log-probability and top-N alternatives,
// or the full processed distribution, on the CPU. The pipeline (vLLM V1 order):
//
//   raw logits --(raw log-softmax: reported logprobs)
//     -> logit_bias added; while fewer than min_tokens outputs, EOS / stop ids -> -inf
//     -> repetition penalty over prompt + output tokens (positive / p, negative * p)
//     -> frequency and presence penalties over output tokens (l -= f * count + p * [count > 0])
//     -> temperature < 1e-5: greedy argmax (ties -> lowest id), done
//     -> divide by temperature -> min-p -> top-k -> top-p -> Gumbel-max draw
// A PLLM_SAMPLE_ROW_SCORE row draws nothing: it reports its scored token's raw logprob.
//
// Every filter keeps a prefix of the candidates ordered by (logit desc, id
// asc), so the kept set is well defined even with ties. The arithmetic is
// sampling_math.h's, shared with the CUDA sampler. A RowSampler owns scratch
// buffers sized to the vocabulary and reuses them row after row.

#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"
#include "logit_adjustments.h"
#include "sampling_math.h"
#include "token_history.h"

namespace pagedllm::sampler {

class RowSampler {
 public:
  // Checks a row's parameters and token ids (throws pllm::Error).
  static void validate(const pllm_sample_row& row, int64_t vocab, int64_t num_logits_rows, int32_t row_index);

  // Whether log_sum_exp of the row is finite: no NaN, no +inf, one value above -inf.
  static bool finite_row(const float* logits, int64_t vocab);

  // Samples one row whose logits are finite_row(). top_ids/top_logprobs may be
  // null when top_capacity is 0.
  void sample(const pllm_sample_row& row, const float* logits, int64_t vocab, int32_t* token, float* logprob,
              int32_t top_capacity, int32_t* top_ids, float* top_logprobs);

  // Writes the processed distribution of one finite_row() into probs[0, vocab).
  void probabilities(const pllm_sample_row& row, const float* logits, int64_t vocab, float* probs);

 private:
  // Copies the raw logits into logits_ and applies logit_bias, min_tokens and the penalties.
  void penalize(const pllm_sample_row& row, const float* raw, int64_t vocab);
  // After penalize(), for a non-greedy row: scales by temperature and leaves in
  // kept_ the surviving ids in (logit desc, id asc) order, weights_ (exp(x -
  // max)) and kept_total_ their sum.
  void filter(const pllm_sampling_params& params, int64_t vocab);
  // The first largest of logits[0, vocab) (strict >: ties keep the lowest id).
  static int32_t argmax(const float* logits, int64_t vocab);
  // The sampled token of a row that does not score: penalties, greedy or filter + Gumbel-max.
  int32_t draw(const pllm_sample_row& row, const float* raw, int64_t vocab);

  std::vector<float> logits_;
  TokenHistory history_;
  std::vector<int32_t> banned_;  // min_tokens scratch
  std::vector<int32_t> kept_;
  std::vector<double> weights_;
  std::vector<int32_t> order_;  // top-N scratch when N is large
  double kept_total_ = 0;
};

}  // namespace pagedllm::sampler
