#pragma once
// The route table and the routes that answer at once (everything but the two
// generation routes, which stream from the engine: http_session.cpp).

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http/verb.hpp>

#include "core/engine/engine.h"
#include "core/server/api_error.h"
#include "core/server/server_state.h"

namespace pagedllm::server {

enum class Route {
  kCompletions,      // POST /v1/completions
  kChatCompletions,  // POST /v1/chat/completions
  kModels,           // GET /v1/models
  kModel,            // GET /v1/models/{id}
  kHealth,           // GET /health
  kMetrics,          // GET /metrics
  kVersion,          // GET /version
  kTokenize,         // POST /tokenize
  kDetokenize,       // POST /detokenize
};

// The route for `method` and `target` (query string ignored). Throws ApiError
// 404 (unknown path) or 405 (known path, other method; `allow` set).
struct RouteMatch {
  Route route;
  std::string path;  // without the query string
};
RouteMatch match_route(boost::beast::http::verb method, std::string_view target, std::string& allow);

// True for the paths an API key protects (/v1/...).
bool requires_api_key(std::string_view path);
// Checks "Authorization: Bearer <key>" against every one of `keys` (constant time in each key: no early
// exit on a difference, nor on a match). Throws 401.
void check_api_key(std::string_view authorization_header, std::span<const std::string> keys);

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

HttpReply error_reply(const ApiError& error);

// Answers a route other than kCompletions / kChatCompletions. Throws ApiError.
HttpReply answer(Route route, const std::string& path, std::string_view body, ServerState& state);

}  // namespace pagedllm::server
