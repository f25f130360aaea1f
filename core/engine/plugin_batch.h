#pragma once
// The plugin-facing view of a planned step: a pllm_batch pointing into a
// StepBatch's vectors (same layout, no copy), with the hidden rows asked for.

#include <cstdint>
#include <vector>

#include "core/scheduler/scheduler_output.h"
#include "pagedllm/sdk/batch.h"

namespace pagedllm {

// `b` and `hidden_indices` must outlive the returned view.
inline pllm_batch plugin_batch_view(const StepBatch& b, const std::vector<std::int32_t>& hidden_indices) {
  pllm_batch batch{};
  batch.struct_size = sizeof(pllm_batch);
  batch.num_seqs = b.num_seqs();
  batch.num_tokens = b.num_tokens();
  batch.num_decode_seqs = b.num_decode_seqs;
  batch.max_query_len = b.max_query_len;
  batch.max_seq_len = b.max_seq_len;
  batch.block_size = b.block_size;
  batch.max_blocks_per_seq = b.max_blocks_per_seq;
  batch.token_ids = b.token_ids.data();
  batch.positions = b.positions.data();
  batch.slot_mapping = b.slot_mapping.data();
  batch.query_start_loc = b.query_start_loc.data();
  batch.seq_lens = b.seq_lens.data();
  batch.block_tables = b.block_tables.data();
  batch.num_logits = static_cast<std::int32_t>(b.logits_indices.size());
  batch.logits_indices = b.logits_indices.data();
  batch.num_hidden = static_cast<std::int32_t>(hidden_indices.size());
  batch.hidden_indices = hidden_indices.empty() ? nullptr : hidden_indices.data();
  return batch;
}

}  // namespace pagedllm
