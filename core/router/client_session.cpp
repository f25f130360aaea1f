#include "core/router/client_session.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/logging.h"
#include "core/router/upstream_exchange.h"
#include "core/server/api_error.h"
#include "core/server/openai_request.h"
#include "core/server/request_reader.h"

namespace pagedllm::router {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

constexpr const char* kJson = "application/json";
constexpr const char* kPrometheus = "text/plain; version=0.0.4; charset=utf-8";

enum class Action { kCompletion, kChat, kForward, kHealth, kMetrics };

struct RouteEntry {
  std::string_view path;
  http::verb method;
  Action action;
};

// pagedllm-host's routes (core/server/api_routes.cpp): the API ones are forwarded, /health and /metrics are
// the router's own.
constexpr RouteEntry kRoutes[] = {
    {"/v1/completions", http::verb::post, Action::kCompletion},
    {"/v1/chat/completions", http::verb::post, Action::kChat},
    {"/v1/models", http::verb::get, Action::kForward},
    {"/version", http::verb::get, Action::kForward},
    {"/tokenize", http::verb::post, Action::kForward},
    {"/detokenize", http::verb::post, Action::kForward},
    {"/health", http::verb::get, Action::kHealth},
    {"/metrics", http::verb::get, Action::kMetrics},
};
constexpr std::string_view kModelPrefix = "/v1/models/";

// The action for a request, or the host's 404 / 405 for it (`allow` set with a 405).
Action match_route(http::verb method, std::string_view target, std::string& allow) {
  const std::string path(target.substr(0, target.find('?')));
  for (const RouteEntry& entry : kRoutes) {
    if (entry.path != path) continue;
    if (entry.method == method) return entry.action;
    allow = std::string(http::to_string(entry.method));
    throw server::method_not_allowed(fmt::format("Method {} is not allowed for {}; use {}.",
                                                 std::string(http::to_string(method)), path, allow));
  }
  if (path.size() > kModelPrefix.size() && path.starts_with(kModelPrefix)) {
    if (method == http::verb::get) return Action::kForward;
    allow = "GET";
    throw server::method_not_allowed(
        fmt::format("Method {} is not allowed for {}; use GET.", std::string(http::to_string(method)), path));
  }
  throw server::not_found(fmt::format("No route for {}.", path));
}

// The answer to a failed read of a request, or nullopt where the client left or went quiet.
std::optional<server::ApiError> read_error(const beast::error_code& ec, std::uint64_t max_body_bytes) {
  if (ec == http::error::body_limit) {
    return server::request_too_large(
        fmt::format("The request body is larger than this server's limit of {} bytes.", max_body_bytes));
  }
  if (ec == http::error::header_limit) {
    return server::ApiError(431, fmt::format("The request header is larger than {} bytes.", server::kHeaderLimit),
                            "invalid_request_error");
  }
  const bool parse_error = ec.category() == http::make_error_code(http::error::end_of_stream).category();
  if (parse_error && ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return server::invalid_request(fmt::format("Malformed HTTP request: {}.", ec.message()));
  }
  return std::nullopt;
}

class Session {
 public:
  Session(net::ip::tcp::socket socket, std::shared_ptr<RouterState> state)
      : state_(std::move(state)), client_{beast::tcp_stream(std::move(socket)), {}, true} {}

  net::awaitable<void> run() {
    while (client_.keep_alive) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(server::kHeaderLimit);
      parser.body_limit(state_->config.max_request_body_bytes);
      beast::error_code ec;
      client_.stream.expires_after(ClientConnection::kReadTimeout);
      co_await http::async_read(client_.stream, client_.buffer, parser, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        // The host's answers to the same read errors (core/server/request_reader.cpp), then the connection closes.
        client_.keep_alive = false;
        if (const auto error = read_error(ec, state_->config.max_request_body_bytes)) co_await reply_error(*error);
        break;
      }
      request_ = parser.release();
      client_.keep_alive = request_.keep_alive();
      co_await handle();
    }
    beast::error_code ignored;
    client_.stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    client_.stream.close();
  }

 private:
  net::awaitable<void> handle() {
    std::string allow;
    std::optional<server::ApiError> error;
    try {
      const std::string_view target(request_.target().data(), request_.target().size());
      const Action action = match_route(request_.method(), target, allow);
      switch (action) {
        case Action::kHealth:
          co_await reply_health();
          co_return;
        case Action::kMetrics:
          co_await reply(http::status::ok, kPrometheus,
                         render_router_metrics(state_->replicas, state_->counters));
          co_return;
        case Action::kForward:
          co_await forward({});
          co_return;
        case Action::kCompletion:
        case Action::kChat: {
          // Malformed JSON gets the host's own 400 here; any other mistake the replica answers.
          const nlohmann::json body = server::parse_json_object(request_.body());
          const PromptKind kind = action == Action::kChat ? PromptKind::kChat : PromptKind::kCompletion;
          const std::vector<BlockHash> chain = state_->hasher.chain(kind, body, request_.body());
          co_await forward(chain);
          co_return;
        }
      }
    } catch (const server::ApiError& e) {
      error = e;
    }
    if (error) co_await reply_error(*error, allow);
  }

  net::awaitable<void> reply_health() {
    const int up = state_->replicas.replicas_up();
    const int total = static_cast<int>(state_->replicas.size());
    if (up == 0) {
      co_await reply_error(no_replica_error());
      co_return;
    }
    const nlohmann::json body = {{"status", "ok"}, {"replicas_up", up}, {"replicas", total}};
    co_await reply(http::status::ok, kJson, body.dump());
  }

  server::ApiError no_replica_error() const {
    return server::unavailable(
        fmt::format("No replica is available: all {} replicas are down or failing (pagedllm-router's /metrics "
                    "shows each one's state). Try again shortly.",
                    state_->replicas.size()),
        "no_replica_available", std::chrono::seconds(1));
  }

  // Sends the request to a replica, and once more to another one if the first fails before answering.
  net::awaitable<void> forward(std::span<const BlockHash> chain) {
    ++state_->counters.requests;
    std::optional<int> excluded;
    std::string first_failure;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const std::optional<int> replica = state_->replicas.acquire(chain, excluded);
      if (!replica) {
        ++state_->counters.unavailable;
        co_await reply_error(no_replica_error());
        co_return;
      }
      ExchangeResult result;
      {
        InFlight in_flight(state_->replicas, *replica);
        result = co_await exchange_with_replica(state_->config.replicas[static_cast<std::size_t>(*replica)],
                                                state_->config, request_, client_);
      }
      switch (result.outcome) {
        case ExchangeOutcome::kAnswered:
          co_return;
        case ExchangeOutcome::kClientGone:
          ++state_->counters.client_disconnects;
          client_.keep_alive = false;
          co_return;
        case ExchangeOutcome::kReplicaFailedStreaming:
          ++state_->counters.failed_streams;
          state_->replicas.mark_failed(*replica, /*retried=*/false);
          logger("router")->warn("{}; the replica is out until its /health answers", result.detail);
          client_.keep_alive = false;
          co_return;
        case ExchangeOutcome::kReplicaFailedEarly: {
          const bool retry = attempt == 0;
          state_->replicas.mark_failed(*replica, retry);
          logger("router")->warn("{}; the replica is out until its /health answers{}", result.detail,
                          retry ? ", the request goes to another one" : "");
          if (!retry) {
            co_await reply_error(server::ApiError(
                502, fmt::format("Two replicas failed this request: {}; then {}.", first_failure, result.detail),
                "server_error", std::nullopt, std::string("replica_failed")));
            co_return;
          }
          ++state_->counters.retries;
          first_failure = result.detail;
          excluded = *replica;
          break;
        }
      }
    }
  }

  net::awaitable<void> reply_error(const server::ApiError& error, const std::string& allow = {}) {
    http::response<http::string_body> response{static_cast<http::status>(error.status()), 11};
    if (!allow.empty()) response.set(http::field::allow, allow);
    if (error.retry_after) response.set(http::field::retry_after, std::to_string(error.retry_after->count()));
    co_await send(std::move(response), kJson, error.body());
  }

  net::awaitable<void> reply(http::status status, const char* content_type, std::string body) {
    co_await send(http::response<http::string_body>{status, 11}, content_type, std::move(body));
  }

  net::awaitable<void> send(http::response<http::string_body> response, const char* content_type,
                            std::string body) {
    response.set(http::field::content_type, content_type);
    response.keep_alive(client_.keep_alive);
    response.body() = std::move(body);
    response.prepare_payload();
    beast::error_code ec;
    client_.stream.expires_after(ClientConnection::kSendTimeout);
    co_await http::async_write(client_.stream, response, net::redirect_error(net::use_awaitable, ec));
    if (ec) client_.keep_alive = false;
  }

  std::shared_ptr<RouterState> state_;
  ClientConnection client_;
  Request request_;
};

}  // namespace

net::awaitable<void> serve_client(net::ip::tcp::socket socket, std::shared_ptr<RouterState> state) {
  Session session(std::move(socket), std::move(state));
  try {
    co_await session.run();
  } catch (const std::exception& e) {
    logger("router")->error("a connection ended on an error: {}", e.what());
  }
}

}  // namespace pagedllm::router
