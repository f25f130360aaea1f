#ifndef PAGEDLLM_SDK_SAMPLER_H
#define PAGEDLLM_SDK_SAMPLER_H

#include <stdint.h>

#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sampler turns logits into tokens (and log-probabilities) per request. It
 * keeps no per-request state: randomness is a pure function of (seed, offset),
 * so a request samples the same tokens whatever else shares its batch. */
typedef struct pllm_sampler pllm_sampler;

typedef struct pllm_sampler_create_args {
  uint32_t struct_size;
  const char* options_json;
  pllm_device device;
} pllm_sampler_create_args;

/* Sampling parameters of one request, as the OpenAI API names them. */
typedef struct pllm_sampling_params {
  uint32_t struct_size;
  float temperature;        /* 0 = greedy */
  float top_p;              /* 1 = off */
  int32_t top_k;            /* 0 = off; negative is invalid (an API layer maps vLLM's -1 to 0) */
  float min_p;              /* 0 = off */
  float presence_penalty;   /* 0 = off */
  float frequency_penalty;  /* 0 = off */
  float repetition_penalty; /* 1 = off */
  uint64_t seed;
  int32_t num_top_logprobs; /* alternatives to report per token; 0 = none */
} pllm_sampling_params;

/* One row of logits to sample: its request's parameters and token history
 * (for penalties). */
typedef struct pllm_sample_row {
  uint32_t struct_size;
  const pllm_sampling_params* params;
  const int32_t* prompt_token_ids;
  int32_t num_prompt_tokens;
  const int32_t* output_token_ids;
  int32_t num_output_tokens;
  /* Position in the request's random stream: the index of the token being
   * sampled. The sampler draws from (seed, random_offset) alone, so a token does
   * not depend on the rest of the batch; a consumer that needs several draws for
   * one position (a speculator's accept test and resample) derives them from
   * the seed by its own documented convention. */
  uint64_t random_offset;
} pllm_sample_row;

typedef struct pllm_sample_batch {
  uint32_t struct_size;
  int32_t num_rows;
  uint32_t row_stride;         /* bytes from one row to the next: sizeof(pllm_sample_row) of the caller */
  const pllm_sample_row* rows;
  pllm_tensor logits;          /* [num_rows, vocab_size], f32 */
} pllm_sample_batch;

/* Caller-allocated outputs. */
typedef struct pllm_sample_output {
  uint32_t struct_size;
  int32_t* token_ids;          /* [num_rows] */
  float* logprobs;             /* [num_rows] log-probability of the sampled token */
  int32_t max_top_logprobs;    /* row capacity of the two arrays below; 0 = none */
  int32_t* top_token_ids;      /* [num_rows * max_top_logprobs]; unused entries -1 */
  float* top_logprobs;         /* [num_rows * max_top_logprobs]; unused entries -infinity */
} pllm_sample_output;

typedef struct pllm_sampler_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_sampler_create_args* args, pllm_sampler** out,
                        pllm_error* error);
  void (*destroy)(pllm_sampler* self);
  pllm_status (*sample)(pllm_sampler* self, const pllm_sample_batch* batch,
                        pllm_sample_output* out, pllm_error* error);
  /* The distribution each row would be sampled from, after its request's
   * penalties, temperature, top-k, top-p and min-p: what a speculator verifies
   * draft tokens against. `out_probs` is [num_rows, vocab_size] f32, caller-owned.
   * Optional (NULL). */
  pllm_status (*probabilities)(pllm_sampler* self, const pllm_sample_batch* batch,
                               pllm_tensor* out_probs, pllm_error* error);
} pllm_sampler_api;

#ifdef __cplusplus
}
#endif

#endif
