#pragma once
// The OpenAI-compatible HTTP server: one Asio io_context run by a small fixed
// pool of I/O threads (server.io_threads), one strand per connection, so idle
// keep-alive connections and streams cost no thread. docs/server.md has the
// routes, fields, errors, metrics and limits.
//
//   HttpServer server(engine, config.server);
//   server.start();                    // binds, listens, starts the I/O threads
//   ...
//   server.begin_shutdown();           // stop accepting; in-flight requests go on
//   while (server.requests_in_flight() > 0 && !late) wait;
//   server.abort_in_flight();          // what is left ends now
//   server.stop();                     // close everything, join the threads

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/server/server_state.h"

namespace pagedllm::server {

class HttpServer {
 public:
  HttpServer(Engine& engine, ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Throws std::system_error naming the address when it cannot listen.
  void start();
  // The port listened on (the chosen one when the config says 0).
  unsigned short port() const;
  std::string url() const;  // "http://127.0.0.1:8000"

  // Stops accepting; idle connections close; new requests on open ones get 503.
  void begin_shutdown();
  // Generation requests whose engine work or response is not done.
  int requests_in_flight() const;
  // Aborts every engine request in flight (their clients get an error).
  void abort_in_flight();
  // Closes every connection and joins the I/O threads. Idempotent.
  void stop();

  std::size_t num_connections() const;

 private:
  void accept();

  std::shared_ptr<ServerState> state_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  boost::asio::ip::tcp::endpoint endpoint_;
};

}  // namespace pagedllm::server
