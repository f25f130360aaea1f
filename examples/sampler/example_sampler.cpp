// example_sampler: a complete CPU sampler in one readable file. Every request
// parameter of pllm_sampling_params is honoured, in vLLM's order:
//
//   1. log-probabilities to report are of the RAW logits (log-softmax before
//      any penalty or temperature), like vLLM's default and the in-tree sampler;
//   2. repetition penalty over the distinct prompt + output tokens (positive
//      logits divided by it, negative ones multiplied);
//   3. frequency and presence penalties over the output tokens;
//   4. temperature ~ 0: greedy, the argmax (ties: the lowest id);
//   5. otherwise divide by the temperature, keep tokens with p >= min_p * p_max,
//      then the top_k best, then the smallest best-first prefix holding top_p
//      of the mass (best first = logit descending, id ascending);
//   6. draw one token by inverse CDF over the kept tokens (in id order, or
//      best first once top-k / top-p sorted them) with the uniform number
//      pllm::uniform01(seed, random_offset): a pure function of the request's
//      seed and the token's index, so a request samples the same tokens
//      whatever shares its batch. With the in-tree sampler's stream and order,
//      a seeded request gives the in-tree sampler's tokens.
//
// probabilities() (optional) returns the distribution of steps 2-5, which a
// speculator verifies drafts against. Options: none.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <pagedllm/sdk.hpp>
#include <pagedllm/sdk/cpp/counter_rng.hpp>
#include <string>
#include <vector>

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_sampler: " + message);
}

// Row r of the batch: rows are row_stride bytes apart (the caller's sizeof(pllm_sample_row)).
const pllm_sample_row& row_of(const pllm_sample_batch& batch, int32_t r) {
  return *reinterpret_cast<const pllm_sample_row*>(reinterpret_cast<const char*>(batch.rows) +
                                                   int64_t(r) * batch.row_stride);
}

bool is_greedy(const pllm_sampling_params& p) { return p.temperature < 1e-5f; }

// The tokens a row may be sampled from and their unnormalised weights.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> weights;  // indexed by id
  double total = 0.0;
};

class ExampleSampler : public pllm::SamplerPlugin {
 public:
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }
  };

  ExampleSampler(const Options&, const pllm_sampler_create_args& args) {
    if (args.device.type != PLLM_DEVICE_CPU)
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_sampler runs on the CPU only");
  }

  void sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
    const int64_t vocab = check(batch);
    if (batch.num_rows > 0 && !out.token_ids) invalid("null token_ids");
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = row_of(batch, r);
      const pllm_sampling_params& p = *row.params;
      const float* raw = static_cast<const float*>(batch.logits.data) + r * batch.logits.strides[0];
      const std::vector<float> logits = penalized(row, raw, vocab);

      int32_t token;
      if (is_greedy(p)) {
        token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
      } else {
        const Candidates c = filtered(p, logits);
        const double target = pllm::uniform01(p.seed, row.random_offset) * c.total;
        token = c.ids.back();  // rounding can leave `target` at the very top
        double cumulative = 0.0;
        for (const int32_t id : c.ids) {
          cumulative += c.weights[std::size_t(id)];
          if (target < cumulative) {
            token = id;
            break;
          }
        }
      }
      out.token_ids[r] = token;

      // Log-probabilities of the raw logits: the sampled token's, and the best N alternatives.
      const double lse = log_sum_exp(raw, vocab);
      if (out.logprobs) out.logprobs[r] = float(double(raw[token]) - lse);
      if (out.max_top_logprobs > 0) {
        int32_t* top_ids = out.top_token_ids + int64_t(r) * out.max_top_logprobs;
        float* top_logprobs = out.top_logprobs + int64_t(r) * out.max_top_logprobs;
        const int32_t n = int32_t(std::min<int64_t>(std::min(out.max_top_logprobs, p.num_top_logprobs), vocab));
        std::vector<int32_t> order(static_cast<std::size_t>(vocab));
        for (int32_t i = 0; i < vocab; ++i) order[std::size_t(i)] = i;
        std::partial_sort(order.begin(), order.begin() + n, order.end(),
                          [raw](int32_t a, int32_t b) { return raw[a] > raw[b] || (raw[a] == raw[b] && a < b); });
        for (int32_t j = 0; j < out.max_top_logprobs; ++j) {
          top_ids[j] = j < n ? order[std::size_t(j)] : -1;
          top_logprobs[j] =
              j < n ? float(double(raw[order[std::size_t(j)]]) - lse) : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }

  void probabilities(const pllm_sample_batch& batch, pllm_tensor& out_probs) {
    const int64_t vocab = check(batch);
    if (out_probs.dtype != PLLM_DTYPE_F32 || out_probs.device.type != PLLM_DEVICE_CPU || out_probs.ndim != 2 ||
        out_probs.shape[0] != batch.num_rows || out_probs.shape[1] != vocab || out_probs.strides[1] != 1 ||
        (batch.num_rows > 0 && !out_probs.data)) {
      invalid("out_probs must be a CPU f32 [num_rows, vocab] tensor with contiguous rows");
    }
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = row_of(batch, r);
      const float* raw = static_cast<const float*>(batch.logits.data) + r * batch.logits.strides[0];
      float* probs = static_cast<float*>(out_probs.data) + r * out_probs.strides[0];
      const std::vector<float> logits = penalized(row, raw, vocab);
      std::fill(probs, probs + vocab, 0.0f);
      if (is_greedy(*row.params)) {
        probs[std::max_element(logits.begin(), logits.end()) - logits.begin()] = 1.0f;
        continue;
      }
      const Candidates c = filtered(*row.params, logits);
      for (const int32_t id : c.ids) probs[id] = float(c.weights[std::size_t(id)] / c.total);
    }
  }

 private:
  // Validates the batch and every row's parameters and history; returns the vocabulary size.
  static int64_t check(const pllm_sample_batch& batch) {
    const pllm_tensor& l = batch.logits;
    if (l.dtype != PLLM_DTYPE_F32) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_sampler: logits must be f32");
    if (l.device.type != PLLM_DEVICE_CPU) invalid("logits must be in host memory");
    if (batch.num_rows < 0 || l.ndim != 2 || l.shape[0] != batch.num_rows || l.shape[1] <= 0 || l.strides[1] != 1) {
      invalid("logits must be [num_rows, vocab] with contiguous rows");
    }
    if (batch.num_rows > 0 && (!l.data || !batch.rows || batch.row_stride < sizeof(pllm_sample_row))) {
      invalid("null logits or rows, or a row_stride smaller than a row");
    }
    const int64_t vocab = l.shape[1];
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = row_of(batch, r);
      const std::string where = "row " + std::to_string(r) + ": ";
      if (!row.params) invalid(where + "null params");
      const pllm_sampling_params& p = *row.params;
      if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
        invalid(where + "temperature must be finite and >= 0");
      if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) invalid(where + "top_p must be in (0, 1]");
      if (p.top_k < 0) invalid(where + "top_k must be >= 0 (0 = off)");
      if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) invalid(where + "min_p must be in [0, 1]");
      if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
        invalid(where + "repetition_penalty must be finite and > 0");
      }
      if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
        invalid(where + "presence_penalty and frequency_penalty must be finite");
      }
      for (const auto& [ids, n] : {std::pair{row.prompt_token_ids, row.num_prompt_tokens},
                                   std::pair{row.output_token_ids, row.num_output_tokens}}) {
        if (n < 0 || (n > 0 && !ids)) invalid(where + "bad token history");
        for (int32_t i = 0; i < n; ++i) {
          if (ids[i] < 0 || ids[i] >= vocab)
            invalid(where + "history token " + std::to_string(ids[i]) + " is outside the vocabulary");
        }
      }
      const float* raw = static_cast<const float*>(l.data) + r * l.strides[0];
      if (!std::isfinite(log_sum_exp(raw, vocab))) invalid(where + "logits contain NaN or +inf, or are all -inf");
    }
    return vocab;
  }

  static double log_sum_exp(const float* x, int64_t n) {
    const float m = *std::max_element(x, x + n);
    if (!std::isfinite(m)) return m;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - double(m));
    return double(m) + std::log(sum);
  }

  // Steps 2 and 3: the repetition, frequency and presence penalties.
  static std::vector<float> penalized(const pllm_sample_row& row, const float* raw, int64_t vocab) {
    const pllm_sampling_params& p = *row.params;
    std::vector<float> logits(raw, raw + vocab);
    std::vector<int32_t> output_count(std::size_t(vocab), 0);
    std::vector<bool> seen(std::size_t(vocab), false);
    for (int32_t i = 0; i < row.num_prompt_tokens; ++i) seen[std::size_t(row.prompt_token_ids[i])] = true;
    for (int32_t i = 0; i < row.num_output_tokens; ++i) {
      seen[std::size_t(row.output_token_ids[i])] = true;
      ++output_count[std::size_t(row.output_token_ids[i])];
    }
    for (int64_t id = 0; id < vocab; ++id) {
      float& l = logits[std::size_t(id)];
      if (seen[std::size_t(id)] && p.repetition_penalty != 1.0f)
        l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
      const int32_t count = output_count[std::size_t(id)];
      if (count > 0) l -= p.frequency_penalty * float(count) + p.presence_penalty;
    }
    return logits;
  }

  // Step 5: temperature, min-p, top-k, top-p.
  static Candidates filtered(const pllm_sampling_params& p, std::vector<float> logits) {
    const int64_t vocab = int64_t(logits.size());
    for (float& l : logits) l /= p.temperature;
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    Candidates c;
    c.weights.resize(std::size_t(vocab));
    for (int32_t id = 0; id < vocab; ++id) {
      const double w = std::exp(double(logits[std::size_t(id)]) - double(max_logit));  // p_id / p_max
      c.weights[std::size_t(id)] = w;
      if (w > 0.0 && w >= double(p.min_p)) c.ids.push_back(id);
    }
    const auto best_first = [&](int32_t a, int32_t b) {
      return logits[std::size_t(a)] > logits[std::size_t(b)] ||
             (logits[std::size_t(a)] == logits[std::size_t(b)] && a < b);
    };
    const bool top_k = p.top_k > 0 && std::size_t(p.top_k) < c.ids.size();
    const bool top_p = p.top_p < 1.0f;
    if (top_k || top_p) std::sort(c.ids.begin(), c.ids.end(), best_first);
    if (top_k) c.ids.resize(std::size_t(p.top_k));
    if (top_p) {
      double mass = 0.0;
      for (const int32_t id : c.ids) mass += c.weights[std::size_t(id)];
      double cumulative = 0.0;
      std::size_t keep = c.ids.size();
      for (std::size_t i = 0; i < c.ids.size(); ++i) {
        cumulative += c.weights[std::size_t(c.ids[i])];
        if (cumulative >= double(p.top_p) * mass) {
          keep = i + 1;
          break;
        }
      }
      c.ids.resize(keep);
    }
    for (const int32_t id : c.ids) c.total += c.weights[std::size_t(id)];
    return c;
  }
};

}  // namespace

PAGEDLLM_PLUGIN(
    ExampleSampler, "example_sampler", "1.0.0",
    "Example: a CPU sampler with every request parameter (penalties, temperature, min-p, top-k, top-p, seed, logprobs)")
