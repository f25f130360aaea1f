#include "core/engine/request_validation.h"

#include <cmath>
#include <string>

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

}  // namespace

void decode_without_speculation(Request& request, const std::string& cache_salt) {
  request.speculative = false;
  request.cache_key = cache_key(cache_salt, false);
}

bool speculative_request(const GenerateRequest& request, const RequestLimits& limits) {
  return limits.speculative_decoding && request.speculative && request.sampling.n == 1 &&
         !request.sampling.logprobs && !request.constraint;
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

  Request out;
  out.prompt_token_ids = request.prompt_token_ids;
  out.max_tokens = max_tokens;
  out.n = sampling.n;
  out.priority = request.priority;
  out.speculative = speculative_request(request, limits);
  out.cache_key = cache_key(request.cache_salt, out.speculative);
  if (auto error = Scheduler::admission_error(out, limits.scheduler, limits.block_size,
                                              limits.num_device_blocks)) {
    reject(sampling.n > 1 ? "n" : "max_tokens", *error);
  }
  return out;
}

}  // namespace pagedllm
