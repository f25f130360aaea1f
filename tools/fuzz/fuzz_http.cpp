// HTTP requests as a connection reads them: Beast's request parser with the
// server's limits (a 16 KiB header, here a 64 KiB body), fed by a stream that
// hands over the bytes in chunks of the size the first input byte picks (a
// socket's reads split requests anywhere), keep-alive and pipelining (up to 8
// requests per input), then what HttpSession does before any I/O: the route
// and API key (route_request), and the answer of every route but the
// generation ones, whose bodies go through parse_generation_request.
// Properties: a read error is answered with 400, 413 or 431 or not at all;
// a refusal is a 4xx ApiError, or a 503 from the engine; nothing else escapes.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/system/system_error.hpp>

#include "core/server/api_error.h"
#include "core/server/api_routes.h"
#include "core/server/cors.h"
#include "core/server/openai_request.h"
#include "core/server/request_reader.h"
#include "core/server/server_state.h"
#include "tools/fuzz/fuzz_engine.h"

using namespace pagedllm;
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

// A SyncReadStream over the input: at most `chunk` bytes per read, then EOF.
class ChunkedInput {
 public:
  ChunkedInput(std::string_view bytes, std::size_t chunk) : bytes_(bytes), chunk_(chunk) {}

  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers& buffers, beast::error_code& ec) {
    if (offset_ == bytes_.size()) {
      ec = net::error::eof;
      return 0;
    }
    ec = {};
    const std::size_t n = net::buffer_copy(
        buffers, net::buffer(bytes_.data() + offset_, std::min(chunk_, bytes_.size() - offset_)));
    offset_ += n;
    return n;
  }
  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers& buffers) {
    beast::error_code ec;
    const std::size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view bytes_;
  std::size_t chunk_;
  std::size_t offset_ = 0;
};

ServerConfig fuzz_server_config() {
  ServerConfig config;
  config.api_keys = {"sk-fuzz", "sk-second"};
  config.cors.allowed_origins = {"http://localhost:5173"};
  config.max_request_body_bytes = 64 * 1024;
  return config;
}

void check_refusal(const server::ApiError& e) {
  if (e.status() < 400 || e.status() > 503 || (e.status() >= 500 && e.status() != 503)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::ParseOnlyEngine engine;
  static server::ServerState state(engine, fuzz_server_config());
  if (size == 0) return 0;
  const std::size_t chunk = data[0] == 0 ? 1 << 20 : data[0];
  ChunkedInput input(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), chunk);
  beast::flat_buffer buffer;
  for (int n = 0; n < 8; ++n) {
    server::RequestParser parser;
    server::limit_request_parser(parser, state.config());
    beast::error_code ec;
    http::read_header(input, buffer, parser, ec);
    if (!ec) http::read(input, buffer, parser, ec);
    if (ec) {
      if (const auto reply = server::read_error_reply(ec, state.config())) {
        if (reply->status != 400 && reply->status != 413 && reply->status != 431) __builtin_trap();
      }
      return 0;
    }
    const server::HttpRequest request = parser.release();
    std::string allow;
    if (const auto preflight = server::preflight_reply(state.config().cors, request)) {
      if (preflight->status != 204 && preflight->status != 403) __builtin_trap();
      (void)server::cors_headers(state.config().cors, server::view(request[http::field::origin]));
      if (!request.keep_alive()) return 0;
      continue;
    }
    try {
      const server::RouteMatch match = server::route_request(request, state.config(), allow);
      if (match.route == server::Route::kCompletions || match.route == server::Route::kChatCompletions) {
        const auto kind =
            match.route == server::Route::kChatCompletions ? server::ApiKind::kChat : server::ApiKind::kCompletion;
        const server::GenerationPlan plan = server::parse_generation_request(kind, request.body(), engine);
        for (std::size_t i = 0; i < plan.prompts.size() && i < 16; ++i) {
          try {
            (void)to_scheduler_request(server::make_engine_request(plan, i), engine.limits());
          } catch (const RequestRejected&) {
          }
        }
      } else {
        const server::HttpReply reply = server::answer(match.route, match.path, request.body(), state);
        if (reply.status >= 500) __builtin_trap();
      }
    } catch (const server::ApiError& e) {
      check_refusal(e);
    }
    if (!request.keep_alive()) return 0;
  }
  return 0;
}
