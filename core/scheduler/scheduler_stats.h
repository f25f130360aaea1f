#pragma once
// Scheduler counters. Gauges describe the queues now; counters only grow.

#include <cstdint>

#include "core/kv/kv_cache_stats.h"

namespace pagedllm {

struct SchedulerStats {
  // --- Gauges ---
  int num_waiting = 0;
  int num_running = 0;
  int num_swapped = 0;

  // --- Counters ---
  // Preemptions = times a running request lost its device blocks; a request
  // preempted twice counts twice. Recompute frees them (the request restarts
  // its prefill from the front of waiting); swap moves them to the host pool.
  std::int64_t num_preemptions_recompute = 0;
  std::int64_t num_preemptions_swap = 0;
  // Requests refused by add_request() (RequestRejected).
  std::int64_t num_rejected = 0;
  // Requests that ended: all sequences finished (stop/length), or aborted.
  std::int64_t num_finished = 0;
  std::int64_t num_aborted = 0;
  // Steps scheduled and tokens in their batches (tokens per step = ratio).
  std::int64_t num_steps = 0;
  std::int64_t num_batched_tokens = 0;

  KvCacheStats kv;

  std::int64_t num_preemptions() const { return num_preemptions_recompute + num_preemptions_swap; }
};

}  // namespace pagedllm
