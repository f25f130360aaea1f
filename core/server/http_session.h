#pragma once
// One HTTP/1.1 connection: reads requests (header and body limits, timeouts,
// Expect: 100-continue), answers them in order, keeps the connection alive
// between them, and runs generation exchanges with the engine.
//
// Everything a session does runs on its strand. Engine outputs arrive on the
// engine thread and are posted to that strand (the engine never waits on a
// client). While a generation runs, a pending read on the socket notices the
// client leaving (EOF or reset) and aborts its engine requests; a stream whose
// reader falls too far behind, or stops reading for send_timeout_s, counts as
// gone too.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/server/api_routes.h"
#include "core/server/openai_request.h"
#include "core/server/request_reader.h"
#include "core/server/server_state.h"

namespace pagedllm::server {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // Pending SSE bytes a slow reader may leave unread before its requests are aborted.
  static constexpr std::size_t kMaxPendingStreamBytes = 16u << 20;

  HttpSession(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerState> state);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  void start();
  // Thread-safe. The server drains: close now if idle, else after the response in progress.
  void shutdown();
  // Thread-safe. Close now, aborting the generation in progress.
  void close();

 private:
  struct Exchange;

  // --- Reading a request ---
  void read_header();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void on_read_error(boost::beast::error_code ec);
  void handle_request();

  // --- Answering ---
  void write_reply(HttpReply reply);
  void on_reply_written(boost::beast::error_code ec);
  void next_request();

  // --- Generation ---
  void start_generation(ApiKind kind);
  void on_output(std::uint64_t serial, std::size_t prompt_index, RequestOutput output);
  void fail_exchange(const ApiError& error);
  void end_exchange();
  void flush_stream();
  void on_stream_written(boost::beast::error_code ec);
  void on_stream_finished(boost::beast::error_code ec);
  void watch_for_disconnect();
  void on_watch(boost::beast::error_code ec, std::size_t bytes);

  // --- Closing ---
  void close_gracefully();
  void linger(std::size_t drained);
  void close_now();

  std::shared_ptr<ServerState> state_;
  boost::beast::tcp_stream stream_;
  const boost::asio::any_io_executor executor_;  // the connection's strand
  boost::beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  HttpRequest request_;
  bool keep_alive_ = false;
  bool idle_ = false;  // waiting for a request, nothing of it read yet
  bool shutting_down_ = false;
  bool closed_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;  // the watch read was cancelled to read the next request
  std::uint64_t last_serial_ = 0;
  std::unique_ptr<Exchange> exchange_;
  // Holds the session while an exchange waits on the engine (engine callbacks
  // only hold weak references).
  std::shared_ptr<HttpSession> self_;
};

}  // namespace pagedllm::server
