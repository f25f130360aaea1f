#include "core/server/api_routes.h"

#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/server/openai_request.h"
#include "core/server/openai_response.h"
#include "core/server/prometheus_metrics.h"
#include "core/server/request_fields.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::server {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

struct RouteEntry {
  std::string_view path;
  http::verb method;
  Route route;
};

constexpr std::array kRoutes = {
    RouteEntry{"/v1/completions", http::verb::post, Route::kCompletions},
    RouteEntry{"/v1/chat/completions", http::verb::post, Route::kChatCompletions},
    RouteEntry{"/v1/models", http::verb::get, Route::kModels},
    RouteEntry{"/health", http::verb::get, Route::kHealth},
    RouteEntry{"/metrics", http::verb::get, Route::kMetrics},
    RouteEntry{"/version", http::verb::get, Route::kVersion},
    RouteEntry{"/tokenize", http::verb::post, Route::kTokenize},
    RouteEntry{"/detokenize", http::verb::post, Route::kDetokenize},
};
constexpr std::string_view kModelPrefix = "/v1/models/";

json model_card(ServerState& state) {
  const ModelDescription& model = state.engine().model();
  return {{"id", model.served_name},
          {"object", "model"},
          {"created", state.started_unix()},
          {"owned_by", "pagedllm"},
          {"root", model.served_name},
          {"parent", nullptr},
          {"max_model_len", model.max_model_len}};
}

HttpReply json_reply(const json& value) { return {200, "application/json", dump_json(value), {}}; }

// vLLM's POST /tokenize: {"prompt": "..."} or {"messages": [...]}.
HttpReply tokenize(std::string_view body, ServerState& state) {
  const json request = parse_json_object(body);
  const Engine& engine = state.engine();
  check_model(request, engine);
  std::vector<std::int32_t> ids;
  if (field(request, "messages")) {
    const nlohmann::ordered_json ordered_request = parse_ordered_json(body);
    ids = render_chat_prompt(engine, parse_chat_messages(request, ordered_request),
                             parse_chat_tools(request, ordered_request).definitions,
                             get_bool(request, "add_generation_prompt").value_or(true),
                             get_bool(request, "add_special_tokens").value_or(false));
  } else {
    const std::optional<std::string> prompt = get_string(request, "prompt");
    if (!prompt) throw invalid_request("'prompt' or 'messages' is required", "prompt");
    try {
      ids = engine.tokenizer().encode(*prompt, get_bool(request, "add_special_tokens").value_or(true));
    } catch (const tokenizer::TokenizerError& e) {
      throw invalid_request(fmt::format("the prompt cannot be tokenized: {}", e.what()), "prompt");
    }
  }
  json reply = {{"count", ids.size()}, {"max_model_len", engine.model().max_model_len}, {"tokens", ids},
                {"token_strs", nullptr}};
  if (get_bool(request, "return_token_strs").value_or(false)) {
    json strs = json::array();
    for (const std::int32_t id : ids) strs.push_back(engine.tokenizer().id_to_token(id).value_or(""));
    reply["token_strs"] = std::move(strs);
  }
  return json_reply(reply);
}

// vLLM's POST /detokenize: {"tokens": [ids]} -> {"prompt": "..."}.
HttpReply detokenize(std::string_view body, ServerState& state) {
  const json request = parse_json_object(body);
  const Engine& engine = state.engine();
  check_model(request, engine);
  const json* tokens = field(request, "tokens");
  if (!tokens) throw invalid_request("'tokens' is required", "tokens");
  const std::vector<std::int32_t> ids = parse_token_ids(*tokens, "tokens", engine);
  return json_reply({{"prompt", engine.tokenizer().decode(ids, /*skip_special_tokens=*/false)}});
}

HttpReply health(ServerState& state) {
  if (state.draining()) throw unavailable("The server is shutting down.", "shutting_down", std::chrono::seconds(1));
  if (!state.engine().healthy()) {
    throw unavailable(fmt::format("The engine is not running: {}", state.engine().health_detail()), "engine_unhealthy",
                      std::chrono::seconds(5));
  }
  return json_reply({{"status", "ok"}});
}

}  // namespace

RouteMatch match_route(http::verb method, std::string_view target, std::string& allow) {
  const std::string path(target.substr(0, target.find('?')));
  const bool model_path = path.size() > kModelPrefix.size() && path.starts_with(kModelPrefix);
  for (const RouteEntry& entry : kRoutes) {
    if (entry.path == path) {
      if (entry.method == method) return {entry.route, path};
      allow = std::string(http::to_string(entry.method));
      throw method_not_allowed(fmt::format("Method {} is not allowed for {}; use {}.",
                                           std::string(http::to_string(method)), path, allow));
    }
  }
  if (model_path) {
    if (method == http::verb::get) return {Route::kModel, path};
    allow = "GET";
    throw method_not_allowed(fmt::format("Method {} is not allowed for {}; use GET.", std::string(http::to_string(method)), path));
  }
  throw not_found(fmt::format("No route for {}.", path));
}

bool requires_api_key(std::string_view path) { return path == "/v1" || path.starts_with("/v1/"); }

void check_api_key(std::string_view authorization, std::span<const std::string> keys) {
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) {
    throw unauthorized("You didn't provide an API key. Send it as \"Authorization: Bearer <key>\".");
  }
  const std::string_view given = authorization.substr(kBearer.size());
  // Constant time in each key's length: no early exit on the first difference, nor on the key that matches.
  bool matched = false;
  for (const std::string& key : keys) {
    unsigned char difference = given.size() == key.size() ? 0 : 1;
    for (std::size_t i = 0; i < key.size(); ++i) {
      difference |= static_cast<unsigned char>(key[i] ^ (i < given.size() ? given[i] : '\0'));
    }
    matched |= difference == 0;
  }
  if (!matched) throw unauthorized("Incorrect API key provided.");
}

HttpReply error_reply(const ApiError& error) {
  HttpReply reply{error.status(), "application/json", error.body(), {}};
  if (error.retry_after) reply.headers.emplace_back("Retry-After", std::to_string(error.retry_after->count()));
  if (error.status() == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer");
  return reply;
}

HttpReply answer(Route route, const std::string& path, std::string_view body, ServerState& state) {
  switch (route) {
    case Route::kModels:
      return json_reply({{"object", "list"}, {"data", json::array({model_card(state)})}});
    case Route::kModel: {
      const std::string id = path.substr(kModelPrefix.size());
      if (id != state.engine().model().served_name) {
        throw not_found(fmt::format("The model `{}` does not exist.", id), std::string("model_not_found"));
      }
      return json_reply(model_card(state));
    }
    case Route::kHealth:
      return health(state);
    case Route::kMetrics:
      return {200, kPrometheusContentType,
              render_prometheus(state.engine().metrics(), state.engine().model().served_name), {}};
    case Route::kVersion:
      return json_reply({{"version", PAGEDLLM_VERSION}});
    case Route::kTokenize:
      return tokenize(body, state);
    case Route::kDetokenize:
      return detokenize(body, state);
    case Route::kCompletions:
    case Route::kChatCompletions:
      break;
  }
  PAGEDLLM_CHECK(false, "route {} is answered by the session, not answer()", path);
}

}  // namespace pagedllm::server
