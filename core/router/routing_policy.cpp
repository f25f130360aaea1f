#include "core/router/routing_policy.h"

namespace pagedllm::router {

std::optional<int> least_loaded_replica(std::span<const ReplicaLoad> replicas, std::size_t rotation) {
  std::optional<int> best;
  const std::size_t count = replicas.size();
  for (std::size_t step = 0; step < count; ++step) {
    const std::size_t index = (rotation + step) % count;
    if (!replicas[index].up) continue;
    if (!best || replicas[index].in_flight < replicas[static_cast<std::size_t>(*best)].in_flight) {
      best = static_cast<int>(index);
    }
  }
  return best;
}

std::optional<RouteChoice> choose_replica(RoutingPolicy policy, std::span<const ReplicaLoad> replicas,
                                          std::optional<int> affine, int load_margin, std::size_t rotation) {
  switch (policy) {
    case RoutingPolicy::kRoundRobin:
      for (std::size_t step = 0; step < replicas.size(); ++step) {
        const std::size_t index = (rotation + step) % replicas.size();
        if (replicas[index].up) return RouteChoice{static_cast<int>(index), RouteReason::kRoundRobin};
      }
      return std::nullopt;
    case RoutingPolicy::kPrefixAffinity: {
      const std::optional<int> least = least_loaded_replica(replicas, rotation);
      if (!least) return std::nullopt;
      if (!affine) return RouteChoice{*least, RouteReason::kLeastLoaded};
      const ReplicaLoad& candidate = replicas[static_cast<std::size_t>(*affine)];
      const int least_in_flight = replicas[static_cast<std::size_t>(*least)].in_flight;
      if (candidate.up && candidate.in_flight <= least_in_flight + load_margin) {
        return RouteChoice{*affine, RouteReason::kAffinity};
      }
      return RouteChoice{*least, RouteReason::kLoadOverride};
    }
  }
  return std::nullopt;
}

}  // namespace pagedllm::router
