#ifndef PAGEDLLM_SDK_MODEL_H
#define PAGEDLLM_SDK_MODEL_H

#include <stdint.h>

#include "pagedllm/sdk/attention.h"
#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/collectives.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model plugin owns the weights and the forward pass of one architecture. It
 * reaches the KV cache only through the attention backend core passes in, so
 * any backend on the same device can be swapped in. */
typedef struct pllm_model pllm_model;

typedef struct pllm_model_create_args {
  uint32_t struct_size;
  const char* options_json; /* the plugin's options, already validated */
  const char* model_path;   /* an HF model directory */
  pllm_device device;
  pllm_dtype dtype;         /* compute/weight dtype; PLLM_DTYPE_INVALID = as stored */
  /* SDK 2.1. The tensor-parallel group this model is one rank of (docs/tensor-parallel.md):
   * the model loads only its rank's shard and meets the other ranks through it in forward().
   * NULL (or absent: an older host) = not parallel, the whole model. A model that cannot
   * be split fails create with PLLM_ERROR_UNSUPPORTED when the group has more than one rank. */
  const pllm_collectives_ref* collectives;
} pllm_model_create_args;

/* What core needs to know of a model. Filled by get_info(): the caller sets
 * struct_size to the size it knows and the plugin writes only what fits.
 * Pointers stay valid as long as the model. */
typedef struct pllm_model_info {
  uint32_t struct_size;
  const char* architecture; /* "LlamaForCausalLM" */
  int32_t vocab_size;
  int32_t hidden_size;
  int32_t num_layers;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t max_position_embeddings;
  pllm_dtype dtype;          /* dtype of activations; the KV cache's unless the host picks another */
  int32_t bos_token_id;      /* -1 when none */
  int32_t num_eos_token_ids;
  const int32_t* eos_token_ids;
} pllm_model_info;

/* The attention backend the model must use for this step. Passed by pointer so
 * that it can grow (SDK 2.0); the caller sets struct_size. */
typedef struct pllm_attention_ref {
  uint32_t struct_size;
  const pllm_attention_api* api;
  pllm_attention_backend* backend;
} pllm_attention_ref;

/* Filled by forward(). Outputs of a step stay on the model's device (SDK 2.0):
 * the caller points `logits` (and `hidden`, when it asks for hidden states) at
 * descriptors it owns, and the model fills them with views of memory the model
 * owns on ITS device (host memory for a CPU model: the same code path), valid
 * until its next forward() or destroy(). Nothing vocabulary-sized is copied to
 * the host: core hands the logits to the sampler created on the same device, and
 * the hidden states to the speculator, which reads them by row index. The work
 * that produces them is complete when forward() returns (a model on a GPU
 * synchronises its stream once, without a copy), so a consumer may read them on
 * any stream of that device.
 * A model on a GPU keeps the workspace of its largest step allocated, so that
 * core's profiling step (see pllm_attention_api.memory_info) measures it. */
typedef struct pllm_forward_output {
  uint32_t struct_size;
  pllm_tensor* logits; /* filled: [batch->num_logits, vocab_size] f32 on the model's device */
  pllm_tensor* hidden; /* filled when not NULL: [batch->num_hidden, hidden_size] f32 on the model's
                          device (post final norm); ndim 0 when num_hidden is 0. NULL: none asked for */
} pllm_forward_output;

typedef struct pllm_model_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_model_create_args* args, pllm_model** out, pllm_error* error);
  void (*destroy)(pllm_model* self);
  pllm_status (*get_info)(pllm_model* self, pllm_model_info* out, pllm_error* error);
  /* Runs the batch (planned into `attention` by core) and returns logits for
   * batch->logits_indices and hidden states for batch->hidden_indices. */
  pllm_status (*forward)(pllm_model* self, const pllm_batch* batch, const pllm_attention_ref* attention,
                         pllm_forward_output* out, pllm_error* error);
  /* Looks up a weight by its checkpoint name ("model.embed_tokens.weight"), so a
   * speculator can share the target's embeddings and lm_head instead of copying
   * them. Optional (NULL): then such a speculator cannot be used with this model.
   * A model created with collectives (one rank of a tensor-parallel group)
   * returns this rank's block of the tensor (sdk/speculator.h says which). */
  pllm_status (*get_tensor)(pllm_model* self, const char* name, pllm_tensor* out,
                            pllm_error* error);

  /* SDK 2.3. Reads the model at args->model_path as far as create() does before it reads
   * weights (its configuration: an HF directory's config.json, a GGUF file's metadata) and
   * refuses what create() would refuse there, with the same status and message: an
   * architecture, a feature or a configuration key it does not implement, a missing path.
   * Reads no weights and touches no device; args->collectives is NULL. The host calls it for
   * `--check` and before it loads a tokenizer or anything else. Optional (NULL): then only
   * create() finds out. */
  pllm_status (*check_model)(const pllm_model_create_args* args, pllm_error* error);
} pllm_model_api;

#ifdef __cplusplus
}
#endif

#endif
