#include "core/server/serve.h"

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/server/http_server.h"

namespace pagedllm::server {

namespace net = boost::asio;

namespace {

// Every idle keep-alive connection holds a descriptor: allow as many as the
// hard limit does (the soft default of 1024 is easily reached).
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Runs `io` until `done()` or `deadline`.
template <class Done>
void wait_until(net::io_context& io, std::chrono::steady_clock::time_point deadline, Done done) {
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int serve(Engine& engine, const ServerConfig& config, std::chrono::steady_clock::time_point started) {
  using Clock = std::chrono::steady_clock;
  std::signal(SIGPIPE, SIG_IGN);
  raise_descriptor_limit();

  net::io_context signals_io;
  net::signal_set signals(signals_io, SIGINT, SIGTERM);
  int signals_received = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                            int number) {
    if (ec) return;
    ++signals_received;
    host_log().info("received {}", number == SIGINT ? "SIGINT" : "SIGTERM");
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  HttpServer server(engine, config);
  server.start();
  const double ready_s = std::chrono::duration<double>(Clock::now() - started).count();
  std::fprintf(stdout, "pagedllm-host: listening on %s (ready in %.2f s)\n", server.url().c_str(), ready_s);
  std::fflush(stdout);

  // Until a signal, or until the engine fails for good (a plugin error): then the requests
  // in flight have their error and the host stops, exit 1, for a supervisor to restart it.
  std::optional<std::string> engine_failure;
  wait_until(signals_io, Clock::time_point::max(), [&] {
    if (signals_received == 0) engine_failure = engine.failure();
    return signals_received > 0 || engine_failure.has_value();
  });
  if (engine_failure) host_log().error("the engine failed, stopping the server: {}", *engine_failure);

  const auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config.shutdown_grace_period_s));
  host_log().info("shutting down: no new requests; {} in flight get up to {} s to finish (a second signal aborts them)",
                  server.requests_in_flight(), config.shutdown_grace_period_s);
  server.begin_shutdown();
  wait_until(signals_io, Clock::now() + grace,
             [&] { return server.requests_in_flight() == 0 || signals_received > 1; });
  if (server.requests_in_flight() > 0) {
    host_log().warn("shutting down: aborting {} requests still in flight", server.requests_in_flight());
    server.abort_in_flight();
    // Aborted requests end within an engine step; their clients get an error.
    wait_until(signals_io, Clock::now() + std::chrono::seconds(5), [&] { return server.requests_in_flight() == 0; });
  }
  engine.shutdown(server.requests_in_flight() == 0 ? ShutdownMode::kDrain : ShutdownMode::kAbort);
  server.stop();
  host_log().info("stopped");
  // From here the host only exits. Removing the signal set restores the default action,
  // under which a late SIGTERM (an operator's second one, or a supervisor's) would kill the
  // process and turn a clean exit into death by signal: such signals are ignored instead.
  signals.clear();
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  return engine_failure ? 1 : 0;
}

}  // namespace pagedllm::server
