// Beam search in the engine loop (docs/architecture.md "The engine, concretely"):
// every live beam of a request is a sampler row that reports its best tokens as
// top logprobs; BeamSearch picks the next beams from them; the scheduler forks,
// extends and drops beams as the BeamStep says; the n best hypotheses are the
// request's only output, when the search ends.

#include <algorithm>

#include "core/common/check.h"
#include "core/engine/llm_engine.h"

namespace pagedllm {

void LlmEngine::start_beam_search(LiveRequest& request, int max_new_tokens) {
  const SamplingOptions& options = request.request.sampling;
  std::vector<std::int32_t> finish_tokens = options.stop_token_ids;
  if (!options.ignore_eos) {
    finish_tokens.insert(finish_tokens.end(), defaults_.eos_token_ids.begin(), defaults_.eos_token_ids.end());
  }
  const int top = options.logprobs.value_or(0);
  request.beam = std::make_unique<BeamSearch>(*options.beam_search, max_new_tokens, std::move(finish_tokens), top);
  // Greedy (validated at submit): the row's top logprobs are its raw log-softmax's best tokens.
  pllm_sampling_params& params = request.beam_params;
  params = {};
  params.struct_size = sizeof(pllm_sampling_params);
  params.temperature = 0.0f;
  params.top_p = 1.0f;
  params.repetition_penalty = 1.0f;
  params.num_top_logprobs = std::max(request.beam->candidates_per_beam(), top);
}

std::vector<BeamStep> LlmEngine::step_beams(const BeamCandidates& candidates) {
  std::vector<BeamStep> steps;
  for (const auto& [id, by_sequence] : candidates) {
    const auto found = live_.find(id);
    if (found == live_.end()) continue;  // ended this step (non-finite logits)
    LiveRequest& request = found->second;
    if (request.beam_sequences.empty()) request.beam_sequences.push_back(by_sequence.begin()->first);  // the prompt
    PAGEDLLM_CHECK(by_sequence.size() == request.beam_sequences.size(),
                   "request {}: {} of its {} beams were sampled", id, by_sequence.size(),
                   request.beam_sequences.size());
    std::vector<std::vector<BeamSearch::Candidate>> offered;
    for (const SequenceId beam : request.beam_sequences) offered.push_back(by_sequence.at(beam));
    BeamStep step{id, {}};
    for (const BeamSearch::Continuation& next : request.beam->step(offered)) {
      step.continuations.push_back({request.beam_sequences[static_cast<std::size_t>(next.beam)], next.token});
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

void LlmEngine::finish_beam_steps(const UpdateResult& result) {
  for (const BeamUpdate& update : result.beams) {
    LiveRequest& request = live(update.request_id);
    if (!request.beam->done()) {
      request.beam_sequences = update.sequences;
      continue;
    }
    // The search is over (the scheduler released every beam): the n best hypotheses, best first.
    const SamplingOptions& sampling = request.request.sampling;
    RequestOutput out;
    int tokens = 0;
    const std::vector<BeamSearch::Hypothesis> best = request.beam->best(sampling.n);
    for (std::size_t i = 0; i < best.size(); ++i) {
      request.outputs.emplace_back(tokenizer_, sampling, request.request.prompt_token_ids, defaults_.eos_token_ids);
      request.finished.push_back(true);
      request.last_token_time.emplace_back();
      SequenceOutput& text = request.outputs.back();
      SequenceDelta delta;
      delta.index = static_cast<int>(i);
      bool stopped = false;
      for (const TokenLogprob& token : best[i].tokens) {
        if (sampling.logprobs) delta.logprobs.push_back(token);
        ++tokens;
        if (text.push(token.token_id, delta)) {
          stopped = true;  // its finish token (the search ends a hypothesis on nothing else but max_tokens)
          break;
        }
      }
      if (!stopped) text.finish(FinishReason::kLength, delta);
      out.sequences.push_back(std::move(delta));
    }
    // Usage counts the returned hypotheses' tokens (vLLM's beam search does too).
    request.num_generated_tokens = tokens;
    const auto now = Clock::now();
    request.first_token = now;
    update_metrics([&](EngineMetrics& m) {
      m.generation_tokens_total += tokens;
      m.time_to_first_token.observe(seconds_between(request.arrival, now));
    });
    end_request(update.request_id, request, out, FinishReason::kStop, std::nullopt);
  }
}

}  // namespace pagedllm
