#pragma once
// The router's /metrics (Prometheus text 0.0.4): its own request counters and, per replica (label
// replica="URL"), requests, affinity hits, load overrides, failures, retries, health. docs/router.md lists them.

#include <atomic>
#include <cstdint>
#include <string>

#include "core/router/replica_set.h"

namespace pagedllm::router {

struct RouterCounters {
  std::atomic<std::uint64_t> requests{0};            // generation / model requests received (not /health, /metrics)
  std::atomic<std::uint64_t> unavailable{0};         // answered 503: no replica up
  std::atomic<std::uint64_t> retries{0};             // requests retried on a second replica
  std::atomic<std::uint64_t> failed_streams{0};      // streams ended with an error event (their replica broke)
  std::atomic<std::uint64_t> client_disconnects{0};  // clients gone before their answer ended (upstream cancelled)
};

std::string render_router_metrics(const ReplicaSet& replicas, const RouterCounters& counters);

}  // namespace pagedllm::router
