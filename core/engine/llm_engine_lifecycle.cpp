// The engine thread's life: start(), the loop, shutdown (drain or abort), and
// ending every request when the engine stops or fails.

#include "core/engine/llm_engine.h"

#include <algorithm>

namespace pagedllm {

void LlmEngine::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable() || stop_requested_) return;
  loop_running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void LlmEngine::shutdown(ShutdownMode mode) {
  std::thread thread;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    if (!stop_requested_ || mode == ShutdownMode::kAbort) shutdown_mode_ = mode;
    stop_requested_ = true;
    thread = std::move(thread_);
    wake_.notify_one();
  }
  if (thread.joinable()) {
    thread.join();
  } else if (!loop_running_) {
    if (tensor_parallel_) tensor_parallel_->stop();
    // Never started: requests queued before start() still get their final output.
    std::deque<PendingRequest> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(inbox_);
      in_flight_.clear();
    }
    for (PendingRequest& p : pending) {
      RequestOutput out;
      out.request_id = p.id;
      out.finished = true;
      out.num_prompt_tokens = static_cast<int>(p.request.prompt_token_ids.size());
      for (int i = 0; i < p.request.sampling.n; ++i) {
        SequenceDelta delta;
        delta.index = i;
        delta.finish_reason = FinishReason::kAborted;
        out.sequences.push_back(std::move(delta));
      }
      p.callback(std::move(out));
    }
  }
}

void LlmEngine::loop() {
  log_->debug("engine loop started");
  try {
    while (drain_inbox()) {
      if (tensor_parallel_) tensor_parallel_->keep_alive();
      if (!scheduler_->has_unfinished()) continue;
      if (!step()) {
        // Nothing could be scheduled (every request waits for blocks that a
        // swap-in cannot get yet): wait for an abort or a new request.
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(10));
      }
    }
  } catch (const std::exception& e) {
    log_->error("engine step failed: {}", e.what());
    {
      std::lock_guard lock(mutex_);
      failure_ = e.what();
      accepting_ = false;
    }
    abort_everything(std::string("the engine failed: ") + e.what());
  }
  // The workers stop with the loop, whether it ended or failed.
  if (tensor_parallel_) tensor_parallel_->stop();
  step_started_ns_ = 0;
  loop_running_ = false;
  log_->debug("engine loop stopped");
}

void LlmEngine::abort_everything(const std::optional<std::string>& error) {
  std::deque<PendingRequest> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(inbox_);
  }
  for (PendingRequest& p : pending) {
    LiveRequest request;
    request.request = std::move(p.request);
    request.callback = std::move(p.callback);
    request.arrival = p.arrival;
    live_.emplace(p.id, std::move(request));
  }
  std::vector<RequestId> ids;
  for (const auto& [id, request] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const RequestId id : ids) {
    try {
      scheduler_->abort(id);
    } catch (const std::exception& e) {
      log_->error("aborting request {}: {}", id, e.what());
    }
    RequestOutput out;
    end_request(id, live(id), out, FinishReason::kAborted, error);
  }
  const SchedulerStats stats = scheduler_->stats();
  update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
}

}  // namespace pagedllm
