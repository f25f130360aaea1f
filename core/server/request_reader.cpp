#include "core/server/request_reader.h"

#include <fmt/format.h>

#include "core/server/api_error.h"

namespace pagedllm::server {

namespace http = boost::beast::http;

namespace {

bool is_http_parse_error(const boost::beast::error_code& ec) {
  return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

}  // namespace

void limit_request_parser(RequestParser& parser, const ServerConfig& config) {
  parser.header_limit(kHeaderLimit);
  parser.body_limit(config.max_request_body_bytes);
}

std::optional<HttpReply> read_error_reply(const boost::beast::error_code& ec, const ServerConfig& config) {
  if (ec == http::error::body_limit) {
    return error_reply(request_too_large(
        fmt::format("The request body is larger than this server's limit of {} bytes.", config.max_request_body_bytes)));
  }
  if (ec == http::error::header_limit) {
    return error_reply(ApiError(431, fmt::format("The request header is larger than {} bytes.", kHeaderLimit),
                                "invalid_request_error"));
  }
  if (is_http_parse_error(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return error_reply(invalid_request(fmt::format("Malformed HTTP request: {}.", ec.message())));
  }
  return std::nullopt;
}

RouteMatch route_request(const HttpRequest& request, const ServerConfig& config, std::string& allow) {
  RouteMatch match = match_route(request.method(), view(request.target()), allow);
  if (!config.api_keys.empty() && requires_api_key(match.path)) {
    check_api_key(view(request[http::field::authorization]), config.api_keys);
  }
  return match;
}

}  // namespace pagedllm::server
