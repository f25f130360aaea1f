#pragma once
// Cross-origin resource sharing (server.cors; docs/server.md "CORS"): which browser pages may call the
// API. A page on another origin first sends a preflight (OPTIONS with Access-Control-Request-Method),
// answered here without an API key (browsers never send one on a preflight); the responses to an
// allowed origin then carry Access-Control-Allow-Origin. Nothing is allowed unless the config lists
// origins: with none, a preflight is answered as any OPTIONS request (405) and no response carries
// CORS headers, so a browser keeps other origins' pages out.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/server/api_routes.h"
#include "core/server/request_reader.h"

namespace pagedllm::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The headers a response to a request from `origin` (its Origin header, "" without one) carries:
// Access-Control-Allow-Origin and Vary: Origin when the origin is allowed, nothing otherwise.
HeaderList cors_headers(const CorsConfig& cors, std::string_view origin);

// A CORS preflight's answer: 204 with the allowed methods and headers and Access-Control-Max-Age for an
// allowed origin, 403 naming the origin for another. nullopt when `request` is no preflight or when no
// origin is allowed at all (then it is routed like any request).
std::optional<HttpReply> preflight_reply(const CorsConfig& cors, const HttpRequest& request);

}  // namespace pagedllm::server
