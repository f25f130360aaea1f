// Request intake: submit() and abort() on the clients' threads (checked, then
// queued), and the engine thread admitting what was queued into the scheduler.

#include "core/engine/llm_engine.h"

#include <cstddef>

#include <fmt/format.h>

namespace pagedllm {

RequestId LlmEngine::submit(GenerateRequest request, OutputCallback on_output) {
  Request scheduled = to_scheduler_request(request, limits_);
  ConstraintGrammar grammar;
  if (request.constraint) {
    if (!structured_output_) {
      throw RequestRejected(-1, fmt::format("{}: this server has no constraint plugin for structured output "
                                            "(a constraint: section in its config)", request.constraint->field),
                            request.constraint->field);
    }
    grammar = structured_output_->compile(*request.constraint);  // throws RequestRejected naming the field
  }
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) {
    throw EngineUnavailable("the engine failed and is not serving: " + failure_, std::chrono::seconds(30));
  }
  if (!accepting_) throw EngineUnavailable("the engine is shutting down", std::chrono::seconds(5));
  PendingRequest pending;
  pending.id = next_request_id_++;
  pending.scheduled = std::move(scheduled);
  pending.scheduled.id = pending.id;
  pending.seed = request.sampling.seed ? *request.sampling.seed : seed_generator_();
  pending.request = std::move(request);
  pending.callback = std::move(on_output);
  pending.arrival = Clock::now();
  pending.grammar = std::move(grammar);
  const RequestId id = pending.id;
  in_flight_.insert(id);
  inbox_.push_back(std::move(pending));
  wake_.notify_one();
  return id;
}

bool LlmEngine::abort(RequestId request) {
  std::lock_guard lock(mutex_);
  if (!in_flight_.contains(request)) return false;
  abort_inbox_.push_back(request);
  wake_.notify_one();
  return true;
}

bool LlmEngine::drain_inbox() {
  std::deque<PendingRequest> arrived;
  std::vector<RequestId> aborted;
  bool stop = false;
  ShutdownMode mode = ShutdownMode::kDrain;
  {
    std::unique_lock lock(mutex_);
    const auto has_work = [&] {
      return !inbox_.empty() || !abort_inbox_.empty() || stop_requested_ || scheduler_->has_unfinished();
    };
    if (tensor_parallel_) {
      // Idle: the workers wait for rank 0's next message no longer than the collectives' timeout.
      while (!wake_.wait_for(lock, TensorParallelDriver::kHeartbeatInterval, has_work)) {
        lock.unlock();
        tensor_parallel_->keep_alive();
        lock.lock();
      }
    } else {
      wake_.wait(lock, has_work);
    }
    arrived.swap(inbox_);
    aborted.swap(abort_inbox_);
    stop = stop_requested_;
    mode = shutdown_mode_;
  }
  // 0: speculation is never turned off by load.
  const std::size_t disable_at = config_.speculative && config_.speculative->disable_by_batch_size
                                     ? static_cast<std::size_t>(*config_.speculative->disable_by_batch_size)
                                     : 0;
  for (PendingRequest& p : arrived) {
    const auto prompt_tokens = static_cast<std::int64_t>(p.request.prompt_token_ids.size());
    if (p.scheduled.speculative && disable_at > 0 && scheduler_->num_unfinished() >= disable_at) {
      decode_without_speculation(p.scheduled, p.request.cache_salt);
      update_metrics([](EngineMetrics& m) { ++m.spec_decode_disabled_by_batch_size; });
    }
    const int max_new_tokens = p.scheduled.max_tokens;
    try {
      scheduler_->add_request(std::move(p.scheduled));
    } catch (const RequestRejected& e) {
      // submit() ran the same checks, so this is an engine bug; fail the request, not the engine.
      log_->error("request {} refused after it was accepted: {}", p.id, e.what());
      RequestOutput out;
      out.request_id = p.id;
      out.finished = true;
      out.error = e.reason();
      deliver(p.callback, std::move(out));
      std::lock_guard lock(mutex_);
      in_flight_.erase(p.id);
      continue;
    }
    LiveRequest request;
    request.request = std::move(p.request);
    request.callback = std::move(p.callback);
    request.seed = p.seed;
    request.arrival = p.arrival;
    request.grammar = std::move(p.grammar);
    if (request.request.sampling.beam_search) start_beam_search(request, max_new_tokens);
    live_.emplace(p.id, std::move(request));
    update_metrics([&](EngineMetrics& m) { m.prompt_tokens_total += prompt_tokens; });
  }
  for (const RequestId id : aborted) {
    const auto found = live_.find(id);
    if (found == live_.end()) continue;  // finished meanwhile
    scheduler_->abort(id);
    RequestOutput out;
    end_request(id, found->second, out, FinishReason::kAborted, std::nullopt);
  }
  if (!arrived.empty() || !aborted.empty()) {
    const SchedulerStats stats = scheduler_->stats();
    update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
  }
  if (stop && (mode == ShutdownMode::kAbort || !scheduler_->has_unfinished())) {
    abort_everything(std::nullopt);
    return false;
  }
  return true;
}

}  // namespace pagedllm
