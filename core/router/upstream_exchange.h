#pragma once
// One try of one request on one replica: connect, send, and pass the answer back to the client. A JSON answer
// is read whole, then sent (so a replica failing on the way leaves the client untouched and the request can be
// retried); an SSE answer (text/event-stream) is passed on chunk by chunk as the replica writes it, and a replica
// failing after that ends the client's stream with an error event. While the answer is awaited or streamed, a
// read on the client's socket notices the client leaving, and closing the upstream connection then makes the
// replica abort the request.

#include <string>

#include <utility>  // before Boost 1.74's awaitable.hpp, which uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/router/client_connection.h"
#include "core/router/router_config.h"

namespace pagedllm::router {

enum class ExchangeOutcome {
  kAnswered,              // the replica's answer reached the client (whatever its status)
  kReplicaFailedEarly,    // the replica failed before any byte was sent to the client: may be retried
  kReplicaFailedStreaming,  // the replica failed mid-stream: the client's stream ended with an error event
  kClientGone,            // the client left (or stopped reading): the upstream request was cancelled
};

struct ExchangeResult {
  ExchangeOutcome outcome = ExchangeOutcome::kAnswered;
  std::string detail;  // what failed, for the log
};

using Request = boost::beast::http::request<boost::beast::http::string_body>;

boost::asio::awaitable<ExchangeResult> exchange_with_replica(const ReplicaConfig& replica,
                                                             const RouterConfig& config, const Request& request,
                                                             ClientConnection& client);

}  // namespace pagedllm::router
