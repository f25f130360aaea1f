#include "core/server/http_server.h"

#include <system_error>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/server/http_session.h"

namespace pagedllm::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpServer::HttpServer(Engine& engine, ServerConfig config)
    : state_(std::make_shared<ServerState>(engine, std::move(config))),
      io_(state_->config().io_threads),
      acceptor_(net::make_strand(io_)),
      accept_retry_(acceptor_.get_executor()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  const ServerConfig& config = state_->config();
  const std::string where = fmt::format("{}:{}", config.host, config.port);
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  const auto endpoints = resolver.resolve(config.host, std::to_string(config.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    throw std::system_error(ec, fmt::format("cannot resolve the server address {}", where));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto check = [&](const char* what) {
    if (ec) throw std::system_error(ec, fmt::format("cannot {} {}", what, where));
  };
  acceptor_.open(endpoint.protocol(), ec);
  check("open a socket for");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  check("set SO_REUSEADDR on");
  acceptor_.bind(endpoint, ec);
  check("bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  check("listen on");
  endpoint_ = acceptor_.local_endpoint();

  work_.emplace(io_.get_executor());
  net::dispatch(acceptor_.get_executor(), [this] { accept(); });
  for (int i = 0; i < config.io_threads; ++i) threads_.emplace_back([this] { io_.run(); });
}

unsigned short HttpServer::port() const { return endpoint_.port(); }

std::string HttpServer::url() const {
  const auto address = endpoint_.address();
  return address.is_v6() ? fmt::format("http://[{}]:{}", address.to_string(), endpoint_.port())
                         : fmt::format("http://{}:{}", address.to_string(), endpoint_.port());
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;  // shutting down
    if (ec) {
      // Out of file descriptors (or a transient failure): the pending
      // connection stays queued; try again shortly instead of spinning.
      host_log().warn("http: accept failed: {}", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks go out as they are written
    std::make_shared<HttpSession>(std::move(socket), state_)->start();
    accept();
  });
}

void HttpServer::begin_shutdown() {
  state_->set_draining();
  net::dispatch(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });
  for (const auto& session : state_->sessions()) session->shutdown();
}

int HttpServer::requests_in_flight() const {
  return std::max(state_->exchanges_in_flight(), state_->engine_requests_in_flight());
}

void HttpServer::abort_in_flight() { state_->abort_all(); }

std::size_t HttpServer::num_connections() const { return state_->num_sessions(); }

void HttpServer::stop() {
  if (threads_.empty()) return;
  // No engine output may reach the I/O objects from here on.
  state_->gate().close();
  begin_shutdown();
  for (const auto& session : state_->sessions()) session->close();
  // With the acceptor and every connection closed, the threads run out of work.
  work_.reset();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

}  // namespace pagedllm::server
