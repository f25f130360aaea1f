#ifndef PAGEDLLM_SDK_SAMPLER_H
#define PAGEDLLM_SDK_SAMPLER_H

#include <stdint.h>

#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sampler turns logits into tokens (and log-probabilities) per request, on
 * the device it was created for: core creates it on the model's device and
 * hands it the model's logits where forward() left them (SDK 2.0), so only the
 * sampled ids, their log-probabilities and the requested top log-probabilities
 * cross to the host. It keeps no per-request state: randomness is a pure
 * function of (seed, offset), so a request samples the same tokens whatever
 * else shares its batch.
 *
 * What a sampler must honour (the engine validates the values first; a
 * sampler still refuses bad ones with PLLM_ERROR_INVALID_ARGUMENT):
 * every field of pllm_sampling_params, applied in this order (vLLM V1's):
 *   0. (2.1) logit_bias: the bias is added to the raw logit of each listed token;
 *      then min_tokens: while the row has produced fewer than min_tokens output
 *      tokens (pllm_sample_row.num_output_tokens), every token of
 *      min_tokens_banned_ids gets logit -infinity (it can never be sampled, and
 *      the penalties below keep it there). vLLM V1 applies both as logits
 *      processors before its penalties, and so does every pagedllm sampler;
 *   1. repetition_penalty over the distinct prompt + output tokens: a positive
 *      logit is divided by it, a negative one multiplied (HF, vLLM);
 *   2. frequency_penalty and presence_penalty over output tokens (OpenAI):
 *      l -= frequency * count + presence * (count > 0);
 *   3. temperature < PLLM_GREEDY_TEMPERATURE (1e-5): greedy, the argmax (ties:
 *      lowest id), done (pllm_is_greedy; a speculator's caller marks such rows
 *      greedy in pllm_verify_args by the same test);
 *   4. divide by temperature, then min_p (keep p >= min_p * p_max), top_k, top_p
 *      (the smallest prefix, in (logit desc, id asc) order, whose mass reaches
 *      top_p of what is left), then draw from what is kept with the row's
 *      (seed, random_offset).
 * The reported log-probabilities (`logprobs`, `top_logprobs`) are of the RAW
 * logits (a constrained row's: its masked logits, token_bitmask below):
 * log_softmax before logit_bias, min_tokens, penalties, temperature and
 * filtering (vLLM's default "raw_logprobs", and what the OpenAI API reports):
 * the model's own belief, so a token banned by a bias of -100 still reports
 * the log-probability the model gave it. */
typedef struct pllm_sampler pllm_sampler;

typedef struct pllm_sampler_create_args {
  uint32_t struct_size;
  const char* options_json;
  pllm_device device; /* where the logits it samples live: the model's device */
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
  /* ---- 2.1 (appended; zero means absent; a filler of 2.0 has none of them) ---- */
  /* OpenAI's logit_bias: num_logit_bias distinct token ids, each with a finite
   * bias added to its raw logit (step 0 above). 0 = none. */
  int32_t num_logit_bias;
  const int32_t* logit_bias_token_ids; /* [num_logit_bias], host memory */
  const float* logit_bias_values;      /* [num_logit_bias], host memory */
  /* vLLM's min_tokens: while num_output_tokens < min_tokens, the tokens below
   * cannot be sampled (core lists the model's EOS ids unless ignore_eos, and
   * the request's stop_token_ids). 0 = off. */
  int32_t min_tokens;
  int32_t num_min_tokens_banned_ids;
  const int32_t* min_tokens_banned_ids; /* [num_min_tokens_banned_ids], host memory; may repeat an id */
} pllm_sampling_params;

/* Below this temperature a row is greedy: every sampler and core use this one
 * definition. */
#define PLLM_GREEDY_TEMPERATURE 1e-5f

static inline int pllm_is_greedy(const pllm_sampling_params* params) {
  return params->temperature < PLLM_GREEDY_TEMPERATURE;
}

/* One token to sample: which logits row, its request's parameters and token
 * history (for penalties). Host memory. */
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
  /* The row of batch->logits this row samples (2.0): the sampler gathers on its
   * device, so core never reorders logits. Several rows may share one (an n > 1
   * request's sequences at the end of its prompt). */
  int32_t logits_row;
  /* ---- 2.1 (appended; zero means absent) ---- */
  uint32_t flags; /* PLLM_SAMPLE_ROW_* */
  /* With PLLM_SAMPLE_ROW_SCORE: the token this row reports instead of sampling
   * one (a prompt position's logprob, vLLM's prompt_logprobs): token_ids gets
   * it, logprobs its raw log-probability, top_logprobs the row's top raw
   * alternatives, exactly as for a sampled token; nothing is drawn and the
   * params' penalties, bias and filters do not apply (raw logprobs never see them). */
  int32_t scored_token_id;
} pllm_sample_row;

/* pllm_sample_row.flags */
#define PLLM_SAMPLE_ROW_SCORE 1u

typedef struct pllm_sample_batch {
  uint32_t struct_size;
  int32_t num_rows;
  uint32_t row_stride;         /* bytes from one row to the next: sizeof(pllm_sample_row) of the caller */
  const pllm_sample_row* rows;
  /* [num_logits_rows, vocab_size] f32 with contiguous rows, on the sampler's
   * device (a sampler on a GPU also accepts host logits, copying them in). */
  const pllm_tensor* logits;
  /* Structured output (SDK 2.1; absent or NULL: no row is constrained). Host
   * memory, [num_rows, bitmask_words] 32-bit words, bitmask_words =
   * ceil(vocab_size / 32): row r may only draw a token whose bit (id % 32) of
   * word (id / 32) is set. Applied first, before step 0 above: a masked-out
   * token's logit is -infinity for everything that follows, the reported
   * log-probabilities included (a constrained request's logprobs are of the
   * distribution it was sampled from, as in vLLM). A row whose mask allows no
   * finite logit reports PLLM_SAMPLE_NON_FINITE_LOGITS. A sampler on a device
   * uploads the mask once per call. */
  const uint32_t* token_bitmask;
  int32_t bitmask_words;
  /* [num_rows]: nonzero = row r is constrained (its bitmask row is read); NULL
   * with a token_bitmask: every row is. */
  const uint8_t* constrained_rows;
} pllm_sample_batch;

/* What became of a row (sample_output.row_status). */
typedef enum pllm_sample_status {
  PLLM_SAMPLE_OK = 0,
  /* The row's raw logits hold a NaN or +inf, or are all -inf: a model fault.
   * Nothing was sampled (token -1); the other rows were. */
  PLLM_SAMPLE_NON_FINITE_LOGITS = 1,
  PLLM_SAMPLE_STATUS_FORCE_32BIT = 0x7fffffff
} pllm_sample_status;

/* Caller-allocated outputs, all in host memory: the only bytes of a step that
 * cross from the device, num_rows * (4 + 4 + 4 + max_top_logprobs * 8). */
typedef struct pllm_sample_output {
  uint32_t struct_size;
  int32_t* token_ids;          /* [num_rows] */
  float* logprobs;             /* [num_rows] raw log-probability of the sampled token; NULL = not wanted */
  int32_t max_top_logprobs;    /* row capacity of the two arrays below; 0 = none */
  int32_t* top_token_ids;      /* [num_rows * max_top_logprobs]; unused entries -1 */
  float* top_logprobs;         /* [num_rows * max_top_logprobs] raw; unused entries -infinity */
  /* [num_rows] pllm_sample_status (2.0). NULL: a row with non-finite logits
   * fails the whole call with PLLM_ERROR_INVALID_ARGUMENT instead. */
  int32_t* row_status;
} pllm_sample_output;

/* probabilities()' outputs. */
typedef struct pllm_probabilities_output {
  uint32_t struct_size;
  /* [num_rows, vocab_size] f32 with contiguous rows, caller-owned, on the
   * sampler's device or in host memory (the sampler copies them there). */
  const pllm_tensor* probs;
  int32_t* row_status; /* [num_rows] host, as sample_output.row_status (a faulty row's probs are zeros) */
} pllm_probabilities_output;

typedef struct pllm_sampler_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_sampler_create_args* args, pllm_sampler** out,
                        pllm_error* error);
  void (*destroy)(pllm_sampler* self);
  pllm_status (*sample)(pllm_sampler* self, const pllm_sample_batch* batch,
                        pllm_sample_output* out, pllm_error* error);
  /* The distribution each row would be sampled from, after its request's
   * penalties, temperature, min-p, top-k and top-p: what a speculator verifies
   * draft tokens against (a greedy row: one-hot at its argmax). Optional (NULL). */
  pllm_status (*probabilities)(pllm_sampler* self, const pllm_sample_batch* batch,
                               const pllm_probabilities_output* out, pllm_error* error);
} pllm_sampler_api;

#ifdef __cplusplus
}
#endif

#endif
