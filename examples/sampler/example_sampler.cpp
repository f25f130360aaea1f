// example_sampler: a complete CPU sampler in one readable file. Every request
// parameter of pllm_sampling_params is honoured, in vLLM's order (sdk/sampler.h):
//
//   1. log-probabilities to report are of the RAW logits (log-softmax before
//      any penalty or temperature), like vLLM's default and the in-tree sampler;
//   1b. (SDK 2.1) logit_bias added to the listed tokens' logits; while the row
//      has fewer than min_tokens output tokens, min_tokens_banned_ids get -inf;
//   2. repetition penalty over the distinct prompt + output tokens (positive
//      logits divided by it, negative ones multiplied);
//   3. frequency and presence penalties over the output tokens;
//   4. temperature < 1e-5: greedy, the argmax (ties: the lowest id);
//   5. otherwise divide by the temperature, keep tokens with p >= min_p * p_max,
//      then the top_k best, then the smallest best-first prefix whose mass
//      reaches top_p of the kept mass (best first = logit descending, id
//      ascending; the masses exp(x - x_max) are added in 32.32 fixed point);
//   (2.1) a PLLM_SAMPLE_ROW_SCORE row draws nothing: it reports its scored token;
//   6. draw one token by the Gumbel-max trick: the kept token with the largest
//      x_i / T + g_i, where g_i = -log(-log(u_i)) and u_i is a pure function of
//      (seed, random_offset, token id). That is a draw from softmax(x / T) over
//      the kept tokens, and nothing else in the batch can change it.
//
// Steps 5 and 6 are the in-tree sampler's, as plugins/sampler/README.md
// documents them (the same noise, the same fixed-point cut), so a seeded
// request samples exactly the in-tree sampler's tokens.
//
// SDK 2.0: the logits arrive as `const pllm_tensor*` [num_logits_rows, vocab],
// and each row names the logits row it samples (rows may share one). A row
// whose raw logits hold a NaN or +inf, or are all -inf, is a model fault: it is
// flagged PLLM_SAMPLE_NON_FINITE_LOGITS in out.row_status (token -1) and the
// other rows are sampled; without row_status the call fails.
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
#include <utility>
#include <vector>

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_sampler: " + message);
}

bool is_greedy(const pllm_sampling_params& p) { return p.temperature < 1e-5f; }

// The Gumbel noise of token `id` in a row's draw. The row's key is the
// random_offset-th output of the request's SplitMix64 stream (pllm::random_bits);
// the token's uniform u in (0, 1) is the top 53 bits of
// mix64(key ^ (id + 1) * 0xd1b54a32d192ed03), plus half an ulp.
double gumbel_noise(uint64_t key, int32_t id) {
  const uint64_t bits = pllm::mix64(key ^ (uint64_t(uint32_t(id)) + 1) * 0xd1b54a32d192ed03ull);
  const double u = (double(bits >> 11) + 0.5) * 0x1p-53;
  return -std::log(-std::log(u));
}

// A weight in [0, 1] in 32.32 fixed point. top-p adds these as integers, whose
// sum does not depend on the order of the additions (a GPU adds in parallel).
uint64_t fixed_mass(double w) { return uint64_t(w * 0x1p32 + 0.5); }

// The tokens a row may be sampled from and their unnormalised weights.
struct Candidates {
  std::vector<float> logits;    // after penalties and temperature, indexed by id
  std::vector<int32_t> ids;     // the kept tokens
  std::vector<double> weights;  // exp(logit - max logit), indexed by id
  double total = 0.0;           // the kept tokens' weight
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
    if (!PLLM_HAS_FIELD(pllm_sample_output, &out, row_status)) invalid("output struct_size too small");
    if (batch.num_rows > 0 && !out.token_ids) invalid("null token_ids");
    if (out.max_top_logprobs < 0 || (out.max_top_logprobs > 0 && (!out.top_token_ids || !out.top_logprobs))) {
      invalid("bad max_top_logprobs, or null top_token_ids or top_logprobs");
    }
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = pllm::sample_row(batch, r);
      const pllm_sampling_params& p = *row.params;
      const float* raw = logits_of(batch, row);
      int32_t* top_ids = out.top_token_ids + int64_t(r) * out.max_top_logprobs;
      float* top_logprobs = out.top_logprobs + int64_t(r) * out.max_top_logprobs;

      // The raw log-softmax's normaliser; not finite exactly when the row is faulty.
      const double lse = log_sum_exp(raw, vocab);
      if (!std::isfinite(lse)) {
        non_finite_row(out.row_status, r);
        out.token_ids[r] = -1;
        if (out.logprobs) out.logprobs[r] = -std::numeric_limits<float>::infinity();
        for (int32_t j = 0; j < out.max_top_logprobs; ++j) {
          top_ids[j] = -1;
          top_logprobs[j] = -std::numeric_limits<float>::infinity();
        }
        continue;
      }
      if (out.row_status) out.row_status[r] = PLLM_SAMPLE_OK;

      const std::vector<float> logits = penalized(row, raw, vocab);
      int32_t token;
      if (PLLM_HAS_FIELD(pllm_sample_row, &row, scored_token_id) && (row.flags & PLLM_SAMPLE_ROW_SCORE)) {
        token = row.scored_token_id;  // a scoring row (prompt logprobs): report the given token
      } else if (is_greedy(p)) {
        token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
      } else {
        // Gumbel-max over the kept tokens; ties (vanishingly rare) go to the lowest id.
        const Candidates c = filtered(p, logits);
        const uint64_t key = pllm::random_bits(p.seed, row.random_offset);
        token = c.ids.front();
        double best = -std::numeric_limits<double>::infinity();
        for (const int32_t id : c.ids) {
          const double score = double(c.logits[std::size_t(id)]) + gumbel_noise(key, id);
          if (score > best || (score == best && id < token)) {
            best = score;
            token = id;
          }
        }
      }
      out.token_ids[r] = token;

      // Log-probabilities of the raw logits: the sampled token's, and the best N alternatives.
      if (out.logprobs) out.logprobs[r] = float(double(raw[token]) - lse);
      if (out.max_top_logprobs > 0) {
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

  void probabilities(const pllm_sample_batch& batch, const pllm_probabilities_output& out) {
    const int64_t vocab = check(batch);
    if (!PLLM_HAS_FIELD(pllm_probabilities_output, &out, row_status)) invalid("output struct_size too small");
    const pllm_tensor& out_probs = pllm::require(out.probs, "example_sampler: probabilities output");
    if (out_probs.dtype != PLLM_DTYPE_F32 || out_probs.device.type != PLLM_DEVICE_CPU || out_probs.ndim != 2 ||
        out_probs.shape[0] != batch.num_rows || out_probs.shape[1] != vocab || out_probs.strides[1] != 1 ||
        out_probs.strides[0] < vocab || (batch.num_rows > 0 && !out_probs.data)) {
      invalid("probs must be a CPU f32 [num_rows, vocab] tensor with contiguous rows");
    }
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = pllm::sample_row(batch, r);
      const float* raw = logits_of(batch, row);
      float* probs = static_cast<float*>(out_probs.data) + r * out_probs.strides[0];
      std::fill(probs, probs + vocab, 0.0f);
      if (!std::isfinite(log_sum_exp(raw, vocab))) {
        non_finite_row(out.row_status, r);  // its probabilities stay zeros
        continue;
      }
      if (out.row_status) out.row_status[r] = PLLM_SAMPLE_OK;
      const std::vector<float> logits = penalized(row, raw, vocab);
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
    if (!PLLM_HAS_FIELD(pllm_sample_batch, &batch, logits)) invalid("batch struct_size too small");
    // The logits are held by pointer (SDK 2.0): require() checks the tensor has its 2.0 fields.
    const pllm_tensor& l = pllm::require(batch.logits, "example_sampler: logits");
    if (l.dtype != PLLM_DTYPE_F32) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_sampler: logits must be f32");
    if (l.device.type != PLLM_DEVICE_CPU) invalid("logits must be in host memory");
    if (batch.num_rows < 0 || l.ndim != 2 || l.shape[0] < 0 || l.shape[1] <= 0 || l.strides[1] != 1 ||
        l.strides[0] < l.shape[1]) {
      invalid("logits must be [num_logits_rows, vocab] with contiguous rows");
    }
    if (batch.num_rows > 0 && (!l.data || !batch.rows || batch.row_stride < sizeof(pllm_sample_row))) {
      invalid("null logits or rows, or a row_stride smaller than a row");
    }
    const int64_t vocab = l.shape[1];
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const pllm_sample_row& row = pllm::sample_row(batch, r);
      const std::string where = "row " + std::to_string(r) + ": ";
      if (!PLLM_HAS_FIELD(pllm_sample_row, &row, logits_row)) invalid(where + "struct_size too small");
      if (row.logits_row < 0 || row.logits_row >= l.shape[0]) {
        invalid(where + "logits_row " + std::to_string(row.logits_row) + " is outside the logits' rows");
      }
      if (!row.params || !PLLM_HAS_FIELD(pllm_sampling_params, row.params, num_top_logprobs)) {
        invalid(where + "null params, or params struct_size too small");
      }
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
      if (p.num_top_logprobs < 0) invalid(where + "num_top_logprobs must be >= 0");
      if (PLLM_HAS_FIELD(pllm_sample_row, &row, scored_token_id) && (row.flags & PLLM_SAMPLE_ROW_SCORE) &&
          (row.scored_token_id < 0 || row.scored_token_id >= vocab)) {
        invalid(where + "scored token outside the vocabulary");
      }
      if (PLLM_HAS_FIELD(pllm_sampling_params, &p, min_tokens_banned_ids)) {
        if (p.num_logit_bias < 0 || (p.num_logit_bias > 0 && (!p.logit_bias_token_ids || !p.logit_bias_values)) ||
            p.num_min_tokens_banned_ids < 0 || (p.num_min_tokens_banned_ids > 0 && !p.min_tokens_banned_ids) ||
            p.min_tokens < 0) {
          invalid(where + "bad logit_bias or min_tokens");
        }
        std::vector<bool> biased(std::size_t(vocab), false);
        for (int32_t i = 0; i < p.num_logit_bias; ++i) {
          const int32_t id = p.logit_bias_token_ids[i];
          if (id < 0 || id >= vocab || biased[std::size_t(id)] || !std::isfinite(p.logit_bias_values[i]))
            invalid(where + "logit_bias entry " + std::to_string(i) + " is out of vocabulary, repeated or not finite");
          biased[std::size_t(id)] = true;
        }
        for (int32_t i = 0; i < p.num_min_tokens_banned_ids; ++i) {
          if (p.min_tokens_banned_ids[i] < 0 || p.min_tokens_banned_ids[i] >= vocab)
            invalid(where + "min_tokens banned id outside the vocabulary");
        }
      }
      for (const auto& [ids, n] : {std::pair{row.prompt_token_ids, row.num_prompt_tokens},
                                   std::pair{row.output_token_ids, row.num_output_tokens}}) {
        if (n < 0 || (n > 0 && !ids)) invalid(where + "bad token history");
        for (int32_t i = 0; i < n; ++i) {
          if (ids[i] < 0 || ids[i] >= vocab)
            invalid(where + "history token " + std::to_string(ids[i]) + " is outside the vocabulary");
        }
      }
    }
    return vocab;
  }

  // The raw logits a row samples: its logits_row of the batch's logits.
  static const float* logits_of(const pllm_sample_batch& batch, const pllm_sample_row& row) {
    return static_cast<const float*>(batch.logits->data) + row.logits_row * batch.logits->strides[0];
  }

  // A row with NaN, +inf or only -inf logits: flagged in row_status, or an error for the call.
  static void non_finite_row(int32_t* row_status, int32_t r) {
    if (!row_status) invalid("row " + std::to_string(r) + ": logits contain NaN or +inf, or are all -inf");
    row_status[r] = PLLM_SAMPLE_NON_FINITE_LOGITS;
  }

  // log(sum(exp(x))): finite exactly when no value is NaN or +inf and one is above -inf.
  static double log_sum_exp(const float* x, int64_t n) {
    const float m = *std::max_element(x, x + n);
    if (!std::isfinite(m)) return m;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - double(m));
    return double(m) + std::log(sum);
  }

  // Steps 1b, 2 and 3: logit_bias and min_tokens, then the repetition, frequency and presence penalties.
  static std::vector<float> penalized(const pllm_sample_row& row, const float* raw, int64_t vocab) {
    const pllm_sampling_params& p = *row.params;
    std::vector<float> logits(raw, raw + vocab);
    if (PLLM_HAS_FIELD(pllm_sampling_params, &p, min_tokens_banned_ids)) {
      for (int32_t i = 0; i < p.num_logit_bias; ++i) {
        logits[std::size_t(p.logit_bias_token_ids[i])] += p.logit_bias_values[i];
      }
      if (row.num_output_tokens < p.min_tokens) {
        for (int32_t i = 0; i < p.num_min_tokens_banned_ids; ++i) {
          logits[std::size_t(p.min_tokens_banned_ids[i])] = -std::numeric_limits<float>::infinity();
        }
      }
    }
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
      // The smallest best-first prefix whose fixed-point mass reaches ceil(top_p * kept mass), at least 1.
      uint64_t mass = 0;
      for (const int32_t id : c.ids) mass += fixed_mass(c.weights[std::size_t(id)]);
      const uint64_t target = std::max<uint64_t>(1, uint64_t(std::ceil(double(p.top_p) * double(mass))));
      uint64_t cumulative = 0;
      std::size_t keep = c.ids.size();
      for (std::size_t i = 0; i < c.ids.size(); ++i) {
        cumulative += fixed_mass(c.weights[std::size_t(c.ids[i])]);
        if (cumulative >= target) {
          keep = i + 1;
          break;
        }
      }
      c.ids.resize(keep);
    }
    for (const int32_t id : c.ids) c.total += c.weights[std::size_t(id)];
    c.logits = std::move(logits);
    return c;
  }
};

}  // namespace

PAGEDLLM_PLUGIN(
    ExampleSampler, "example_sampler", "1.0.0",
    "Example: a CPU sampler with every request parameter (penalties, temperature, min-p, top-k, top-p, seed, logprobs)")
