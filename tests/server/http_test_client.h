#pragma once
// A blocking HTTP/1.1 client for server tests: raw bytes when a test needs
// them, Beast's parser otherwise. Every read times out (no test hangs).

#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace pagedllm::testing {

namespace http = boost::beast::http;
using HttpResponse = http::response<http::string_body>;

class TestConnection {
 public:
  // `receive_buffer` > 0 sets SO_RCVBUF (a small window makes a slow reader).
  explicit TestConnection(unsigned short port, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                          int receive_buffer = 0)
      : socket_(io_) {
    socket_.open(boost::asio::ip::tcp::v4());
    if (receive_buffer > 0) socket_.set_option(boost::asio::socket_base::receive_buffer_size(receive_buffer));
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  void send(const std::string& bytes) { boost::asio::write(socket_, boost::asio::buffer(bytes)); }

  HttpResponse read_response() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    http::read(socket_, buffer_, parser);
    return parser.release();
  }

  HttpResponse request(http::verb method, const std::string& target, const std::string& body = "",
                       const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    if (!body.empty() || method == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    http::write(socket_, req);
    return read_response();
  }

  HttpResponse post(const std::string& target, const nlohmann::json& body,
                    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    return request(http::verb::post, target, body.dump(), headers);
  }

  // Reads until the server closes the connection: true if it did (EOF or
  // reset) before the read timeout; what came before is discarded.
  bool closed_by_server() {
    char scratch[4096];
    for (;;) {
      boost::system::error_code ec;
      socket_.read_some(boost::asio::buffer(scratch), ec);
      if (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset) return true;
      if (ec) return false;  // timeout
    }
  }

  // A streamed response, read incrementally: the header first, then body
  // bytes (decoded from chunks) until `enough(body)` or the end.
  struct Stream {
    TestConnection& connection;
    http::response_parser<http::string_body> parser;
    void read_until(const std::function<bool(const std::string&)>& enough) {
      while (!parser.is_done() && !enough(parser.get().body())) http::read_some(connection.socket_, connection.buffer_, parser);
    }
    std::string read_all() {
      while (!parser.is_done()) http::read_some(connection.socket_, connection.buffer_, parser);
      return parser.get().body();
    }
  };
  void start_stream(const std::string& target, const nlohmann::json& body, Stream& stream) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
    req.prepare_payload();
    send_request(req);
    read_stream_header(stream);
  }
  // The two halves of start_stream, for a request with headers of its own.
  void send_request(const http::request<http::string_body>& req) { http::write(socket_, req); }
  void read_stream_header(Stream& stream) {
    stream.parser.body_limit(64u << 20);
    http::read_header(socket_, buffer_, stream.parser);
  }

  void close() {
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  // Sends RST instead of FIN.
  void reset() {
    socket_.set_option(boost::asio::socket_base::linger(true, 0));
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

// Complete SSE events so far (the body may end inside one).
inline std::size_t complete_events(const std::string& body) {
  std::size_t count = 0;
  for (std::size_t pos = body.find("\n\n"); pos != std::string::npos; pos = body.find("\n\n", pos + 2)) ++count;
  return count;
}

// The JSON payloads of an SSE body ("[DONE]" as a string).
inline std::vector<nlohmann::json> sse_events(const std::string& body) {
  std::vector<nlohmann::json> events;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos || body.compare(pos, 6, "data: ") != 0) {
      throw std::runtime_error("malformed SSE at byte " + std::to_string(pos) + ": " + body.substr(pos, 80));
    }
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    events.push_back(payload == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(payload));
    pos = end + 2;
  }
  return events;
}

}  // namespace pagedllm::testing
