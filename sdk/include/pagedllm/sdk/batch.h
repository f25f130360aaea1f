#ifndef PAGEDLLM_SDK_BATCH_H
#define PAGEDLLM_SDK_BATCH_H

#include <stdint.h>

#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of the KV cache the engine needs: what an attention backend sizes
 * and allocates. Layers include draft layers of a speculator, appended after
 * the target model's. */
typedef struct pllm_kv_cache_spec {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size; /* tokens per block */
  pllm_dtype dtype;
} pllm_kv_cache_spec;

/* One block copy: copy-on-write (device -> device) or swap (device <-> host).
 * Frozen for the whole major: it has no struct_size and is passed as a plain
 * array, indexed by sizeof(pllm_block_copy). A (source, destination) pair of
 * block ids is all a whole-block copy can mean; a copy of another shape (part
 * of a block, across layers) would be a new function slot taking its own
 * growable struct, so a stride here would only cost every call. */
typedef struct pllm_block_copy {
  int64_t src;
  int64_t dst;
} pllm_block_copy;

/* One engine step, planned by core in host memory. Sequences are laid out one
 * after another; decode sequences (one new token, or 1 + K lookahead tokens
 * under speculative decoding) come first. All pointers are host memory owned
 * by core and valid for the duration of the step.
 *
 *   token rows of sequence s:  [query_start_loc[s], query_start_loc[s + 1])
 *   its context after the step: seq_lens[s] tokens, of which the last
 *                               (query_start_loc[s+1] - query_start_loc[s]) are new
 *   token at position p of s:  block block_tables[s * max_blocks_per_seq + p / block_size],
 *                               offset p % block_size
 *   slot_mapping[t]:            block * block_size + offset where token row t's K/V go,
 *                               or -1 for a row whose K/V must not be written
 *
 * What a row attends to. In each layer the backend first writes the K/V of every
 * row with a slot, then row t of sequence s at position p attends over positions
 * [0, p] of s, reading every one of them from the cache through block_tables:
 *   - a row with a slot sees its own new K/V and those of the step's earlier new
 *     tokens (causal inside the step), since they were just written;
 *   - a slot -1 row attends to itself and to the step's other new tokens too, but
 *     only as the cache holds them: its own key/value rows are never read, and a
 *     position the step does not write reads what an earlier step left there.
 *     So a slot -1 row is a re-read of positions already cached (a recomputed
 *     prefix, a verification pass over written drafts); core gives it a slot
 *     whenever its position is not cached yet. attention_cpu and attention_cuda
 *     both behave so (tests/plugins/attention_*: "slot -1"). */
typedef struct pllm_batch {
  uint32_t struct_size;
  int32_t num_seqs;
  int32_t num_tokens;
  int32_t num_decode_seqs;
  int32_t max_query_len;
  int32_t max_seq_len;
  int32_t block_size;
  int32_t max_blocks_per_seq;
  const int32_t* token_ids;       /* [num_tokens] */
  const int32_t* positions;       /* [num_tokens] */
  const int64_t* slot_mapping;    /* [num_tokens] */
  const int32_t* query_start_loc; /* [num_seqs + 1] */
  const int32_t* seq_lens;        /* [num_seqs] */
  const int32_t* block_tables;    /* [num_seqs * max_blocks_per_seq], unused entries -1 */
  int32_t num_logits;
  const int32_t* logits_indices;  /* [num_logits] token rows whose logits are needed */
  int32_t num_hidden;
  const int32_t* hidden_indices;  /* [num_hidden] token rows whose last hidden state is needed */
} pllm_batch;

#ifdef __cplusplus
}
#endif

#endif
