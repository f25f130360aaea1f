#pragma once
// Each replica's GET /health, every health.interval_s: a replica that does not answer 200 within
// health.timeout_s is taken out of service, one that answers again is put back (ReplicaSet::report_health).
// Probing starts at once, so replicas are in service as soon as they answer their first probe.

#include <memory>

#include <utility>  // before Boost 1.74's awaitable.hpp, which uses std::exchange without including it

#include <boost/asio/awaitable.hpp>

#include "core/router/router_state.h"

namespace pagedllm::router {

// Probes replica `replica` until the io_context stops.
boost::asio::awaitable<void> watch_replica_health(std::shared_ptr<RouterState> state, int replica);

}  // namespace pagedllm::router
