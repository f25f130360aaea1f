#ifndef PAGEDLLM_SDK_SPECULATOR_H
#define PAGEDLLM_SDK_SPECULATOR_H

#include <stdint.h>

#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/model.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A speculator proposes draft tokens from the target model's hidden states and
 * verifies them against the target's distribution by rejection sampling, so the
 * output distribution equals the target's. */
typedef struct pllm_speculator pllm_speculator;

/* The target model the draft head attaches to (weights such as the embeddings
 * and lm_head are shared through model_api->get_tensor). */
typedef struct pllm_speculator_target {
  const pllm_model_api* model_api;
  pllm_model* model;
  const pllm_model_info* info;
} pllm_speculator_target;

typedef struct pllm_speculator_create_args {
  uint32_t struct_size;
  const char* options_json;
  const char* draft_path; /* the draft checkpoint directory */
  pllm_device device;
  pllm_speculator_target target;
  int32_t num_speculative_tokens;
} pllm_speculator_create_args;

typedef struct pllm_speculator_info {
  uint32_t struct_size;
  int32_t num_draft_layers; /* KV layers the draft needs, appended after the target's */
} pllm_speculator_info;

/* Draft K tokens for each sequence of `batch` (the step the target just ran),
 * starting from the target's hidden states at batch->hidden_indices. */
typedef struct pllm_propose_args {
  uint32_t struct_size;
  const pllm_batch* batch;
  pllm_tensor target_hidden;      /* [num_seqs, hidden_size] */
  const int32_t* next_token_ids;  /* [num_seqs] the tokens the target just sampled */
  pllm_attention_ref attention;   /* draft layers' KV live in the same pool */
} pllm_propose_args;

typedef struct pllm_propose_output {
  uint32_t struct_size;
  int32_t* draft_token_ids; /* [num_seqs * K], caller-owned */
  pllm_tensor draft_probs;  /* [num_seqs, K, vocab] f32, plugin-owned until the next call */
} pllm_propose_output;

/* Rejection sampling of K drafts per sequence against the target. */
typedef struct pllm_verify_args {
  uint32_t struct_size;
  int32_t num_seqs;
  int32_t num_draft_tokens;        /* K */
  const int32_t* draft_token_ids;  /* [num_seqs * K] */
  pllm_tensor draft_probs;         /* [num_seqs, K, vocab] f32 */
  pllm_tensor target_probs;        /* [num_seqs, K + 1, vocab] f32 */
  const uint64_t* seeds;           /* [num_seqs] */
  const uint64_t* random_offsets;  /* [num_seqs] */
} pllm_verify_args;

typedef struct pllm_verify_output {
  uint32_t struct_size;
  int32_t* output_token_ids;  /* [num_seqs * (K + 1)]: accepted drafts, then a resampled or bonus token */
  int32_t* num_output_tokens; /* [num_seqs], in 1..K+1 */
} pllm_verify_output;

typedef struct pllm_speculator_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_speculator_create_args* args, pllm_speculator** out,
                        pllm_error* error);
  void (*destroy)(pllm_speculator* self);
  pllm_status (*get_info)(pllm_speculator* self, pllm_speculator_info* out, pllm_error* error);
  pllm_status (*propose)(pllm_speculator* self, const pllm_propose_args* args,
                         pllm_propose_output* out, pllm_error* error);
  pllm_status (*verify)(pllm_speculator* self, const pllm_verify_args* args,
                        pllm_verify_output* out, pllm_error* error);
} pllm_speculator_api;

#ifdef __cplusplus
}
#endif

#endif
