#ifndef PAGEDLLM_SDK_ATTENTION_H
#define PAGEDLLM_SDK_ATTENTION_H

#include <stdint.h>

#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An attention backend owns the physical KV cache (layout and memory) and the
 * kernels that read and write it. Per step core calls plan() once and the model
 * calls run() once per layer (plan/run split: metadata prepared once, cheap
 * per-layer calls). */
typedef struct pllm_attention_backend pllm_attention_backend;

typedef struct pllm_attention_create_args {
  uint32_t struct_size;
  const char* options_json; /* the plugin's options, already validated */
  pllm_device device;
} pllm_attention_create_args;

/* Inputs of one layer. query/key/value/output are on the backend's device.
 * key and value hold the new tokens' K/V: run() writes them into the cache by
 * the planned slot mapping, then attends over each sequence's whole context
 * (causal inside its new tokens). Which K/V a row reads is stated with the
 * slot mapping in batch.h: always the cache's, after this layer's writes.
 *
 * Built by the model plugin and read by the attention backend: plugin to
 * plugin, so the two may be of different minors. The backend reads a field
 * appended after 2.0 only when PLLM_HAS_FIELD says the model set it, and
 * refuses only args without the 2.0 fields. The tensors are held by pointer
 * so that pllm_tensor can grow without moving scale and stream. */
typedef struct pllm_attention_layer_args {
  uint32_t struct_size;
  const pllm_tensor* query;  /* [num_tokens, num_heads, head_dim] */
  const pllm_tensor* key;    /* [num_tokens, num_kv_heads, head_dim] */
  const pllm_tensor* value;  /* [num_tokens, num_kv_heads, head_dim] */
  const pllm_tensor* output; /* [num_tokens, num_heads, head_dim]: run() writes output->data */
  float scale;               /* softmax scale, usually 1/sqrt(head_dim) */
  void* stream;              /* the device stream to run on (cudaStream_t); NULL on the CPU */

  /* ---- SDK 2.4 ---- */

  /* This layer's sliding window: > 0, the row at position p attends the keys at
   * positions (p - sliding_window, p] only (Mistral, Gemma's local layers:
   * transformers' `q - k < sliding_window`); 0, the whole context. A model sets
   * it only for a backend whose pllm_attention_api.features has
   * PLLM_ATTENTION_SLIDING_WINDOW, which is how it knows the field is read. */
  int32_t sliding_window;
} pllm_attention_layer_args;

/* pllm_attention_api.features: what a backend reads of the fields appended to
 * pllm_attention_layer_args after 2.0. A model that needs one refuses a backend
 * without it, naming the feature, rather than have it ignored. */
#define PLLM_ATTENTION_SLIDING_WINDOW 0x1u

/* Memory of the backend's device, as memory_info() reports it. */
typedef struct pllm_device_memory {
  uint32_t struct_size;
  uint64_t free_bytes;  /* free on the device now, whoever allocated the rest */
  uint64_t total_bytes; /* the device's capacity */
} pllm_device_memory;

typedef struct pllm_attention_api {
  uint32_t struct_size;
  pllm_status (*create)(const pllm_attention_create_args* args, pllm_attention_backend** out,
                        pllm_error* error);
  void (*destroy)(pllm_attention_backend* self);
  /* Device bytes one block takes across all layers, K and V. */
  pllm_status (*bytes_per_block)(pllm_attention_backend* self, const pllm_kv_cache_spec* spec,
                                 uint64_t* out_bytes, pllm_error* error);
  /* Allocates the cache: device blocks [0, num_device_blocks) and host swap
   * blocks [0, num_host_blocks). Called once, before any step. */
  pllm_status (*allocate_cache)(pllm_attention_backend* self, const pllm_kv_cache_spec* spec,
                                int64_t num_device_blocks, int64_t num_host_blocks,
                                pllm_error* error);
  /* Prepares a step; `batch` stays valid until the step's last run(). */
  pllm_status (*plan)(pllm_attention_backend* self, const pllm_batch* batch, pllm_error* error);
  pllm_status (*run)(pllm_attention_backend* self, int32_t layer,
                     const pllm_attention_layer_args* args, pllm_error* error);
  /* Block operations core issues before a step's plan(), in this order:
   * swap_out (device -> host), swap_in (host -> device), copy (device -> device).
   * `pairs` is a plain array of pllm_block_copy: that struct is frozen for the
   * major (no struct_size; see batch.h). */
  pllm_status (*swap_out)(pllm_attention_backend* self, const pllm_block_copy* pairs,
                          int64_t count, pllm_error* error);
  pllm_status (*swap_in)(pllm_attention_backend* self, const pllm_block_copy* pairs,
                         int64_t count, pllm_error* error);
  pllm_status (*copy_blocks)(pllm_attention_backend* self, const pllm_block_copy* pairs,
                             int64_t count, pllm_error* error);

  /* ---- SDK 1.1 (part of every 2.x table) ---- */

  /* Free and total memory of the backend's device, for sizing the KV pool from
   * cache.gpu_memory_utilization. Optional: NULL for a backend without a fixed
   * device memory (the CPU), which core sizes from cache.kv_cache_bytes.
   *
   * A backend that provides it accepts allocate_cache() twice: core first
   * allocates a small cache, runs one profiling step of the largest size the
   * scheduler can plan (all of max_num_batched_tokens, logits for max_num_seqs
   * rows), reads memory_info() again, then calls allocate_cache() with the final
   * block counts; the second call frees the first cache before allocating. */
  pllm_status (*memory_info)(pllm_attention_backend* self, pllm_device_memory* out,
                             pllm_error* error);

  /* ---- SDK 2.4 ---- */

  /* PLLM_ATTENTION_* bits: the per-layer settings run() honours. Absent (a table
   * of 2.3 or older) or 0: none. */
  uint32_t features;
} pllm_attention_api;

#ifdef __cplusplus
}
#endif

#endif
