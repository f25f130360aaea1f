#pragma once
// Turning a client's GenerateRequest into the scheduler's Request: defaults
// filled, every field range-checked, the request checked against what the
// model and the KV cache can ever hold. Runs on the client's thread inside
// Engine::submit(), so a bad request is refused before it is queued.

#include <cstdint>

#include "core/config/engine_config.h"
#include "core/engine/engine.h"
#include "core/scheduler/request.h"

namespace pagedllm {

struct RequestLimits {
  int vocab_size = 0;
  int max_model_len = 0;
  int max_n = 1;
  int max_logprobs = 20;
  int max_stop_strings = 16;
  SchedulerConfig scheduler;
  int block_size = 16;
  int num_device_blocks = 0;
  // The engine has a speculator (see speculative_request()).
  bool speculative_decoding = false;
  // Entries of SamplingOptions::logit_bias (OpenAI's limit).
  int max_logit_bias = 300;
  // The sampler plugin was built against SDK >= 2.1, which added logit_bias
  // and min_tokens to pllm_sampling_params and scoring rows (prompt logprobs)
  // to pllm_sample_row; an older one would ignore them.
  bool sampler_has_logit_adjustments = true;
};

// Whether `request` takes part in speculative decoding on an engine with
// `limits`: asked for (the default), n == 1, no beam search and no logprobs (whose per-token
// values the verification path does not compute). Constrained requests speculate: drafts are
// checked against the grammar (docs/structured-output.md).
bool speculative_request(const GenerateRequest& request, const RequestLimits& limits);

// Makes a request admitted as speculative decode one token per step: no
// drafts, and the prefix-cache key of a plain request with its salt.
void decode_without_speculation(Request& request, const std::string& cache_salt);

// Throws RequestRejected (request id -1) naming the field, the value and the
// limit. The returned Request has no id yet and max_tokens resolved (unset =
// the rest of the context).
Request to_scheduler_request(const GenerateRequest& request, const RequestLimits& limits);

}  // namespace pagedllm
