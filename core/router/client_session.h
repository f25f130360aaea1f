#pragma once
// One client connection of pagedllm-router: reads its requests one after the other (keep-alive), answers
// /health and /metrics itself, and forwards the API routes to a replica chosen by ReplicaSet, retrying a
// request once elsewhere when its replica fails before answering.

#include <memory>

#include <utility>  // before Boost 1.74's awaitable.hpp, which uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "core/router/router_state.h"

namespace pagedllm::router {

// Runs until the client closes the connection or a request ends it. `socket`'s executor must be a strand.
boost::asio::awaitable<void> serve_client(boost::asio::ip::tcp::socket socket, std::shared_ptr<RouterState> state);

}  // namespace pagedllm::router
