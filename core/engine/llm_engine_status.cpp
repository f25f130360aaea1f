// What the engine reports about itself to clients: health (a failed loop, a
// step hung far past the longest seen), the failure, and metrics.

#include "core/engine/llm_engine.h"

#include <algorithm>

#include <fmt/format.h>

namespace pagedllm {

std::string LlmEngine::health_detail() const {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return "the engine loop failed: " + failure_;
    if (stop_requested_ && !loop_running_) return "the engine is shut down";
  }
  if (!loop_running_) return "the engine loop is not running";
  const std::int64_t started = step_started_ns_.load();
  if (started != 0) {
    const std::int64_t now = Clock::now().time_since_epoch().count();
    // A step far longer than any seen so far (and over a minute) is a hang,
    // not a big batch: CPU prefill steps legitimately take seconds.
    const std::int64_t limit = std::max<std::int64_t>(60'000'000'000, 20 * longest_step_ns_.load());
    if (now - started > limit) {
      return fmt::format("the current engine step has been running for {:.0f} s",
                         static_cast<double>(now - started) / 1e9);
    }
  }
  return "";
}

std::optional<std::string> LlmEngine::failure() const {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) return std::nullopt;
  return failure_;
}

EngineMetrics LlmEngine::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_;
}

void LlmEngine::update_metrics(const std::function<void(EngineMetrics&)>& change) {
  std::lock_guard lock(metrics_mutex_);
  change(metrics_);
}

}  // namespace pagedllm
