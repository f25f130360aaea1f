#include "row_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "pagedllm/sdk/cpp/error.hpp"

namespace pagedllm::sampler {
namespace {

[[noreturn]] void invalid(int32_t row, const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "sampler: row " + std::to_string(row) + ": " + message);
}

// log(sum(exp(raw))), stable: max first, then a double sum.
double log_sum_exp(const float* raw, int64_t vocab) {
  float m = raw[0];
  for (int64_t i = 1; i < vocab; ++i) m = std::max(m, raw[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(raw[i]) - double(m));
  return double(m) + std::log(sum);
}

}  // namespace

// log_sum_exp(raw) is finite exactly when no logit is NaN or +inf and one is
// above -inf; this checks that in one pass without the exponentials.
bool RowSampler::finite_row(const float* raw, int64_t vocab) {
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < vocab; ++i) {
    nan |= raw[i] != raw[i];
    m = std::max(m, raw[i]);
  }
  return !nan && std::isfinite(m);
}

void RowSampler::validate(const pllm_sample_row& row, int64_t vocab, int64_t num_logits_rows, int32_t index) {
  if (!PLLM_HAS_FIELD(pllm_sample_row, &row, logits_row)) invalid(index, "struct_size too small");
  if (row.logits_row < 0 || row.logits_row >= num_logits_rows) {
    invalid(index, "logits_row " + std::to_string(row.logits_row) + " is outside the logits' rows [0, " +
                       std::to_string(num_logits_rows) + ")");
  }
  if (!row.params) invalid(index, "null params");
  const pllm_sampling_params& p = *row.params;
  if (!PLLM_HAS_FIELD(pllm_sampling_params, &p, num_top_logprobs)) invalid(index, "params struct_size too small");
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    invalid(index, "temperature must be finite and >= 0, got " + std::to_string(p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) invalid(index, "top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) invalid(index, "top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) invalid(index, "min_p must be in [0, 1], got " + std::to_string(p.min_p));
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    invalid(index, "repetition_penalty must be finite and > 0, got " + std::to_string(p.repetition_penalty));
  }
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
    invalid(index, "presence_penalty and frequency_penalty must be finite");
  }
  if (p.num_top_logprobs < 0) invalid(index, "num_top_logprobs must be >= 0");
  auto check_ids = [&](const int32_t* ids, int32_t n, const char* what) {
    if (n < 0 || (n > 0 && !ids)) invalid(index, std::string("bad ") + what + " token list");
    for (int32_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= vocab) {
        invalid(index, std::string(what) + " token " + std::to_string(i) + " = " + std::to_string(ids[i]) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
  };
  if (PLLM_HAS_FIELD(pllm_sample_row, &row, scored_token_id) && (row.flags & PLLM_SAMPLE_ROW_SCORE) &&
      (row.scored_token_id < 0 || row.scored_token_id >= vocab)) {
    invalid(index, "scored token " + std::to_string(row.scored_token_id) + " is outside the vocabulary [0, " +
                       std::to_string(vocab) + ")");
  }
  check_ids(row.prompt_token_ids, row.num_prompt_tokens, "prompt");
  check_ids(row.output_token_ids, row.num_output_tokens, "output");
  if (PLLM_HAS_FIELD(pllm_sampling_params, &p, logit_bias_values)) {
    check_ids(p.logit_bias_token_ids, p.num_logit_bias, "logit_bias");
    if (p.num_logit_bias > 0 && !p.logit_bias_values) invalid(index, "null logit_bias_values");
    std::vector<int32_t> ids(p.logit_bias_token_ids, p.logit_bias_token_ids + std::max(0, p.num_logit_bias));
    std::sort(ids.begin(), ids.end());
    if (const auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end()) {
      invalid(index, "logit_bias lists token " + std::to_string(*twice) + " twice");
    }
    for (int32_t i = 0; i < p.num_logit_bias; ++i) {
      if (!std::isfinite(p.logit_bias_values[i])) {
        invalid(index, "logit_bias value " + std::to_string(i) + " is not finite");
      }
    }
  }
  if (PLLM_HAS_FIELD(pllm_sampling_params, &p, min_tokens_banned_ids)) {
    if (p.min_tokens < 0) invalid(index, "min_tokens must be >= 0, got " + std::to_string(p.min_tokens));
    check_ids(p.min_tokens_banned_ids, p.num_min_tokens_banned_ids, "min_tokens banned");
  }
}

void RowSampler::penalize(const pllm_sample_row& row, const float* raw, int64_t vocab) {
  logits_.assign(raw, raw + vocab);
  const pllm_sampling_params& p = *row.params;
  if (has_logit_adjustments(row)) {
    for_each_logit_adjustment(row, banned_, [&](int32_t id, float bias, bool banned) {
      float& l = logits_[std::size_t(id)];
      l = adjusted_logit(l, bias, banned);
    });
  }
  if (!has_penalties(p)) return;
  history_.for_each_token(row, vocab, [&](int32_t id, int32_t output_count) {
    float& l = logits_[std::size_t(id)];
    l = penalized(l, p.repetition_penalty, p.frequency_penalty, p.presence_penalty, output_count);
  });
}

int32_t RowSampler::argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  }
  return int32_t(best);
}

void RowSampler::filter(const pllm_sampling_params& p, int64_t vocab) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    logits_[std::size_t(i)] /= p.temperature;
    max_logit = std::max(max_logit, logits_[std::size_t(i)]);
  }
  if (weights_.size() < std::size_t(vocab)) weights_.resize(std::size_t(vocab));
  kept_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    const double w = weight(logits_[std::size_t(i)], max_logit);
    weights_[std::size_t(i)] = w;
    if (passes_min_p(w, p.min_p)) kept_.push_back(int32_t(i));
  }
  auto before = [&](int32_t a, int32_t b) {
    return ranks_before(logits_[std::size_t(a)], a, logits_[std::size_t(b)], b);
  };
  const bool top_k = p.top_k > 0 && std::size_t(p.top_k) < kept_.size();
  const bool top_p = p.top_p < 1.0f;
  if (top_k) {
    // O(V) selection instead of a full sort; only the k survivors get sorted.
    std::nth_element(kept_.begin(), kept_.begin() + (p.top_k - 1), kept_.end(), before);
    kept_.resize(std::size_t(p.top_k));
  }
  if (top_p) {
    std::sort(kept_.begin(), kept_.end(), before);
    // The smallest prefix whose fixed-point mass reaches top_p of the kept
    // mass (always at least one token): exact integer sums, as on CUDA.
    uint64_t total = 0;
    for (int32_t id : kept_) total += fixed_mass(weights_[std::size_t(id)]);
    const uint64_t target = top_p_target(p.top_p, total);
    uint64_t cumulative = 0;
    std::size_t keep = kept_.size();
    for (std::size_t i = 0; i < kept_.size(); ++i) {
      cumulative += fixed_mass(weights_[std::size_t(kept_[i])]);
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
    kept_.resize(keep);
  }
  kept_total_ = 0;
  for (int32_t id : kept_) kept_total_ += weights_[std::size_t(id)];
}

int32_t RowSampler::draw(const pllm_sample_row& row, const float* raw, int64_t vocab) {
  const pllm_sampling_params& p = *row.params;
  const bool greedy = p.temperature < kGreedyTemperature;
  // A greedy row with nothing to adjust (the common decode) reads the raw row: no copy of the vocabulary.
  if (greedy && !has_logit_adjustments(row) && !has_penalties(p)) return argmax(raw, vocab);
  penalize(row, raw, vocab);
  if (greedy) return argmax(logits_.data(), vocab);
  filter(p, vocab);
  // Gumbel-max over the kept tokens (sampling_math.h): order-independent.
  const uint64_t key = row_key(p.seed, row.random_offset);
  int32_t chosen = kept_.front();
  double best = -std::numeric_limits<double>::infinity();
  for (int32_t id : kept_) {
    const double score = double(logits_[std::size_t(id)]) + gumbel_noise(key, id);
    if (score > best || (score == best && id < chosen)) {
      best = score;
      chosen = id;
    }
  }
  return chosen;
}

void RowSampler::sample(const pllm_sample_row& row, const float* raw, int64_t vocab, int32_t* token, float* logprob,
                        int32_t top_capacity, int32_t* top_ids, float* top_logprobs) {
  const pllm_sampling_params& p = *row.params;
  // The raw log-softmax is only for reported log-probabilities; a caller that
  // asks for none (a speculator's draft and verify rows) skips its exponentials.
  const bool reports_logprobs = logprob != nullptr || top_capacity > 0;
  const double lse = reports_logprobs ? log_sum_exp(raw, vocab) : 0.0;
  // A scoring row (prompt logprobs) reports its given token; only the others draw.
  const int32_t scored = scored_token(row);
  const int32_t chosen = scored >= 0 ? scored : draw(row, raw, vocab);
  *token = chosen;
  if (logprob) *logprob = float(double(raw[chosen]) - lse);

  if (top_capacity <= 0) return;
  const int32_t n = std::min(top_capacity, p.num_top_logprobs);
  // The n best raw logits by (value desc, id asc): a bounded insertion sort,
  // O(vocab) for the small n the API allows by default; a partial sort for the
  // large n an engine with max_logprobs -1 allows (the whole vocabulary).
  constexpr int32_t kInsertionSortMax = 64;
  int32_t count = 0;
  if (n > kInsertionSortMax) {
    order_.resize(std::size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) order_[std::size_t(i)] = int32_t(i);
    count = int32_t(std::min<int64_t>(n, vocab));
    std::partial_sort(order_.begin(), order_.begin() + count, order_.end(), [raw](int32_t a, int32_t b) {
      return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
    });
    std::copy(order_.begin(), order_.begin() + count, top_ids);
  }
  for (int64_t i = 0; i < vocab && n > 0 && n <= kInsertionSortMax; ++i) {
    const float v = raw[i];
    if (count == n && !(v > raw[top_ids[n - 1]])) continue;
    int32_t j = count < n ? count++ : n - 1;
    while (j > 0 && raw[top_ids[j - 1]] < v) {
      top_ids[j] = top_ids[j - 1];
      --j;
    }
    top_ids[j] = int32_t(i);
  }
  for (int32_t j = 0; j < count; ++j) top_logprobs[j] = float(double(raw[top_ids[j]]) - lse);
  for (int32_t j = count; j < top_capacity; ++j) {
    top_ids[j] = -1;
    top_logprobs[j] = -std::numeric_limits<float>::infinity();
  }
}

void RowSampler::probabilities(const pllm_sample_row& row, const float* raw, int64_t vocab, float* probs) {
  const pllm_sampling_params& p = *row.params;
  penalize(row, raw, vocab);
  std::fill(probs, probs + vocab, 0.0f);
  if (p.temperature < kGreedyTemperature) {
    probs[argmax(logits_.data(), vocab)] = 1.0f;
    return;
  }
  filter(p, vocab);
  for (int32_t id : kept_) probs[id] = float(weights_[std::size_t(id)] / kept_total_);
}

}  // namespace pagedllm::sampler
