#include "core/router/health_checker.h"

#include <chrono>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "core/common/logging.h"

namespace pagedllm::router {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::chrono::steady_clock::duration seconds(double value) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(value));
}

// True when the replica answers GET /health with 200 within `timeout_s`; `why` says what failed otherwise.
net::awaitable<bool> probe(const ReplicaConfig& replica, double timeout_s, std::string& why) {
  const net::any_io_executor executor = co_await net::this_coro::executor;
  beast::error_code ec;
  net::ip::tcp::resolver resolver(executor);
  const auto endpoints =
      co_await resolver.async_resolve(replica.host, replica.port, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    why = ec.message();
    co_return false;
  }
  beast::tcp_stream stream(executor);
  stream.expires_after(seconds(timeout_s));
  co_await stream.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
  if (!ec) {
    http::request<http::empty_body> request{http::verb::get, "/health", 11};
    request.set(http::field::host, fmt::format("{}:{}", replica.host, replica.port));
    request.keep_alive(false);
    stream.expires_after(seconds(timeout_s));
    co_await http::async_write(stream, request, net::redirect_error(net::use_awaitable, ec));
  }
  http::response<http::string_body> response;
  if (!ec) {
    beast::flat_buffer buffer;
    stream.expires_after(seconds(timeout_s));
    co_await http::async_read(stream, buffer, response, net::redirect_error(net::use_awaitable, ec));
  }
  beast::error_code ignored;
  stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  if (ec) {
    why = ec.message();
    co_return false;
  }
  if (response.result() != http::status::ok) {
    why = fmt::format("/health answered {}", response.result_int());
    co_return false;
  }
  co_return true;
}

}  // namespace

net::awaitable<void> watch_replica_health(std::shared_ptr<RouterState> state, int replica) {
  const net::any_io_executor executor = co_await net::this_coro::executor;
  const ReplicaConfig& config = state->config.replicas.at(static_cast<std::size_t>(replica));
  net::steady_timer timer(executor);
  for (;;) {
    std::string why;
    const bool healthy = co_await probe(config, state->config.health_timeout_s, why);
    if (state->replicas.report_health(replica, healthy)) {
      if (healthy) {
        logger("router")->info("replica {} is up", config.url);
      } else {
        logger("router")->warn("replica {} is down: {}", config.url, why);
      }
    }
    timer.expires_after(seconds(state->config.health_interval_s));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
}

}  // namespace pagedllm::router
