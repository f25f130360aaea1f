#pragma once
// The one place a model batch is laid out: the target's step (Scheduler) and
// the draft's batches (SpeculativeDecoder) and the KV sizing's profiling step
// describe their rows as BatchRows and get a StepBatch (the arrays of pllm_batch)
// from build_step_batch().
//
//   BatchRow{tokens, first_position, block_table, num_logits, is_decode}
//     -> token ids and positions (first_position + j), slot mapping from the block table,
//        query_start_loc, seq_lens (first_position + tokens), padded block tables,
//        logits rows, num_decode_seqs / max_query_len / max_seq_len.

#include <cstdint>
#include <span>
#include <vector>

#include "core/kv/block_id.h"
#include "core/scheduler/scheduler_output.h"

namespace pagedllm {

struct BatchRow {
  // The row's new tokens (at least one); token j is at position first_position + j.
  std::span<const std::int32_t> tokens;
  // Tokens before the row's whose KV is cached: the row attends to them.
  int first_position = 0;
  // The sequence's blocks; they cover every position the row writes.
  std::span<const BlockId> block_table;
  // Logits for the row's last num_logits tokens: 0 for a prefill chunk that does not reach the
  // end, 1 to sample the next token, every token for a speculative decode row (each verifies a draft).
  int num_logits = 0;
  // Decode rows come first in the batch (pllm_batch's order), each kind in the order given.
  bool is_decode = false;
};

struct BuiltBatch {
  StepBatch batch;
  // Per given row: its row in the batch.
  std::vector<int> batch_row;
  // Per given row: the index into batch.logits_indices of its first logits row (-1: none).
  // Logits rows follow the order the rows were given in, not the batch's.
  std::vector<int> first_logits_index;
};

// Throws InternalError (a caller's bug) for a row without tokens, more logits than tokens, or a
// position without a block in its row's table.
BuiltBatch build_step_batch(std::span<const BatchRow> rows, int block_size);

}  // namespace pagedllm
