#include "core/router/upstream_exchange.h"

#include <array>
#include <chrono>
#include <limits>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "core/server/api_error.h"

namespace pagedllm::router {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr std::size_t kChunkBytes = 16 * 1024;

// Watches the client while its answer is produced. Runs beside the exchange on the session's strand; the
// exchange stops it (stop()) and waits for it to end before the connection is used again.
class ClientWatch {
 public:
  ClientWatch(ClientConnection& client, beast::tcp_stream& upstream, const net::any_io_executor& executor)
      : client_(client), upstream_(upstream), finished_(executor) {}

  void start(const net::any_io_executor& executor) {
    running_ = true;
    net::co_spawn(executor, watch(), net::detached);
  }

  net::awaitable<void> stop() {
    over_ = true;
    beast::error_code ignored;
    client_.stream.socket().cancel(ignored);
    if (running_) {
      finished_.expires_at(std::chrono::steady_clock::time_point::max());
      beast::error_code cancelled;
      co_await finished_.async_wait(net::redirect_error(net::use_awaitable, cancelled));
    }
  }

  bool client_gone() const { return client_gone_; }

 private:
  net::awaitable<void> watch() {
    beast::error_code ec;
    // A client does not send while it waits for its answer, so any completion but bytes means it left. Bytes
    // (a pipelined request) are kept for the session and end the watch.
    const std::size_t bytes = co_await client_.stream.socket().async_read_some(
        client_.buffer.prepare(kChunkBytes), net::redirect_error(net::use_awaitable, ec));
    client_.buffer.commit(bytes);
    if (ec && !over_) {
      client_gone_ = true;
      beast::error_code ignored;
      upstream_.socket().close(ignored);  // the replica sees the connection end and aborts the request
    }
    running_ = false;
    finished_.cancel();
  }

  ClientConnection& client_;
  beast::tcp_stream& upstream_;
  net::steady_timer finished_;
  bool running_ = false;
  bool over_ = false;
  bool client_gone_ = false;
};

bool is_event_stream(const http::fields& fields) {
  const auto it = fields.find(http::field::content_type);
  if (it == fields.end()) return false;
  return std::string_view(it->value().data(), it->value().size()).starts_with("text/event-stream");
}

// The headers a replica's answer carries that mean something to the client.
template <typename Body>
void copy_answer_headers(const http::fields& from, http::response<Body>& to) {
  for (const http::field name : {http::field::content_type, http::field::retry_after, http::field::allow,
                                 http::field::cache_control}) {
    if (const auto it = from.find(name); it != from.end()) to.set(name, it->value());
  }
}

class Exchange {
 public:
  Exchange(const ReplicaConfig& replica, const RouterConfig& config, const Request& request,
           ClientConnection& client, const net::any_io_executor& executor)
      : replica_(replica), config_(config), request_(request), client_(client), executor_(executor),
        upstream_(executor), watch_(client, upstream_, executor) {}

  net::awaitable<ExchangeResult> run() {
    watch_.start(executor_);
    const ExchangeResult result = co_await forward();
    co_await watch_.stop();
    co_return result;
  }

 private:
  // An upstream operation failed: the replica's failure, unless the watch closed the connection because the
  // client had left (what happens after the outcome is decided, such as the client leaving once it has read
  // an error event, changes nothing).
  ExchangeResult failed_early(const std::string& step, const beast::error_code& ec) const {
    if (watch_.client_gone()) return client_gone();
    return {ExchangeOutcome::kReplicaFailedEarly, fmt::format("{} {}: {}", step, replica_.url, ec.message())};
  }

  static ExchangeResult client_gone() { return {ExchangeOutcome::kClientGone, "the client left"}; }

  net::awaitable<ExchangeResult> forward() {
    beast::error_code ec;
    tcp::resolver resolver(executor_);
    const auto endpoints =
        co_await resolver.async_resolve(replica_.host, replica_.port, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return failed_early("resolving", ec);
    upstream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.connect_timeout_s)));
    co_await upstream_.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return failed_early("connecting to", ec);

    Request outgoing{request_.method(), request_.target(), 11};
    outgoing.set(http::field::host, fmt::format("{}:{}", replica_.host, replica_.port));
    for (const http::field name : {http::field::authorization, http::field::content_type, http::field::accept}) {
      if (const auto it = request_.find(name); it != request_.end()) outgoing.set(name, it->value());
    }
    outgoing.keep_alive(false);
    outgoing.body() = request_.body();
    outgoing.prepare_payload();
    co_await http::async_write(upstream_, outgoing, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return failed_early("sending the request to", ec);

    // A generation takes as long as it takes; a replica that dies closes the connection, one that hangs
    // fails its health probes (docs/router.md).
    upstream_.expires_never();
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    co_await http::async_read_header(upstream_, upstream_buffer_, parser_,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return failed_early("reading the answer of", ec);
    if (is_event_stream(parser_.get())) co_return co_await pass_stream();
    co_return co_await pass_whole();
  }

  // Reads what the replica sends next into chunk_; returns the bytes, sets ec (need_buffer is no error).
  net::awaitable<std::size_t> read_some_body(beast::error_code& ec) {
    parser_.get().body().data = chunk_.data();
    parser_.get().body().size = chunk_.size();
    parser_.get().body().more = true;
    co_await http::async_read_some(upstream_, upstream_buffer_, parser_, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    co_return chunk_.size() - parser_.get().body().size;
  }

  net::awaitable<ExchangeResult> pass_whole() {
    std::string body;
    beast::error_code ec;
    while (!parser_.is_done()) {
      const std::size_t bytes = co_await read_some_body(ec);
      if (ec) co_return failed_early("reading the answer of", ec);
      body.append(chunk_.data(), bytes);
    }
    http::response<http::string_body> answer{parser_.get().result(), 11};
    copy_answer_headers(parser_.get(), answer);
    answer.keep_alive(client_.keep_alive);
    answer.body() = std::move(body);
    answer.prepare_payload();
    client_.stream.expires_after(ClientConnection::kSendTimeout);
    co_await http::async_write(client_.stream, answer, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return client_gone();
    co_return ExchangeResult{};
  }

  net::awaitable<ExchangeResult> pass_stream() {
    beast::error_code ec;
    http::response<http::empty_body> header{parser_.get().result(), 11};
    copy_answer_headers(parser_.get(), header);
    header.keep_alive(client_.keep_alive);
    header.chunked(true);
    http::response_serializer<http::empty_body> serializer{header};
    client_.stream.expires_after(ClientConnection::kSendTimeout);
    co_await http::async_write_header(client_.stream, serializer, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return client_gone();

    while (!parser_.is_done()) {
      beast::error_code upstream_error;
      const std::size_t bytes = co_await read_some_body(upstream_error);
      if (bytes > 0) {
        client_.stream.expires_after(ClientConnection::kSendTimeout);
        co_await net::async_write(client_.stream, http::make_chunk(net::buffer(chunk_.data(), bytes)),
                                  net::redirect_error(net::use_awaitable, ec));
        if (ec) co_return client_gone();
      }
      if (upstream_error && watch_.client_gone()) co_return client_gone();
      if (upstream_error) co_return co_await end_stream_with_error(upstream_error);
    }
    client_.stream.expires_after(ClientConnection::kSendTimeout);
    co_await net::async_write(client_.stream, http::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return client_gone();
    co_return ExchangeResult{};
  }

  // The replica broke after part of its stream reached the client: the stream's last events say so, as
  // pagedllm-host ends a stream whose generation failed, and the connection closes.
  net::awaitable<ExchangeResult> end_stream_with_error(const beast::error_code& upstream_error) {
    const std::string detail = fmt::format("the replica {} failed while streaming: {}", replica_.url,
                                           upstream_error.message());
    const server::ApiError error(502, "The replica serving this request failed while streaming (" + detail + ").",
                                 "server_error", std::nullopt, std::string("replica_failed"));
    const std::string events = "data: " + error.body() + "\n\ndata: [DONE]\n\n";
    client_.keep_alive = false;
    beast::error_code ec;
    client_.stream.expires_after(ClientConnection::kSendTimeout);
    co_await net::async_write(client_.stream, http::make_chunk(net::buffer(events)),
                              net::redirect_error(net::use_awaitable, ec));
    if (!ec) {
      co_await net::async_write(client_.stream, http::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
    }
    co_return ExchangeResult{ExchangeOutcome::kReplicaFailedStreaming, detail};
  }

  const ReplicaConfig& replica_;
  const RouterConfig& config_;
  const Request& request_;
  ClientConnection& client_;
  net::any_io_executor executor_;
  beast::tcp_stream upstream_;
  ClientWatch watch_;
  beast::flat_buffer upstream_buffer_;
  http::response_parser<http::buffer_body> parser_;
  std::array<char, kChunkBytes> chunk_{};
};

}  // namespace

net::awaitable<ExchangeResult> exchange_with_replica(const ReplicaConfig& replica, const RouterConfig& config,
                                                     const Request& request, ClientConnection& client) {
  const net::any_io_executor executor = co_await net::this_coro::executor;
  Exchange exchange(replica, config, request, client, executor);
  co_return co_await exchange.run();
}

}  // namespace pagedllm::router
