// The step's speculative part: which rows speculate, the hidden rows the draft
// reads, verifying last step's drafts against this step's logits, and proposing
// the next step's (SpeculativeDecoder does the work; this maps batch rows to it).

#include "core/engine/llm_engine.h"

#include <algorithm>
#include <span>

namespace pagedllm {

bool LlmEngine::speculative_row(const ScheduledSequence& row) const {
  if (!speculative_) return false;
  const SequenceGroup* state = scheduler_->request_state(row.request_id);
  return state != nullptr && state->request.speculative;
}

std::vector<std::int32_t> LlmEngine::hidden_indices(const SchedulerOutput& output,
                                                    std::vector<std::int32_t>& first_hidden_row) const {
  // The draft reads the target's feature at every position it fills its own KV for.
  std::vector<std::int32_t> rows;
  first_hidden_row.assign(output.sequences.size(), -1);
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    if (!speculative_row(output.sequences[r])) continue;
    first_hidden_row[r] = static_cast<std::int32_t>(rows.size());
    for (std::int32_t t = output.batch.query_start_loc[r]; t < output.batch.query_start_loc[r + 1]; ++t) {
      rows.push_back(t);
    }
  }
  return rows;
}

std::vector<SequenceSample> LlmEngine::verify_drafts(const SchedulerOutput& output, const pllm_tensor& logits,
                                                     std::vector<RequestId>& faulty) {
  std::vector<VerifyRequest> requests;
  for (const ScheduledSequence& row : output.sequences) {
    if (row.num_draft_tokens == 0) continue;
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    if (state == nullptr) continue;
    const Sequence* sequence = state->find_sequence(row.sequence_id);
    LiveRequest& request = live(row.request_id);
    const std::span<const std::int32_t> tokens(sequence->token_ids);
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    requests.push_back({row.request_id, row.sequence_id,
                        std::span<const std::int32_t>(sequence->draft_token_ids)
                            .first(static_cast<std::size_t>(row.num_draft_tokens)),
                        row.first_logits_index, &request.params.front(), tokens.first(prompt_len),
                        tokens.subspan(prompt_len), constraint_matcher(request, 0)});
  }
  if (requests.empty()) return {};
  std::vector<std::uint8_t> non_finite;
  std::vector<std::vector<std::int32_t>> accepted = speculative_->verify(requests, logits, non_finite);
  update_metrics([&](EngineMetrics& m) {
    m.spec_decode_accepted_per_position.resize(static_cast<std::size_t>(speculative_->num_speculative_tokens()), 0);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (non_finite[i]) continue;
      const auto num_accepted = static_cast<std::int64_t>(accepted[i].size()) - 1;  // the last token is not a draft
      ++m.spec_decode_num_drafts;
      m.spec_decode_draft_tokens += static_cast<std::int64_t>(requests[i].drafts.size());
      m.spec_decode_accepted_tokens += num_accepted;
      for (std::int64_t d = 0; d < num_accepted; ++d) {
        ++m.spec_decode_accepted_per_position[static_cast<std::size_t>(d)];
      }
    }
  });
  std::vector<SequenceSample> samples;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (non_finite[i]) {
      faulty.push_back(requests[i].request);
      continue;
    }
    samples.push_back({requests[i].sequence, std::move(accepted[i]), {}});
  }
  return samples;
}

void LlmEngine::propose_drafts(const SchedulerOutput& output, const pllm_tensor& hidden,
                               const std::vector<std::int32_t>& first_hidden_row) {
  const int k = speculative_->num_speculative_tokens();
  std::vector<DraftRequest> requests;
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    // Requests that ended this step are no longer speculative rows: nothing to draft.
    if (first_hidden_row[r] < 0 || !speculative_row(row)) continue;
    const std::int32_t row_hidden = first_hidden_row[r];
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    const Sequence* sequence = state->find_sequence(row.sequence_id);
    if (sequence == nullptr || sequence->finished()) continue;  // its blocks are gone
    const int computed = sequence->num_computed_tokens - row.num_computed_tokens;
    if (computed <= 0) continue;
    LiveRequest& request = live(row.request_id);
    DraftRequest draft;
    draft.request = row.request_id;
    draft.sequence = row.sequence_id;
    draft.block_table = std::span<const std::int32_t>(output.batch.block_tables)
                            .subspan(r * static_cast<std::size_t>(output.batch.max_blocks_per_seq),
                                     static_cast<std::size_t>(output.batch.max_blocks_per_seq));
    draft.first_position = row.num_computed_tokens;
    for (int j = 0; j < computed; ++j) {
      draft.next_tokens.push_back(sequence->token_ids[static_cast<std::size_t>(row.num_computed_tokens + j + 1)]);
      draft.hidden_rows.push_back(row_hidden + j);
    }
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    const int num_tokens = sequence->num_tokens();
    const int outputs = num_tokens - static_cast<int>(prompt_len);
    if (row.num_samples > 0) {
      // Drafts the next step can use: within max_tokens and the context.
      draft.num_drafts = std::min({k, state->request.max_tokens - outputs - 1,
                                   limits_.max_model_len - num_tokens});
      draft.num_drafts = std::max(0, draft.num_drafts);
      draft.params = &request.params.front();
      if (draft.num_drafts > 0) draft.matcher = constraint_matcher(request, 0);
    }
    const std::span<const std::int32_t> tokens(sequence->token_ids);
    draft.prompt = tokens.first(prompt_len);
    draft.outputs = tokens.subspan(prompt_len);
    requests.push_back(std::move(draft));
  }
  if (requests.empty()) return;
  const std::vector<std::vector<std::int32_t>> drafts = speculative_->propose(requests, hidden);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!drafts[i].empty()) scheduler_->set_draft_tokens(requests[i].sequence, drafts[i]);
  }
}

}  // namespace pagedllm
