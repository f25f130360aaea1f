#include "core/engine/request_validation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/scheduler/scheduler.h"

namespace pagedllm {
namespace {

[[noreturn]] void reject(const std::string& param, const std::string& reason) {
  throw RequestRejected(-1, reason, param);
}

void check_range(const char* name, float value, float low, float high, bool low_open = false) {
  const bool above_low = low_open ? value > low : value >= low;
  if (!std::isfinite(value) || !above_low || value > high) {
    reject(name, fmt::format("{} must be in {}{}, {}], got {}", name, low_open ? "(" : "[", low,
                             high, value));
  }
}

// A speculative request's blocks also hold the draft's KV layer, which a plain
// request never writes: the two kinds share no cached blocks.
std::string cache_key(const std::string& salt, bool speculative) {
  return speculative ? salt + "\x1f" + "speculative" : salt;
}

void check_logit_adjustments(const SamplingOptions& sampling, const RequestLimits& limits, int max_tokens) {
  if (static_cast<int>(sampling.logit_bias.size()) > limits.max_logit_bias) {
    reject("logit_bias", fmt::format("logit_bias may list at most {} tokens, got {}", limits.max_logit_bias,
                                     sampling.logit_bias.size()));
  }
  std::vector<std::int32_t> ids;
  for (const auto& [token, bias] : sampling.logit_bias) {
    if (token < 0 || token >= limits.vocab_size) {
      reject("logit_bias", fmt::format("logit_bias token id {} is outside the vocabulary [0, {})", token,
                                       limits.vocab_size));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      reject("logit_bias", fmt::format("logit_bias of token {} must be between -100 and 100, got {}", token, bias));
    }
    ids.push_back(token);
  }
  std::sort(ids.begin(), ids.end());
  if (const auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end()) {
    reject("logit_bias", fmt::format("logit_bias lists token id {} twice", *twice));
  }
  if (sampling.min_tokens < 0) {
    reject("min_tokens", fmt::format("min_tokens must be greater than or equal to 0, got {}", sampling.min_tokens));
  }
  if (sampling.min_tokens > max_tokens) {
    reject("min_tokens", fmt::format("min_tokens must be less than or equal to max_tokens={}, got {}", max_tokens,
                                     sampling.min_tokens));
  }
  if (!limits.sampler_has_logit_adjustments) {
    const char* field = !sampling.logit_bias.empty() ? "logit_bias"
                        : sampling.min_tokens > 0    ? "min_tokens"
                        : sampling.prompt_logprobs   ? "prompt_logprobs"
                                                     : nullptr;
    if (field) {
      reject(field, fmt::format("{} needs a sampler plugin built against SDK 2.1 or later; the engine's was built "
                                "against SDK 2.0",
                                field));
    }
  }
}

// vLLM's beam search takes greedy-style parameters only: the beams are ranked by
// the model's raw logprobs, which no sampling parameter changes.
void check_beam_search(const GenerateRequest& request, const RequestLimits& limits) {
  const SamplingOptions& sampling = request.sampling;
  const BeamSearchOptions& beam = *sampling.beam_search;
  if (beam.beam_width < 2 || beam.beam_width > limits.max_n) {
    reject("best_of", fmt::format("best_of (the beam width) must be between 2 and {} when using beam search, got {}",
                                  limits.max_n, beam.beam_width));
  }
  if (sampling.n > beam.beam_width) {
    reject("n", fmt::format("n must be at most best_of (the beam width) when using beam search, got n={} and "
                            "best_of={}",
                            sampling.n, beam.beam_width));
  }
  if (!std::isfinite(beam.length_penalty)) {
    reject("length_penalty", fmt::format("length_penalty must be a finite number, got {}", beam.length_penalty));
  }
  const auto must_be = [](const char* field, bool holds, const char* what) {
    if (!holds) reject(field, fmt::format("{} must be {} when using beam search", field, what));
  };
  must_be("temperature", sampling.temperature == 0.0f, "0");
  must_be("top_p", sampling.top_p == 1.0f, "1");
  must_be("top_k", sampling.top_k <= 0, "-1 or 0 (off)");
  must_be("min_p", sampling.min_p == 0.0f, "0");
  must_be("presence_penalty", sampling.presence_penalty == 0.0f, "0");
  must_be("frequency_penalty", sampling.frequency_penalty == 0.0f, "0");
  must_be("repetition_penalty", sampling.repetition_penalty == 1.0f, "1");
  const auto unsupported = [](const char* field, bool used) {
    if (used) reject(field, fmt::format("{} is not supported with beam search", field));
  };
  unsupported("logit_bias", !sampling.logit_bias.empty());
  unsupported("min_tokens", sampling.min_tokens > 0);
  unsupported("stop", !sampling.stop.empty());
  if (request.constraint) unsupported(request.constraint->field.c_str(), true);
}

}  // namespace

void decode_without_speculation(Request& request, const std::string& cache_salt) {
  request.speculative = false;
  request.cache_key = cache_key(cache_salt, false);
}

bool speculative_request(const GenerateRequest& request, const RequestLimits& limits) {
  return limits.speculative_decoding && request.speculative && request.sampling.n == 1 &&
         !request.sampling.beam_search && !request.sampling.logprobs && !request.sampling.prompt_logprobs;
}

Request to_scheduler_request(const GenerateRequest& request, const RequestLimits& limits) {
  const SamplingOptions& sampling = request.sampling;
  const auto prompt_len = static_cast<int>(request.prompt_token_ids.size());
  if (prompt_len == 0) reject("prompt", "the prompt is empty");
  for (const std::int32_t token : request.prompt_token_ids) {
    if (token < 0 || token >= limits.vocab_size) {
      reject("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", token,
                                   limits.vocab_size));
    }
  }
  if (prompt_len >= limits.max_model_len) {
    reject("prompt", fmt::format("This model's maximum context length is {} tokens. However, your "
                                 "prompt has {} tokens, leaving no room for output tokens.",
                                 limits.max_model_len, prompt_len));
  }
  if (sampling.n < 1 || sampling.n > limits.max_n) {
    reject("n", fmt::format("n must be between 1 and {}, got {}", limits.max_n, sampling.n));
  }
  int max_tokens = limits.max_model_len - prompt_len;
  if (sampling.max_tokens) {
    if (*sampling.max_tokens < 1) {
      reject("max_tokens", fmt::format("max_tokens must be at least 1, got {}", *sampling.max_tokens));
    }
    if (static_cast<std::int64_t>(prompt_len) + *sampling.max_tokens > limits.max_model_len) {
      reject("max_tokens",
             fmt::format("This model's maximum context length is {} tokens. However, you requested "
                         "{} tokens ({} in the prompt, {} in the completion). Please reduce the "
                         "prompt or max_tokens.",
                         limits.max_model_len,
                         static_cast<std::int64_t>(prompt_len) + *sampling.max_tokens, prompt_len,
                         *sampling.max_tokens));
    }
    max_tokens = *sampling.max_tokens;
  }
  check_range("temperature", sampling.temperature, 0.0f, 2.0f);
  check_range("top_p", sampling.top_p, 0.0f, 1.0f, /*low_open=*/true);
  if (sampling.top_k < -1) reject("top_k", fmt::format("top_k must be -1, 0 or positive, got {}", sampling.top_k));
  check_range("min_p", sampling.min_p, 0.0f, 1.0f);
  check_range("presence_penalty", sampling.presence_penalty, -2.0f, 2.0f);
  check_range("frequency_penalty", sampling.frequency_penalty, -2.0f, 2.0f);
  check_range("repetition_penalty", sampling.repetition_penalty, 0.0f, 2.0f, /*low_open=*/true);
  if (sampling.logprobs && (*sampling.logprobs < 0 || *sampling.logprobs > limits.max_logprobs)) {
    reject("logprobs", fmt::format("logprobs must be between 0 and {}, got {}", limits.max_logprobs,
                                   *sampling.logprobs));
  }
  if (sampling.prompt_logprobs && (*sampling.prompt_logprobs < 0 || *sampling.prompt_logprobs > limits.max_logprobs)) {
    reject("prompt_logprobs", fmt::format("prompt_logprobs must be between 0 and {}, got {}", limits.max_logprobs,
                                          *sampling.prompt_logprobs));
  }
  if (static_cast<int>(sampling.stop.size()) > limits.max_stop_strings) {
    reject("stop", fmt::format("at most {} stop strings, got {}", limits.max_stop_strings,
                               sampling.stop.size()));
  }
  for (const std::string& stop : sampling.stop) {
    if (stop.empty()) reject("stop", "stop strings must not be empty");
  }
  for (const std::int32_t token : sampling.stop_token_ids) {
    if (token < 0 || token >= limits.vocab_size) {
      reject("stop_token_ids", fmt::format("stop token id {} is outside the vocabulary [0, {})",
                                           token, limits.vocab_size));
    }
  }

  if (sampling.beam_search) check_beam_search(request, limits);

  Request out;
  out.prompt_token_ids = request.prompt_token_ids;
  out.max_tokens = max_tokens;
  out.n = sampling.beam_search ? sampling.beam_search->beam_width : sampling.n;
  out.beam_search = sampling.beam_search.has_value();
  out.priority = request.priority;
  check_logit_adjustments(sampling, limits, max_tokens);  // after prompt_logprobs' own range check
  out.speculative = speculative_request(request, limits);
  out.prompt_logprobs = sampling.prompt_logprobs.has_value();
  out.cache_key = cache_key(request.cache_salt, out.speculative);
  if (auto error = Scheduler::admission_error(out, limits.scheduler, limits.block_size,
                                              limits.num_device_blocks)) {
    reject(sampling.beam_search ? "best_of" : sampling.n > 1 ? "n" : "max_tokens", *error);
  }
  return out;
}

}  // namespace pagedllm
