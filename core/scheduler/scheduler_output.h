#pragma once
// What one scheduler step hands to the engine, and what the engine hands back.
//
// StepBatch has exactly the layout of the plugin-facing C struct pllm_batch, so
// the engine points a pllm_batch at these vectors without copying. Rows are
// sequences; decode rows come first (rows [0, num_decode_seqs)).

#include <cstdint>
#include <optional>
#include <vector>

#include "core/kv/block_id.h"
#include "core/kv/kv_cache_manager.h"
#include "core/scheduler/request.h"

namespace pagedllm {

struct StepBatch {
  // Per token (num_tokens entries), rows in order.
  std::vector<std::int32_t> token_ids;
  std::vector<std::int32_t> positions;
  // block_id * block_size + offset: where each token's K/V is written.
  std::vector<std::int64_t> slot_mapping;
  // Per row: row r's tokens are [query_start_loc[r], query_start_loc[r + 1]).
  std::vector<std::int32_t> query_start_loc;  // num_seqs + 1 entries, starts at 0
  // Per row: cached + new tokens, i.e. the context the row attends to.
  std::vector<std::int32_t> seq_lens;
  // Row-major [num_seqs][max_blocks_per_seq], padded with kInvalidBlockId.
  std::vector<std::int32_t> block_tables;
  std::int32_t max_blocks_per_seq = 0;
  std::int32_t block_size = 0;
  // Rows [0, num_decode_seqs) are decodes: 1 new token, or 1 + drafts with speculation.
  std::int32_t num_decode_seqs = 0;
  std::int32_t max_query_len = 0;
  std::int32_t max_seq_len = 0;
  // Token indices whose logits are needed: the last token of a row that
  // completes its sequence's tokens, and every token of a speculative decode row.
  std::vector<std::int32_t> logits_indices;

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
};

// One batch row.
struct ScheduledSequence {
  RequestId request_id = -1;
  SequenceId sequence_id = -1;
  // Tokens whose KV was cached before this step (the row's first position).
  int num_computed_tokens = 0;
  // Tokens of this row in the batch (the row's query length).
  int num_new_tokens = 0;
  // Of those, speculative draft tokens to verify (decode rows only).
  int num_draft_tokens = 0;
  // Tokens to sample from the row's last logits: 0 for a prefill chunk that does
  // not reach the end, n when the prompt of an n > 1 request completes (the
  // sequence forks into n), 1 otherwise (a beam: its candidates, for a BeamStep). A speculative decode row instead
  // returns 1..1+num_draft_tokens accepted tokens.
  int num_samples = 0;
  bool is_decode = false;
  // Index into StepBatch::logits_indices of the row's first sampled position (-1: none).
  int first_logits_index = -1;
  // A prompt_logprobs request's prefill row: the logits of its positions p with
  // p + 1 < prompt length (each predicts prompt token p + 1) start at this index
  // into StepBatch::logits_indices, position num_computed_tokens first.
  int first_prompt_logits_index = -1;
  int num_prompt_logits = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> sequences;  // in batch row order
  StepBatch batch;
  int num_batched_tokens = 0;
  // Device-pool work to do before the forward pass, in this order: swap out
  // (device -> host), swap in (host -> device), then copy (copy-on-write).
  std::vector<BlockMapping> blocks_to_swap_out;
  std::vector<BlockMapping> blocks_to_swap_in;
  std::vector<BlockMapping> blocks_to_copy;
  // Requests preempted this step.
  std::vector<RequestId> preempted_by_recompute;
  std::vector<RequestId> preempted_by_swap;

  bool empty() const { return sequences.empty(); }
};

// The engine's result for one batch row that had logits sampled.
struct SequenceSample {
  SequenceId sequence_id = -1;
  // Decode row: the accepted tokens (1..1 + num_draft_tokens). Prefill row:
  // num_samples tokens; token i goes to the request's i-th sequence when forking.
  std::vector<std::int32_t> token_ids;
  // Drafts the speculator proposes for this sequence's next step.
  std::vector<std::int32_t> draft_token_ids;
};

// One of the next step's beams of a beam-search request: a live beam, extended by a token.
struct BeamContinuation {
  SequenceId parent = -1;
  std::int32_t token = -1;
};

// The engine's choice for a beam-search request after a step that sampled every
// one of its live beams (the rows have no SequenceSample).
struct BeamStep {
  RequestId request_id = -1;
  // The beams to run next, in order. A live beam named k times continues with
  // its first token and forks k - 1 children (copy-on-write); a live beam not
  // named is dropped and its blocks are freed at once. Empty: the search is
  // over and the request finishes.
  std::vector<BeamContinuation> continuations;
};

// What update() made of a BeamStep: the sequence running each continuation, in order.
struct BeamUpdate {
  RequestId request_id = -1;
  std::vector<SequenceId> sequences;
};

// What update() did, for the engine's output stream.
struct SequenceUpdate {
  RequestId request_id = -1;
  SequenceId sequence_id = -1;
  // 0..n-1: which of the request's n outputs (the OpenAI "index").
  int sequence_index = 0;
  std::vector<std::int32_t> new_token_ids;
  // Set when the scheduler finished the sequence (kLength).
  std::optional<FinishReason> finish_reason;
};

struct UpdateResult {
  std::vector<SequenceUpdate> sequences;
  // Requests all of whose sequences are finished; their blocks are released.
  std::vector<RequestId> finished_requests;
  // One per BeamStep given, in order (beam-search requests have no SequenceUpdate).
  std::vector<BeamUpdate> beams;
};

}  // namespace pagedllm
