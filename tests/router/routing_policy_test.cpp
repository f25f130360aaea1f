#include <catch2/catch.hpp>

#include <vector>

#include "core/router/routing_policy.h"

using namespace pagedllm::router;

TEST_CASE("prefix affinity keeps a prompt on its replica within the load margin", "[router][policy]") {
  const std::vector<ReplicaLoad> loads{{true, 5}, {true, 1}, {true, 3}};
  // Replica 0 has 4 more in flight than the least loaded (1): within a margin of 4, beyond one of 3.
  auto choice = choose_replica(RoutingPolicy::kPrefixAffinity, loads, 0, 4, 0);
  REQUIRE(choice.has_value());
  CHECK(choice->replica == 0);
  CHECK(choice->reason == RouteReason::kAffinity);
  choice = choose_replica(RoutingPolicy::kPrefixAffinity, loads, 0, 3, 0);
  REQUIRE(choice.has_value());
  CHECK(choice->replica == 1);
  CHECK(choice->reason == RouteReason::kLoadOverride);
}

TEST_CASE("a prompt without a known prefix, or whose replica is down, goes to the least loaded", "[router][policy]") {
  const std::vector<ReplicaLoad> loads{{false, 0}, {true, 2}, {true, 1}};
  auto choice = choose_replica(RoutingPolicy::kPrefixAffinity, loads, std::nullopt, 4, 0);
  REQUIRE(choice.has_value());
  CHECK(choice->replica == 2);
  CHECK(choice->reason == RouteReason::kLeastLoaded);
  choice = choose_replica(RoutingPolicy::kPrefixAffinity, loads, 0, 4, 0);
  REQUIRE(choice.has_value());
  CHECK(choice->replica == 2);
  CHECK(choice->reason == RouteReason::kLoadOverride);
}

TEST_CASE("equally loaded replicas are taken in turn", "[router][policy]") {
  const std::vector<ReplicaLoad> loads{{true, 0}, {true, 0}, {true, 0}};
  CHECK(least_loaded_replica(loads, 0) == 0);
  CHECK(least_loaded_replica(loads, 1) == 1);
  CHECK(least_loaded_replica(loads, 5) == 2);
}

TEST_CASE("round robin walks the replicas that are up in order", "[router][policy]") {
  const std::vector<ReplicaLoad> loads{{true, 9}, {false, 0}, {true, 0}};
  std::vector<int> order;
  for (std::size_t rotation = 0; rotation < 4; ++rotation) {
    order.push_back(choose_replica(RoutingPolicy::kRoundRobin, loads, 2, 0, rotation)->replica);
  }
  CHECK(order == std::vector<int>{0, 2, 2, 0});
}

TEST_CASE("no replica up means no choice", "[router][policy]") {
  const std::vector<ReplicaLoad> loads{{false, 0}, {false, 0}};
  CHECK_FALSE(choose_replica(RoutingPolicy::kPrefixAffinity, loads, 0, 4, 0).has_value());
  CHECK_FALSE(choose_replica(RoutingPolicy::kRoundRobin, loads, std::nullopt, 4, 0).has_value());
}
