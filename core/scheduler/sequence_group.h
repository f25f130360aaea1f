#pragma once
// The scheduler's live state of a request: a group of n sequences that share
// the prompt. Before the prompt is first complete only sequence 0 exists; the
// others are forked from it when its prompt logits are sampled n times.

#include <cstdint>
#include <optional>
#include <vector>

#include "core/kv/kv_cache_manager.h"
#include "core/scheduler/request.h"

namespace pagedllm {

enum class RequestStatus { kWaiting, kRunning, kSwapped };

struct Sequence {
  SequenceId id = -1;
  // Prompt followed by the accepted output tokens (never unverified drafts).
  std::vector<std::int32_t> token_ids;
  // Leading tokens whose KV is in the cache. A decoding sequence has exactly
  // one uncomputed token (the last sampled one).
  int num_computed_tokens = 0;
  // Draft tokens proposed by the speculator for the next step (≤ num_lookahead_tokens).
  std::vector<std::int32_t> draft_token_ids;
  std::optional<FinishReason> finish_reason;

  bool finished() const { return finish_reason.has_value(); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
};

struct SequenceGroup {
  Request request;
  // Order of arrival: FCFS order and the tie-break of priorities.
  std::uint64_t arrival = 0;
  RequestStatus status = RequestStatus::kWaiting;
  std::vector<Sequence> sequences;
  bool forked = false;

  int prompt_len() const { return static_cast<int>(request.prompt_token_ids.size()); }
  // Sequences this request may run at once: n until forked, then the live ones
  // (a beam group: always n, its width).
  int num_reserved_sequences() const;
  std::vector<SequenceId> live_sequence_ids() const;
  Sequence* find_sequence(SequenceId id);
  const Sequence* find_sequence(SequenceId id) const;
  // Decoding: every live sequence has produced output and has exactly one uncomputed token.
  bool is_decoding() const;
  bool all_finished() const;
};

}  // namespace pagedllm
