#ifndef PAGEDLLM_SDK_SPECULATOR_H
#define PAGEDLLM_SDK_SPECULATOR_H

#include <stdint.h>

#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/collectives.h"
#include "pagedllm/sdk/model.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A speculator is a draft model that proposes tokens from the target model's
 * hidden states (EAGLE), plus the rejection sampler that verifies drafts
 * against the target so that the output distribution equals the target's.
 *
 * Core owns the control flow: it plans the draft's batches (positions, slots,
 * block tables), turns draft logits into draft tokens and their distribution q
 * with the sampler plugin (the request's own temperature / top-k / top-p), and
 * calls verify() with the target's distribution p; p and q stay in memory the
 * speculator lends (allocate_buffer()) on its device. The draft's KV layers live
 * in the same paged pool and block tables as the target's: draft layer i is
 * attention layer (target num_layers + i). */
typedef struct pllm_speculator pllm_speculator;

/* The target model the draft attaches to. Weights such as the embeddings and
 * lm_head are shared through model_api->get_tensor, not copied. */
typedef struct pllm_speculator_target {
  uint32_t struct_size;
  const pllm_model_api* model_api;
  pllm_model* model;
  const pllm_model_info* info;
} pllm_speculator_target;

typedef struct pllm_speculator_create_args {
  uint32_t struct_size;
  const char* options_json;   /* the plugin's options, already validated */
  const char* draft_path;     /* the draft checkpoint directory */
  pllm_device device;
  const pllm_speculator_target* target; /* by pointer, so that it can grow */
  int32_t num_speculative_tokens; /* K: drafts proposed per step */
  /* SDK 2.2 (appended; NULL or absent: the target is whole): the target's
   * tensor-parallel group (pllm_model_create_args.collectives). The target is
   * then this rank's shard, and its get_tensor returns this rank's block of a
   * weight: of the embedding and lm_head, vocabulary rows [r * S, min(V, (r + 1)
   * * S)), S = ceil(V / N), for rank r of N. Every rank creates its speculator
   * and calls draft() with the same batches in the same order (core drives the
   * other ranks' as it does their forward); the draft's logits are whole on
   * every rank. A speculator that cannot split itself refuses a group of more
   * than one rank. */
  const pllm_collectives_ref* collectives;
} pllm_speculator_create_args;

/* Filled by get_info(); the caller sets struct_size. The draft's KV heads and
 * head_dim must equal the target's (one pool holds both). */
typedef struct pllm_speculator_info {
  uint32_t struct_size;
  int32_t num_draft_layers; /* KV layers the draft needs, appended after the target's */
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t hidden_size;      /* width of the features it reads (the target's hidden_size) */
} pllm_speculator_info;

/* One forward of the draft over a batch planned by core (attention->plan() has
 * been called with `batch`). Row t is the draft's input at position
 * batch->positions[t]: EAGLE's pair (feature of that position, token at the
 * NEXT position). So batch->token_ids[t] is the token that follows position
 * positions[t], and its K/V go to slot_mapping[t] in the draft layers.
 *
 * features: the target's hidden states exactly as its forward() left them
 * (pllm_forward_output.hidden: [num_hidden, hidden_size] f32 on the model's
 * device, after its final norm); row t's feature is features row
 * feature_rows[t]. The draft gathers them on its device: nothing crosses to the
 * host or is reordered by core (2.0). Or NULL: continue a chain, where row t's
 * feature is the draft's own predicted feature at logits row feature_rows[t] of
 * the previous draft() call (row t itself when feature_rows is NULL): a chain
 * continues only the sequences that still draft. */
typedef struct pllm_draft_args {
  uint32_t struct_size;
  const pllm_batch* batch;
  const pllm_tensor* features;
  const pllm_attention_ref* attention;
  const int32_t* feature_rows; /* [num_tokens], host; required with features, optional without */
} pllm_draft_args;

typedef struct pllm_draft_output {
  uint32_t struct_size;
  /* Filled: [batch->num_logits, vocab_size] f32: the draft's logits for the
   * token two positions after each logits row's position, on the speculator's
   * device (the sampler's), complete when draft() returns. Plugin-owned until
   * the next call. */
  pllm_tensor* logits;
} pllm_draft_output;

/* Rejection sampling of drafts, one row per sequence. For row s with
 * n = num_drafts[s] drafts d_1..d_n:
 *   accept d_i with probability min(1, p_i(d_i) / q_i(d_i)), in order; at the
 *   first rejection emit a token from normalize(max(0, p_i - q_i)) and stop;
 *   when all n are accepted emit a bonus token from p_{n+1}.
 * greedy[s] != 0 takes the argmax path instead: accept while d_i == argmax p_i,
 * then emit argmax of the first unmatched p_i (or of p_{n+1}).
 * Randomness is a pure function of (seeds[s], random_offsets[s] + i) with the
 * plugin's documented stream convention, so runs reproduce exactly. */
typedef struct pllm_verify_args {
  uint32_t struct_size;
  int32_t num_seqs;
  int32_t max_draft_tokens;        /* K: the row stride of the arrays below */
  const int32_t* num_drafts;       /* [num_seqs], each in 0..K */
  const int32_t* draft_token_ids;  /* [num_seqs * K] */
  /* p and q: f32 with contiguous vocab rows, both in host memory or both on
   * the speculator's device (a speculator that verifies there, spec_eagle on
   * CUDA, copies down only the output ids; one that does not refuses them).
   * Core passes them in buffers from allocate_buffer() when the speculator
   * has it (one tensor per sequence today: num_seqs 1), else in host memory. */
  const pllm_tensor* draft_probs;  /* [num_seqs, K, vocab]: q_1..q_K */
  const pllm_tensor* target_probs; /* [num_seqs, K + 1, vocab]: p_1..p_{K+1} */
  const uint8_t* greedy;           /* [num_seqs] */
  const uint64_t* seeds;           /* [num_seqs] */
  const uint64_t* random_offsets;  /* [num_seqs]: index of d_1 in the request's output */
} pllm_verify_args;

typedef struct pllm_verify_output {
  uint32_t struct_size;
  int32_t* output_token_ids;  /* [num_seqs * (K + 1)], caller-owned: accepted drafts, then one more */
  int32_t* num_output_tokens; /* [num_seqs], each in 1..num_drafts[s] + 1 */
} pllm_verify_output;

/* Memory the speculator lends core for p and q (allocate_buffer()): the
 * caller zero-fills it and sets struct_size; the speculator fills the rest. */
typedef struct pllm_speculator_buffer {
  uint32_t struct_size;
  void* data;         /* at least `bytes` requested, aligned to 256 bytes, uninitialised */
  uint64_t bytes;     /* what was allocated: at least what was asked for */
  pllm_device device; /* where data lives: the speculator's device (the CPU's: host memory) */
} pllm_speculator_buffer;

typedef struct pllm_speculator_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_speculator_create_args* args, pllm_speculator** out,
                        pllm_error* error);
  void (*destroy)(pllm_speculator* self);
  pllm_status (*get_info)(pllm_speculator* self, pllm_speculator_info* out, pllm_error* error);
  pllm_status (*draft)(pllm_speculator* self, const pllm_draft_args* args,
                       pllm_draft_output* out, pllm_error* error);
  pllm_status (*verify)(pllm_speculator* self, const pllm_verify_args* args,
                        pllm_verify_output* out, pllm_error* error);
  /* Optional, both or neither (appended in 2.0; NULL: absent). Memory on the
   * speculator's device for the probabilities core has the sampler's
   * probabilities() write and then passes to verify(): a step's p and each
   * sequence's q from one step to the next, so that nothing vocabulary-sized
   * crosses to the host. allocate_buffer() fails (PLLM_ERROR_OUT_OF_MEMORY,
   * PLLM_ERROR_INVALID_ARGUMENT for 0 bytes) rather than return less;
   * free_buffer() takes back a buffer by its data pointer and refuses one it did
   * not allocate (PLLM_ERROR_INVALID_ARGUMENT). Core frees its buffers before
   * destroy(), which frees any left. Both are calls on the instance like any
   * other (sdk/README.md, "Threads and reentrancy"). Without them core keeps p
   * and q in host memory: a speculator on a GPU then verifies there, or refuses. */
  pllm_status (*allocate_buffer)(pllm_speculator* self, uint64_t bytes, pllm_speculator_buffer* out,
                                 pllm_error* error);
  pllm_status (*free_buffer)(pllm_speculator* self, void* data, pllm_error* error);
} pllm_speculator_api;

#ifdef __cplusplus
}
#endif

#endif
