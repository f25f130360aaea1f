#pragma once
// The routing decision itself, over a snapshot of the replicas: pure, so the unit tests drive it directly.
//   round_robin:      the next replica that is up, in config order.
//   prefix_affinity:  the replica that served the request's longest known prefix, unless its requests in
//                     flight exceed the least loaded replica's by more than load_margin; otherwise, and for
//                     requests with no known prefix, the least loaded replica.
// Ties between equally loaded replicas go to the first at or after `rotation`, so they are taken in turn.

#include <cstddef>
#include <optional>
#include <span>

#include "core/router/router_config.h"

namespace pagedllm::router {

struct ReplicaLoad {
  bool up = false;
  int in_flight = 0;  // requests the router has sent and not yet finished
};

enum class RouteReason {
  kAffinity,         // the replica that served the longest known prefix
  kLoadOverride,     // a prefix was known, but its replica was too busy (or down): the least loaded
  kLeastLoaded,      // no known prefix: the least loaded
  kRoundRobin,
};

struct RouteChoice {
  int replica = -1;
  RouteReason reason = RouteReason::kLeastLoaded;
};

// nullopt when no replica is up.
std::optional<int> least_loaded_replica(std::span<const ReplicaLoad> replicas, std::size_t rotation);

// `affine`: the replica that served the request's longest known prefix (AffinityTable), if any.
// nullopt when no replica is up.
std::optional<RouteChoice> choose_replica(RoutingPolicy policy, std::span<const ReplicaLoad> replicas,
                                          std::optional<int> affine, int load_margin, std::size_t rotation);

}  // namespace pagedllm::router
