#pragma once
// One client's connection as the router's session and its upstream exchanges share it.

#include <chrono>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace pagedllm::router {

struct ClientConnection {
  // A client that reads nothing for this long while its answer is being written counts as gone.
  static constexpr std::chrono::seconds kSendTimeout{60};
  // An idle keep-alive connection, or a request arriving this slowly, is closed.
  static constexpr std::chrono::seconds kReadTimeout{60};

  boost::beast::tcp_stream stream;
  boost::beast::flat_buffer buffer;  // bytes read from the client and not yet parsed
  bool keep_alive = true;            // false: the connection closes after the answer in progress
};

}  // namespace pagedllm::router
