#pragma once
// What a connection does with a request before any socket I/O: the parser's
// limits, the reply to a read error, and the route and API-key check. Shared
// by HttpSession and the HTTP fuzz target (tools/fuzz), so both read requests
// the same way.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/config/config.h"
#include "core/server/api_routes.h"

namespace pagedllm::server {

// A request header larger than this is refused with 431.
inline constexpr std::size_t kHeaderLimit = 16 * 1024;

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// A parser for the next request, with the server's header and body limits.
void limit_request_parser(RequestParser& parser, const ServerConfig& config);

// The reply to an error reading a request (413, 431, 400 for a malformed one),
// or nullopt when nobody is left to answer (EOF, reset, timeout).
std::optional<HttpReply> read_error_reply(const boost::beast::error_code& ec, const ServerConfig& config);

// The route of a complete request, after the API key check. Throws ApiError
// (404, 405 with `allow` set, 401).
RouteMatch route_request(const HttpRequest& request, const ServerConfig& config, std::string& allow);

// Beast 1.74 speaks boost::string_view.
inline std::string_view view(boost::beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace pagedllm::server
