#include "core/server/cors.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/server/api_error.h"

namespace pagedllm::server {

namespace http = boost::beast::http;

namespace {

bool allowed(const CorsConfig& cors, std::string_view origin) {
  if (origin.empty()) return false;
  return std::any_of(cors.allowed_origins.begin(), cors.allowed_origins.end(),
                     [&](const std::string& entry) { return entry == "*" || entry == origin; });
}

}  // namespace

HeaderList cors_headers(const CorsConfig& cors, std::string_view origin) {
  if (!allowed(cors, origin)) return {};
  // The origin itself rather than "*": the answer then differs by origin, which caches must know (Vary).
  return {{"Access-Control-Allow-Origin", std::string(origin)}, {"Vary", "Origin"}};
}

std::optional<HttpReply> preflight_reply(const CorsConfig& cors, const HttpRequest& request) {
  if (cors.allowed_origins.empty() || request.method() != http::verb::options) return std::nullopt;
  const std::string_view method = view(request[http::field::access_control_request_method]);
  if (method.empty()) return std::nullopt;
  const std::string_view origin = view(request[http::field::origin]);
  if (!allowed(cors, origin)) {
    return error_reply(ApiError(403,
                                fmt::format("Origin '{}' may not call this server (server.cors.allowed_origins).",
                                            origin),
                                "invalid_request_error"));
  }
  HttpReply reply{204, "text/plain", "", cors_headers(cors, origin)};
  reply.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The headers the page asked for (Authorization and Content-Type, for the OpenAI clients): the API reads
  // only the ones it knows, so echoing the request's list allows nothing more than any client may send.
  const std::string_view asked = view(request[http::field::access_control_request_headers]);
  reply.headers.emplace_back("Access-Control-Allow-Headers",
                             asked.empty() ? std::string("Authorization, Content-Type") : std::string(asked));
  reply.headers.emplace_back("Access-Control-Max-Age", std::to_string(cors.max_age_s));
  return reply;
}

}  // namespace pagedllm::server
