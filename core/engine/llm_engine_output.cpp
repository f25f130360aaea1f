// Output delivery: each step's new tokens through SequenceOutput (detokenizing,
// stop checks) to the request's callback, and a request's last output when it ends.

#include "core/engine/llm_engine.h"

#include <algorithm>
#include <iterator>

namespace pagedllm {

void LlmEngine::publish(const UpdateResult& result, const StepSamples& sampled) {
  const auto now = Clock::now();
  std::map<RequestId, RequestOutput> outputs;  // ordered: deterministic callback order
  std::int64_t new_tokens = 0;
  std::vector<double> first_token_latencies;
  std::vector<double> inter_token_gaps;
  for (const SequenceUpdate& update : result.sequences) {
    if (update.new_token_ids.empty() && !update.finish_reason) continue;
    LiveRequest& request = live(update.request_id);
    const auto index = static_cast<std::size_t>(update.sequence_index);
    while (request.outputs.size() <= index) {
      request.outputs.emplace_back(tokenizer_, request.request.sampling, request.request.prompt_token_ids,
                                   defaults_.eos_token_ids);
      request.last_token_time.emplace_back();
      request.finished.push_back(false);
    }
    RequestOutput& out = outputs[update.request_id];
    SequenceDelta delta;
    delta.index = update.sequence_index;
    bool stopped = false;
    for (const std::int32_t token : update.new_token_ids) {
      if (request.request.sampling.logprobs) {
        const auto found = sampled.find({update.request_id, update.sequence_index});
        if (found != sampled.end() && found->second.token == token) delta.logprobs.push_back(found->second.logprob);
      }
      ++new_tokens;
      ++request.num_generated_tokens;
      if (request.outputs[index].push(token, delta)) {
        stopped = true;
        break;
      }
    }
    if (!update.new_token_ids.empty()) {
      if (!request.first_token) {
        request.first_token = now;
        first_token_latencies.push_back(seconds_between(request.arrival, now));
      }
      if (const auto last = request.last_token_time[index]) {
        inter_token_gaps.push_back(seconds_between(*last, now));
      }
      request.last_token_time[index] = now;
    }
    if (stopped && !update.finish_reason) {
      scheduler_->finish_sequence(update.sequence_id, FinishReason::kStop);
    } else if (!stopped && update.finish_reason) {
      request.outputs[index].finish(*update.finish_reason, delta);
    }
    if (delta.finish_reason) request.finished[index] = true;
    out.sequences.push_back(std::move(delta));
  }
  // One lock for the step's observations, not one per sequence.
  update_metrics([&](EngineMetrics& m) {
    m.generation_tokens_total += new_tokens;
    for (const double latency : first_token_latencies) m.time_to_first_token.observe(latency);
    for (const double gap : inter_token_gaps) m.inter_token_latency.observe(gap);
  });

  for (auto& [id, out] : outputs) {
    LiveRequest& request = live(id);
    if (scheduler_->request_state(id) == nullptr) {
      end_request(id, request, out, FinishReason::kStop, std::nullopt);
      continue;
    }
    out.request_id = id;
    attach_prompt_logprobs(request, out);
    out.num_prompt_tokens = static_cast<int>(request.request.prompt_token_ids.size());
    out.num_cached_prompt_tokens = request.num_cached_prompt_tokens;
    out.num_generated_tokens = request.num_generated_tokens;
    deliver(request.callback, std::move(out));
  }
}

void LlmEngine::attach_prompt_logprobs(LiveRequest& request, RequestOutput& out) {
  if (!request.request.sampling.prompt_logprobs || request.prompt_logprobs_sent) return;
  if (request.prompt_logprobs.size() + 1 < request.request.prompt_token_ids.size()) return;  // still computing
  out.prompt_logprobs = request.prompt_logprobs;  // kept: a recomputed prompt must not score again
  request.prompt_logprobs_sent = true;
}

void LlmEngine::deliver(const OutputCallback& callback, RequestOutput&& out) {
  const RequestId id = out.request_id;
  try {
    callback(std::move(out));
  } catch (const std::exception& e) {
    log_->error("the output callback of request {} threw: {}", id, e.what());
  }
}

// Sends the request's last output: `out` holds this step's deltas; every
// sequence without a finish reason yet ends with `reason`.
void LlmEngine::end_request(RequestId id, LiveRequest& request, RequestOutput& out, FinishReason reason,
                            const std::optional<std::string>& error) {
  const auto now = Clock::now();
  const int n = request.request.sampling.n;
  while (static_cast<int>(request.finished.size()) < n) {
    request.outputs.emplace_back(tokenizer_, request.request.sampling, request.request.prompt_token_ids,
                                 defaults_.eos_token_ids);
    request.finished.push_back(false);
    request.last_token_time.emplace_back();
  }
  for (int i = 0; i < n; ++i) {
    if (request.finished[static_cast<std::size_t>(i)]) continue;
    auto found = std::find_if(out.sequences.begin(), out.sequences.end(),
                              [i](const SequenceDelta& d) { return d.index == i; });
    if (found == out.sequences.end()) {
      out.sequences.push_back(SequenceDelta{});
      found = std::prev(out.sequences.end());
      found->index = i;
    }
    if (reason == FinishReason::kAborted) {
      found->finish_reason = FinishReason::kAborted;
    } else {
      request.outputs[static_cast<std::size_t>(i)].finish(reason, *found);
    }
    request.finished[static_cast<std::size_t>(i)] = true;
  }
  std::sort(out.sequences.begin(), out.sequences.end(),
            [](const SequenceDelta& a, const SequenceDelta& b) { return a.index < b.index; });
  out.request_id = id;
  out.finished = true;
  out.error = error;
  if (!error) attach_prompt_logprobs(request, out);
  out.num_prompt_tokens = static_cast<int>(request.request.prompt_token_ids.size());
  out.num_cached_prompt_tokens = request.num_cached_prompt_tokens;
  out.num_generated_tokens = request.num_generated_tokens;

  const bool aborted = std::any_of(out.sequences.begin(), out.sequences.end(), [](const SequenceDelta& d) {
    return d.finish_reason == FinishReason::kAborted;
  });
  const bool length = std::any_of(out.sequences.begin(), out.sequences.end(), [](const SequenceDelta& d) {
    return d.finish_reason == FinishReason::kLength;
  });
  update_metrics([&](EngineMetrics& m) {
    if (aborted) {
      ++m.requests_aborted;
      return;
    }
    m.e2e_request_latency.observe(seconds_between(request.arrival, now));
    if (length) {
      ++m.requests_finished_length;
    } else {
      ++m.requests_finished_stop;
    }
  });
  OutputCallback callback = std::move(request.callback);
  if (speculative_) speculative_->forget(id);
  live_.erase(id);
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(id);
  }
  deliver(callback, std::move(out));
}

}  // namespace pagedllm
