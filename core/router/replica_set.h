#pragma once
// The replicas' shared state: which are up, each one's requests in flight through the router, the affinity
// table and the counters /metrics reports. Thread-safe (one mutex: every operation is short).

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kv/block_hash.h"
#include "core/router/affinity_table.h"
#include "core/router/router_config.h"
#include "core/router/routing_policy.h"

namespace pagedllm::router {

struct ReplicaCounters {
  std::string url;
  bool up = false;
  int in_flight = 0;
  std::uint64_t requests = 0;        // requests sent to it (each try of a retried request counts)
  std::uint64_t affinity_hits = 0;   // sent to it because it served the prompt's longest known prefix
  std::uint64_t load_overrides = 0;  // a known prefix's replica was too busy or down, so sent here instead
  std::uint64_t failures = 0;        // requests it failed (no answer, or the connection broke)
  std::uint64_t retries = 0;         // requests it failed before any byte reached the client, retried elsewhere
  std::uint64_t health_failures = 0; // /health probes it failed
};

class ReplicaSet {
 public:
  explicit ReplicaSet(const RouterConfig& config);

  // Picks a replica for a request whose prompt has the block-hash chain `chain` (empty: none known), skipping
  // `excluded` (the replica a retry left), counts the request in flight there and records the chain as served
  // by it. nullopt when no replica is up.
  std::optional<int> acquire(std::span<const BlockHash> chain, std::optional<int> excluded = std::nullopt);
  // The request sent by acquire() has ended, however it ended.
  void release(int replica);

  // A request failed on `replica` (it did not answer, or its connection broke): the replica is taken out until
  // a health probe finds it answering again. `retried`: the request goes to another replica.
  void mark_failed(int replica, bool retried);
  // A /health probe's result. Returns true when this changed the replica's state.
  bool report_health(int replica, bool healthy);

  std::size_t size() const { return urls_.size(); }
  const std::string& url(int replica) const { return urls_[static_cast<std::size_t>(replica)]; }
  int replicas_up() const;
  int requests_in_flight() const;
  std::vector<ReplicaCounters> counters() const;
  std::size_t affinity_entries() const;

 private:
  void set_down(std::size_t index);

  const RoutingPolicy policy_;
  const int load_margin_;
  const std::vector<std::string> urls_;
  mutable std::mutex mutex_;
  std::vector<ReplicaCounters> replicas_;
  AffinityTable affinity_;
  std::size_t rotation_ = 0;
};

// Holds one request in flight on a replica: release() when it goes out of scope.
class InFlight {
 public:
  InFlight(ReplicaSet& replicas, int replica) : replicas_(replicas), replica_(replica) {}
  ~InFlight() { replicas_.release(replica_); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ReplicaSet& replicas_;
  int replica_;
};

}  // namespace pagedllm::router
