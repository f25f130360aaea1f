#include "core/router/router_server.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/router/client_session.h"
#include "core/router/health_checker.h"
#include "core/router/router_state.h"

namespace pagedllm::router {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

net::awaitable<void> accept_connections(net::io_context& io, tcp::acceptor& acceptor,
                                        std::shared_ptr<RouterState> state) {
  for (;;) {
    // Each connection on its own strand: a session and its client watch never run at once.
    tcp::socket socket(net::make_strand(io));
    boost::system::error_code ec;
    co_await acceptor.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      logger("router")->warn("accepting a connection failed: {}", ec.message());
      continue;
    }
    const net::any_io_executor executor = socket.get_executor();
    net::co_spawn(executor, serve_client(std::move(socket), state), net::detached);
  }
}

// Stops `io` once no request is in flight, or when `grace_s` has passed.
net::awaitable<void> stop_when_drained(net::io_context& io, const RouterState& state, double grace_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(grace_s));
  net::steady_timer timer(co_await net::this_coro::executor);
  while (state.replicas.requests_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  const int cut = state.replicas.requests_in_flight();
  if (cut > 0) logger("router")->warn("the grace period is over: {} requests in flight are cut", cut);
  io.stop();
}

tcp::endpoint listen_endpoint(net::io_context& io, const RouterConfig& config) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results = resolver.resolve(config.host, std::to_string(config.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw ConfigError(fmt::format("{}: server.host: cannot listen on '{}': {}",
                                  config.sources.locate("server.host"), config.host, ec.message()));
  }
  return results.begin()->endpoint();
}

}  // namespace

int serve_router(const RouterConfig& config) {
  std::signal(SIGPIPE, SIG_IGN);
  auto state = std::make_shared<RouterState>(config);
  net::io_context io(config.io_threads);

  // On a strand: the accept loop and the signal handler that closes it never run at once.
  tcp::acceptor acceptor(net::make_strand(io));
  const tcp::endpoint endpoint = listen_endpoint(io, config);
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw ConfigError(fmt::format("{}: server: cannot listen on {}:{}: {}", config.sources.locate("server.port"),
                                  config.host, config.port, ec.message()));
  }
  const tcp::endpoint bound = acceptor.local_endpoint();
  const std::string address = bound.address().is_v6() ? fmt::format("[{}]", bound.address().to_string())
                                                       : bound.address().to_string();

  net::co_spawn(acceptor.get_executor(), accept_connections(io, acceptor, state), net::detached);
  for (std::size_t i = 0; i < config.replicas.size(); ++i) {
    net::co_spawn(net::make_strand(io), watch_replica_health(state, static_cast<int>(i)), net::detached);
  }
  // The first SIGINT/SIGTERM closes the listening socket and lets the requests in flight finish within
  // server.shutdown_grace_period_s; a second one, or the end of the period, stops the router at once.
  net::signal_set signals(io, SIGINT, SIGTERM);
  int signals_received = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& error,
                                                                            int signal_number) {
    if (error) return;
    if (++signals_received > 1) {
      logger("router")->info("signal {} again: stopping now", signal_number);
      io.stop();
      return;
    }
    logger("router")->info("signal {}: no new connections; {} requests in flight get up to {} s to finish (a "
                           "second signal stops at once)",
                           signal_number, state->replicas.requests_in_flight(), config.shutdown_grace_period_s);
    net::dispatch(acceptor.get_executor(), [&acceptor] {
      boost::system::error_code ignored;
      acceptor.close(ignored);
    });
    net::co_spawn(io, stop_when_drained(io, *state, config.shutdown_grace_period_s), net::detached);
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  std::fprintf(stdout, "pagedllm-router: listening on http://%s:%u (%zu replicas, policy %s)\n", address.c_str(),
               static_cast<unsigned>(bound.port()), config.replicas.size(),
               std::string(policy_name(config.policy)).c_str());
  std::fflush(stdout);

  std::vector<std::thread> threads;
  for (int i = 1; i < config.io_threads; ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  for (std::thread& thread : threads) thread.join();
  return 0;
}

}  // namespace pagedllm::router
