#include <catch2/catch.hpp>

#include <vector>

#include "core/kv/block_hash.h"
#include "core/router/replica_set.h"

using namespace pagedllm;
using namespace pagedllm::router;

namespace {

RouterConfig three_replicas(RoutingPolicy policy) {
  RouterConfig config;
  config.policy = policy;
  config.load_margin = 1;
  for (const char* url : {"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}) {
    config.replicas.push_back(*parse_replica_url(url));
  }
  return config;
}

std::vector<BlockHash> chain_of(int first_token, int blocks) {
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < blocks * 16; ++i) tokens.push_back(first_token + i);
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, tokens, 16, "");
  return hashes;
}

}  // namespace

TEST_CASE("replicas serve only once a probe finds them up", "[router][replicas]") {
  ReplicaSet replicas(three_replicas(RoutingPolicy::kPrefixAffinity));
  CHECK_FALSE(replicas.acquire({}).has_value());
  CHECK(replicas.report_health(1, true));
  CHECK_FALSE(replicas.report_health(1, true));  // no change
  CHECK(replicas.acquire({}) == 1);
  replicas.release(1);
  CHECK(replicas.replicas_up() == 1);
}

TEST_CASE("a prompt follows its prefix until the replica is busier than the margin allows", "[router][replicas]") {
  ReplicaSet replicas(three_replicas(RoutingPolicy::kPrefixAffinity));
  for (int i = 0; i < 3; ++i) replicas.report_health(i, true);
  const auto chain = chain_of(100, 4);
  const int first = *replicas.acquire(chain);
  // In flight: first 1, others 0 -> within the margin of 1: the same replica, an affinity hit.
  CHECK(replicas.acquire(chain) == first);
  // Now 2 against 0: past the margin, the least loaded.
  const int third = *replicas.acquire(chain);
  CHECK(third != first);
  const auto counters = replicas.counters();
  CHECK(counters[static_cast<std::size_t>(first)].in_flight == 2);
  CHECK(counters[static_cast<std::size_t>(first)].affinity_hits == 1);
  CHECK(counters[static_cast<std::size_t>(third)].load_overrides == 1);
  CHECK(replicas.requests_in_flight() == 3);
  // The chain was recorded for the replica that took it last.
  replicas.release(first);
  replicas.release(first);
  CHECK(replicas.acquire(chain) == third);
}

TEST_CASE("a failed replica is out, forgotten, and back after a good probe", "[router][replicas]") {
  ReplicaSet replicas(three_replicas(RoutingPolicy::kPrefixAffinity));
  for (int i = 0; i < 3; ++i) replicas.report_health(i, true);
  const auto chain = chain_of(7, 3);
  const int first = *replicas.acquire(chain);
  replicas.release(first);
  replicas.mark_failed(first, /*retried=*/true);
  CHECK(replicas.replicas_up() == 2);
  CHECK(replicas.affinity_entries() == 0);
  const int retry = *replicas.acquire(chain, first);
  CHECK(retry != first);
  replicas.release(retry);
  CHECK(replicas.report_health(first, true));
  // Its prefix now belongs to the replica that served the retry.
  CHECK(replicas.acquire(chain) == retry);
  const auto counters = replicas.counters();
  CHECK(counters[static_cast<std::size_t>(first)].failures == 1);
  CHECK(counters[static_cast<std::size_t>(first)].retries == 1);
}

TEST_CASE("the only replica up, excluded, leaves nothing to choose", "[router][replicas]") {
  ReplicaSet replicas(three_replicas(RoutingPolicy::kRoundRobin));
  replicas.report_health(2, true);
  CHECK_FALSE(replicas.acquire({}, 2).has_value());
  CHECK(replicas.acquire({}) == 2);
}
