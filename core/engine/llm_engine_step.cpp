// One engine step (docs/architecture.md "One engine step"): schedule, the model
// runner's block operations, plan and forward, sampling (and verification of
// drafts), ending requests whose logits are not finite, scheduler update,
// publishing, drafting.

#include "core/engine/llm_engine.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "core/engine/plugin_batch.h"
#include "core/engine/seeds.h"

namespace pagedllm {
namespace {

std::vector<pllm_block_copy> to_block_copies(const std::vector<BlockMapping>& mappings) {
  std::vector<pllm_block_copy> copies;
  copies.reserve(mappings.size());
  for (const BlockMapping& m : mappings) copies.push_back({m.src, m.dst});
  return copies;
}

}  // namespace

bool LlmEngine::step() {
  SchedulerOutput output = scheduler_->schedule();
  if (output.empty()) return false;
  const auto started = Clock::now();
  step_started_ns_ = started.time_since_epoch().count();

  for (const ScheduledSequence& row : output.sequences) {
    LiveRequest& request = live(row.request_id);
    if (!request.first_scheduled) {
      request.first_scheduled = started;
      request.num_cached_prompt_tokens = row.num_computed_tokens;
      update_metrics([&](EngineMetrics& m) { m.queue_time.observe(seconds_between(request.arrival, started)); });
    }
  }

  std::vector<std::int32_t> first_hidden_row;
  const std::vector<std::int32_t> hidden_rows = hidden_indices(output, first_hidden_row);
  const std::vector<pllm_block_copy> swap_out = to_block_copies(output.blocks_to_swap_out);
  const std::vector<pllm_block_copy> swap_in = to_block_copies(output.blocks_to_swap_in);
  const std::vector<pllm_block_copy> copies = to_block_copies(output.blocks_to_copy);
  const ModelStep model_step{plugin_batch_view(output.batch, hidden_rows), swap_out, swap_in, copies};
  // Every other rank does the same block operations and forward on its shard.
  if (tensor_parallel_) tensor_parallel_->send_step(model_step);
  const ForwardOutputs forward = runner_->execute(model_step);
  const pllm_batch& batch = model_step.batch;

  StepSamples sampled;
  BeamCandidates beam_candidates;
  std::vector<SequenceSample> samples;
  if (batch.num_logits > 0) {
    const pllm_tensor& logits = forward.logits;
    std::vector<RequestId> faulty;
    score_prompts(output, logits, faulty);
    samples = sample(output, logits, sampled, beam_candidates, faulty);
    if (speculative_) {
      std::vector<SequenceSample> verified = verify_drafts(output, logits, faulty);
      samples.insert(samples.end(), std::make_move_iterator(verified.begin()),
                     std::make_move_iterator(verified.end()));
    }
    if (!faulty.empty()) {
      // A faulty request's other rows (its other sequences) commit nothing either.
      std::unordered_set<SequenceId> dropped;
      for (const ScheduledSequence& row : output.sequences) {
        if (std::find(faulty.begin(), faulty.end(), row.request_id) != faulty.end()) dropped.insert(row.sequence_id);
      }
      std::erase_if(samples, [&](const SequenceSample& s) { return dropped.contains(s.sequence_id); });
      end_requests_with_non_finite_logits(faulty);
    }
  }
  const std::vector<BeamStep> beam_steps = step_beams(beam_candidates);  // faulty requests ended above
  const UpdateResult result = scheduler_->update(output, samples, beam_steps);
  publish(result, sampled);
  finish_beam_steps(result);
  if (speculative_ && batch.num_hidden > 0) propose_drafts(output, forward.hidden, first_hidden_row);

  const auto finished = Clock::now();
  const std::int64_t duration = (finished - started).count();
  if (duration > longest_step_ns_) longest_step_ns_ = duration;
  step_started_ns_ = 0;
  const SchedulerStats stats = scheduler_->stats();
  update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
  return true;
}

void LlmEngine::end_requests_with_non_finite_logits(const std::vector<RequestId>& flagged) {
  std::vector<RequestId> faulty = flagged;
  std::sort(faulty.begin(), faulty.end());
  faulty.erase(std::unique(faulty.begin(), faulty.end()), faulty.end());
  for (const RequestId id : faulty) {
    const std::string error = fmt::format("plugin '{}': forward returned non-finite logits (NaN or +inf, or all "
                                          "-inf) for this request; it was ended, the engine serves the others",
                                          model_instance_.library().name());
    log_->error("request {}: {}", id, error);
    scheduler_->abort(id);
    RequestOutput out;
    end_request(id, live(id), out, FinishReason::kAborted, error);
  }
}

void LlmEngine::score_prompts(const SchedulerOutput& output, const pllm_tensor& logits,
                              std::vector<RequestId>& faulty) {
  struct Scored {
    RequestId request = -1;
    std::size_t entry = 0;  // index into the request's prompt_logprobs
  };
  std::vector<pllm_sample_row> rows;
  std::vector<Scored> scored;
  int max_top = 0;
  for (const ScheduledSequence& row : output.sequences) {
    if (row.num_prompt_logits == 0) continue;
    LiveRequest& request = live(row.request_id);
    const std::vector<std::int32_t>& prompt = request.request.prompt_token_ids;
    const int top = request.request.sampling.prompt_logprobs.value_or(0);
    pllm_sampling_params& params = request.prompt_params;
    params = {};
    params.struct_size = sizeof(pllm_sampling_params);
    params.top_p = 1.0f;
    params.repetition_penalty = 1.0f;
    params.num_top_logprobs = top;
    max_top = std::max(max_top, top);
    for (int j = 0; j < row.num_prompt_logits; ++j) {
      // Position p's logits predict prompt token p + 1. A recomputed prompt
      // (after preemption) reports nothing twice.
      const auto entry = static_cast<std::size_t>(row.num_computed_tokens + j);
      if (entry < request.prompt_logprobs.size()) continue;
      request.prompt_logprobs.resize(entry + 1);
      pllm_sample_row out{};
      out.struct_size = sizeof(pllm_sample_row);
      out.params = &params;
      out.prompt_token_ids = prompt.data();
      out.num_prompt_tokens = static_cast<std::int32_t>(prompt.size());
      out.output_token_ids = prompt.data() + prompt.size();
      out.logits_row = row.first_prompt_logits_index + j;
      out.flags = PLLM_SAMPLE_ROW_SCORE;
      out.scored_token_id = prompt[entry + 1];
      rows.push_back(out);
      scored.push_back({row.request_id, entry});
    }
  }
  if (rows.empty()) return;
  const std::size_t n = rows.size();
  std::vector<std::int32_t> tokens(n), status(n);
  std::vector<float> logprobs(n);
  std::vector<std::int32_t> top_tokens(n * static_cast<std::size_t>(max_top));
  std::vector<float> top_logprobs(n * static_cast<std::size_t>(max_top));
  // Prompt tokens are scored unconstrained: a constraint governs only what a request generates.
  pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(n), sizeof(pllm_sample_row),
                          rows.data(), &logits, nullptr, 0, nullptr};
  pllm_sample_output out{sizeof(pllm_sample_output), tokens.data(), logprobs.data(), max_top,
                         max_top > 0 ? top_tokens.data() : nullptr, max_top > 0 ? top_logprobs.data() : nullptr,
                         status.data()};
  pllm_error error{};
  check_plugin_call(sampler_.api().sample(sampler_.get(), &batch, &out, &error), error, sampler_.library(),
                    "sample (prompt logprobs)");
  for (std::size_t i = 0; i < n; ++i) {
    if (status[i] == PLLM_SAMPLE_NON_FINITE_LOGITS) {
      faulty.push_back(scored[i].request);
      continue;
    }
    if (status[i] != PLLM_SAMPLE_OK || tokens[i] != rows[i].scored_token_id) {
      throw PluginCallError(PLLM_ERROR_INTERNAL,
                            fmt::format("plugin '{}': a scoring row returned status {} and token {} for token {}",
                                        sampler_.library().name(), status[i], tokens[i], rows[i].scored_token_id));
    }
    LiveRequest& request = live(scored[i].request);
    TokenLogprob& entry = request.prompt_logprobs[scored[i].entry];
    entry.token_id = tokens[i];
    entry.logprob = logprobs[i];
    const int wanted = request.request.sampling.prompt_logprobs.value_or(0);
    for (int k = 0; k < wanted; ++k) {
      const std::size_t at = i * static_cast<std::size_t>(max_top) + static_cast<std::size_t>(k);
      if (top_tokens[at] < 0) break;
      entry.top.emplace_back(top_tokens[at], top_logprobs[at]);
    }
  }
}

std::vector<SequenceSample> LlmEngine::sample(const SchedulerOutput& output, const pllm_tensor& logits,
                                              StepSamples& sampled, BeamCandidates& beams,
                                              std::vector<RequestId>& faulty) {
  // One sampler row per token to sample. A prompt that completes for an n > 1
  // request is sampled n times from the same logits row, once per sequence.
  struct Slot {
    std::size_t row = 0;  // index into output.sequences
    int sequence_index = 0;
    int logits_row = 0;
    const Sequence* sequence = nullptr;  // the row's sequence (the parent when forking)
  };
  std::vector<Slot> slots;
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    if (row.num_samples == 0 || row.num_draft_tokens > 0) continue;  // drafts: verify_drafts()
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    if (state == nullptr) continue;
    int index = 0;
    for (std::size_t s = 0; s < state->sequences.size(); ++s) {
      if (state->sequences[s].id == row.sequence_id) index = static_cast<int>(s);
    }
    const Sequence* sequence = &state->sequences[static_cast<std::size_t>(index)];
    for (int j = 0; j < row.num_samples; ++j) {
      slots.push_back({r, row.num_samples > 1 ? j : index, row.first_logits_index, sequence});
    }
  }

  if (slots.empty()) return {};
  std::vector<pllm_sample_row> rows(slots.size());
  int max_top = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const ScheduledSequence& row = output.sequences[slots[i].row];
    LiveRequest& request = live(row.request_id);
    const SamplingOptions& options = request.request.sampling;
    const int index = slots[i].sequence_index;
    if (!request.beam && static_cast<int>(request.params.size()) <= index) {
      request.logit_bias_ids.clear();
      request.logit_bias_values.clear();
      for (const auto& [token, bias] : options.logit_bias) {
        request.logit_bias_ids.push_back(token);
        request.logit_bias_values.push_back(bias);
      }
      // min_tokens holds back what would end the sequence: EOS and the stop token ids.
      request.min_tokens_banned_ids = options.stop_token_ids;
      if (!options.ignore_eos) {
        request.min_tokens_banned_ids.insert(request.min_tokens_banned_ids.end(), defaults_.eos_token_ids.begin(),
                                             defaults_.eos_token_ids.end());
      }
      request.params.resize(static_cast<std::size_t>(options.n));
      for (int s = 0; s < options.n; ++s) {
        pllm_sampling_params& p = request.params[static_cast<std::size_t>(s)];
        p.struct_size = sizeof(pllm_sampling_params);
        p.temperature = options.temperature;
        p.top_p = options.top_p;
        p.top_k = std::max(0, options.top_k);
        p.min_p = options.min_p;
        p.presence_penalty = options.presence_penalty;
        p.frequency_penalty = options.frequency_penalty;
        p.repetition_penalty = options.repetition_penalty;
        p.seed = sequence_seed(request.seed, s);
        p.num_top_logprobs = options.logprobs.value_or(0);
        p.num_logit_bias = static_cast<std::int32_t>(request.logit_bias_ids.size());
        p.logit_bias_token_ids = request.logit_bias_ids.data();
        p.logit_bias_values = request.logit_bias_values.data();
        p.min_tokens = options.min_tokens;
        p.num_min_tokens_banned_ids = static_cast<std::int32_t>(request.min_tokens_banned_ids.size());
        p.min_tokens_banned_ids = request.min_tokens_banned_ids.data();
      }
    }
    max_top = std::max(max_top, request.beam ? request.beam_params.num_top_logprobs : options.logprobs.value_or(0));
    const Sequence* sequence = slots[i].sequence;
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    const bool forking = row.num_samples > 1;
    pllm_sample_row& out = rows[i];
    out.struct_size = sizeof(pllm_sample_row);
    out.params = request.beam ? &request.beam_params : &request.params[static_cast<std::size_t>(index)];
    out.prompt_token_ids = request.request.prompt_token_ids.data();
    out.num_prompt_tokens = static_cast<std::int32_t>(prompt_len);
    // Output tokens so far: none at the prompt; after it, the sequence's tail
    // (after recompute preemption a prefill row also continues a sequence).
    const std::size_t num_outputs = forking ? 0 : sequence->token_ids.size() - prompt_len;
    out.output_token_ids = sequence->token_ids.data() + prompt_len;
    out.num_output_tokens = static_cast<std::int32_t>(num_outputs);
    out.random_offset = num_outputs;
    // The sampler gathers the row on the model's device.
    out.logits_row = slots[i].logits_row;
  }

  const std::size_t n = slots.size();
  std::vector<std::int32_t> tokens(n);
  std::vector<float> logprobs(n);
  std::vector<std::int32_t> top_tokens(n * static_cast<std::size_t>(max_top));
  std::vector<float> top_logprobs(n * static_cast<std::size_t>(max_top));
  std::vector<std::int32_t> status(n);
  pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(n), sizeof(pllm_sample_row),
                          rows.data(), &logits, nullptr, 0, nullptr};
  // Structured output: each constrained row's matcher fills its mask row (one call for the batch).
  std::vector<pllm_constraint_matcher*> matchers(n, nullptr);
  std::vector<std::uint32_t> bitmask;
  std::vector<std::uint8_t> constrained(n, 0);
  if (structured_output_) {
    std::vector<pllm_constraint_matcher*> to_fill;
    std::vector<std::size_t> filled_rows;
    for (std::size_t i = 0; i < n; ++i) {
      matchers[i] = constraint_matcher(live(output.sequences[slots[i].row].request_id), slots[i].sequence_index);
      if (matchers[i] == nullptr) continue;
      to_fill.push_back(matchers[i]);
      filled_rows.push_back(i);
    }
    if (!to_fill.empty()) {
      const auto words = static_cast<std::size_t>(structured_output_->words());
      std::vector<std::uint32_t> filled(to_fill.size() * words);
      structured_output_->fill_bitmask(to_fill, filled.data());
      bitmask.assign(n * words, 0);
      for (std::size_t k = 0; k < filled_rows.size(); ++k) {
        std::copy_n(filled.begin() + static_cast<std::ptrdiff_t>(k * words), words,
                    bitmask.begin() + static_cast<std::ptrdiff_t>(filled_rows[k] * words));
        constrained[filled_rows[k]] = 1;
      }
      batch.token_bitmask = bitmask.data();
      batch.bitmask_words = static_cast<std::int32_t>(words);
      batch.constrained_rows = constrained.data();
    }
  }
  // The sampled tokens' logprobs only for requests that report them: for the others the sampler skips the
  // row's log-softmax (an exponential per vocabulary entry, every step).
  const bool wants_logprobs = std::any_of(slots.begin(), slots.end(), [&](const Slot& slot) {
    return live(output.sequences[slot.row].request_id).request.sampling.logprobs.has_value();
  });
  pllm_sample_output out{sizeof(pllm_sample_output), tokens.data(), wants_logprobs ? logprobs.data() : nullptr,
                         max_top, max_top > 0 ? top_tokens.data() : nullptr,
                         max_top > 0 ? top_logprobs.data() : nullptr, status.data()};
  pllm_error error{};
  check_plugin_call(sampler_.api().sample(sampler_.get(), &batch, &out, &error), error, sampler_.library(),
                    "sample");

  std::vector<SequenceSample> samples;
  for (std::size_t i = 0; i < n; ++i) {
    const ScheduledSequence& row = output.sequences[slots[i].row];
    if (status[i] == PLLM_SAMPLE_NON_FINITE_LOGITS) {
      faulty.push_back(row.request_id);
      continue;
    }
    if (status[i] != PLLM_SAMPLE_OK) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': sample returned row status {}",
                                                             sampler_.library().name(), status[i]));
    }
    if (tokens[i] < 0 || tokens[i] >= model_info_.vocab_size) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': sampled token {} outside the "
                                                             "vocabulary of {}",
                                                             sampler_.library().name(), tokens[i],
                                                             model_info_.vocab_size));
    }
    if (matchers[i] && !structured_output_->accept(matchers[i], tokens[i])) {
      // The sampler drew a token its mask forbade: a sampler plugin fault, not the request's.
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': sampled token {} outside the row's "
                                                             "structured-output mask",
                                                             sampler_.library().name(), tokens[i]));
    }
    if (live(row.request_id).beam) {
      // Beam rows offer their best tokens to the search (step_beams()), best first.
      std::vector<BeamSearch::Candidate>& offered = beams[row.request_id][row.sequence_id];
      for (int k = 0; k < max_top; ++k) {
        const std::size_t at = i * static_cast<std::size_t>(max_top) + static_cast<std::size_t>(k);
        if (top_tokens[at] < 0) break;
        offered.push_back({top_tokens[at], top_logprobs[at]});
      }
      continue;
    }
    if (samples.empty() || samples.back().sequence_id != row.sequence_id) {
      samples.push_back({row.sequence_id, {}, {}});
    }
    samples.back().token_ids.push_back(tokens[i]);
    SampledToken& token = sampled[{row.request_id, slots[i].sequence_index}];
    token.token = tokens[i];
    token.logprob.token_id = tokens[i];
    token.logprob.logprob = logprobs[i];
    const int wanted = live(row.request_id).request.sampling.logprobs.value_or(0);
    for (int k = 0; k < wanted; ++k) {
      const std::size_t at = i * static_cast<std::size_t>(max_top) + static_cast<std::size_t>(k);
      if (top_tokens[at] < 0) break;
      token.logprob.top.emplace_back(top_tokens[at], top_logprobs[at]);
    }
  }
  return samples;
}

pllm_constraint_matcher* LlmEngine::constraint_matcher(LiveRequest& request, int index) {
  if (!request.grammar) return nullptr;
  const auto i = static_cast<std::size_t>(index);
  if (request.matchers.size() <= i) request.matchers.resize(i + 1);
  if (!request.matchers[i]) request.matchers[i] = structured_output_->make_matcher(request.grammar);
  return request.matchers[i]->get();
}

}  // namespace pagedllm
