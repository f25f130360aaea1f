#include "core/router/replica_set.h"

#include <algorithm>

#include "core/common/check.h"

namespace pagedllm::router {
namespace {

std::vector<std::string> urls_of(const RouterConfig& config) {
  std::vector<std::string> urls;
  for (const ReplicaConfig& replica : config.replicas) urls.push_back(replica.url);
  return urls;
}

}  // namespace

ReplicaSet::ReplicaSet(const RouterConfig& config)
    : policy_(config.policy),
      load_margin_(config.load_margin),
      urls_(urls_of(config)),
      replicas_(urls_.size()),
      affinity_(static_cast<std::size_t>(config.affinity_entries)) {
  for (std::size_t i = 0; i < urls_.size(); ++i) replicas_[i].url = urls_[i];
}

std::optional<int> ReplicaSet::acquire(std::span<const BlockHash> chain, std::optional<int> excluded) {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaLoad> loads;
  loads.reserve(replicas_.size());
  for (const ReplicaCounters& replica : replicas_) loads.push_back({replica.up, replica.in_flight});
  if (excluded) loads[static_cast<std::size_t>(*excluded)].up = false;

  std::optional<int> affine;
  if (policy_ == RoutingPolicy::kPrefixAffinity) {
    if (const auto match = affinity_.longest_match(chain)) affine = match->replica;
  }
  const std::optional<RouteChoice> choice = choose_replica(policy_, loads, affine, load_margin_, rotation_++);
  if (!choice) return std::nullopt;

  ReplicaCounters& chosen = replicas_[static_cast<std::size_t>(choice->replica)];
  ++chosen.in_flight;
  ++chosen.requests;
  switch (choice->reason) {
    case RouteReason::kAffinity:
      ++chosen.affinity_hits;
      break;
    case RouteReason::kLoadOverride:
      ++chosen.load_overrides;
      break;
    case RouteReason::kLeastLoaded:
    case RouteReason::kRoundRobin:
      break;
  }
  if (policy_ == RoutingPolicy::kPrefixAffinity) affinity_.record(chain, choice->replica);
  return choice->replica;
}

void ReplicaSet::release(int replica) {
  std::lock_guard lock(mutex_);
  ReplicaCounters& counters = replicas_.at(static_cast<std::size_t>(replica));
  PAGEDLLM_CHECK(counters.in_flight > 0, "replica {} released with nothing in flight", replica);
  --counters.in_flight;
}

void ReplicaSet::mark_failed(int replica, bool retried) {
  std::lock_guard lock(mutex_);
  const auto index = static_cast<std::size_t>(replica);
  ++replicas_.at(index).failures;
  if (retried) ++replicas_[index].retries;
  set_down(index);
}

bool ReplicaSet::report_health(int replica, bool healthy) {
  std::lock_guard lock(mutex_);
  const auto index = static_cast<std::size_t>(replica);
  ReplicaCounters& counters = replicas_.at(index);
  if (!healthy) ++counters.health_failures;
  if (counters.up == healthy) return false;
  if (healthy) {
    counters.up = true;
  } else {
    set_down(index);
  }
  return true;
}

void ReplicaSet::set_down(std::size_t index) {
  if (!replicas_[index].up) return;
  replicas_[index].up = false;
  // What it cached is gone if it restarts, and its prompts are better placed anew meanwhile.
  affinity_.forget(static_cast<int>(index));
}

int ReplicaSet::replicas_up() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(std::count_if(replicas_.begin(), replicas_.end(), [](const auto& r) { return r.up; }));
}

int ReplicaSet::requests_in_flight() const {
  std::lock_guard lock(mutex_);
  int total = 0;
  for (const ReplicaCounters& replica : replicas_) total += replica.in_flight;
  return total;
}

std::vector<ReplicaCounters> ReplicaSet::counters() const {
  std::lock_guard lock(mutex_);
  return replicas_;
}

std::size_t ReplicaSet::affinity_entries() const {
  std::lock_guard lock(mutex_);
  return affinity_.size();
}

}  // namespace pagedllm::router
