#pragma once
// What every connection and health probe of one pagedllm-router shares.

#include "core/router/prompt_hasher.h"
#include "core/router/replica_set.h"
#include "core/router/router_config.h"
#include "core/router/router_metrics.h"

namespace pagedllm::router {

struct RouterState {
  explicit RouterState(RouterConfig router_config)
      : config(std::move(router_config)), replicas(config), hasher(config) {}

  const RouterConfig config;
  ReplicaSet replicas;
  const PromptHasher hasher;
  RouterCounters counters;
};

}  // namespace pagedllm::router
