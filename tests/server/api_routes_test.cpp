// The route table, API keys, and the routes that answer at once.

#include <catch2/catch.hpp>

#include <string>

#include "core/server/api_routes.h"
#include "tests/server/fake_engine.h"
#include "tests/support/thrown.h"

using namespace pagedllm;
using namespace pagedllm::server;
using pagedllm::testing::FakeEngine;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace http = boost::beast::http;

namespace {

template <class Fn>
ApiError error_of(Fn&& fn) {
  return pagedllm::testing::thrown<ApiError>(fn);
}

}  // namespace

TEST_CASE("routes: methods, 404, 405 with Allow, query strings", "[server][routes]") {
  std::string allow;
  CHECK(match_route(http::verb::post, "/v1/completions", allow).route == Route::kCompletions);
  CHECK(match_route(http::verb::post, "/v1/chat/completions?x=1", allow).route == Route::kChatCompletions);
  CHECK(match_route(http::verb::get, "/v1/models", allow).route == Route::kModels);
  const RouteMatch model = match_route(http::verb::get, "/v1/models/tiny", allow);
  CHECK(model.route == Route::kModel);
  CHECK(model.path == "/v1/models/tiny");
  CHECK(match_route(http::verb::get, "/health", allow).route == Route::kHealth);
  CHECK(match_route(http::verb::get, "/metrics", allow).route == Route::kMetrics);
  CHECK(match_route(http::verb::get, "/version", allow).route == Route::kVersion);
  CHECK(match_route(http::verb::post, "/tokenize", allow).route == Route::kTokenize);
  CHECK(match_route(http::verb::post, "/detokenize", allow).route == Route::kDetokenize);
  CHECK(allow.empty());

  ApiError e = error_of([&] { match_route(http::verb::get, "/v1/completions", allow); });
  CHECK(e.status() == 405);
  CHECK(allow == "POST");
  e = error_of([&] { match_route(http::verb::delete_, "/v1/models/x", allow); });
  CHECK(e.status() == 405);
  CHECK(allow == "GET");
  e = error_of([&] { match_route(http::verb::get, "/v2/nothing", allow); });
  CHECK(e.status() == 404);
  CHECK_THAT(e.what(), Contains("/v2/nothing"));
}

TEST_CASE("API keys guard /v1 only", "[server][routes]") {
  CHECK(requires_api_key("/v1/completions"));
  CHECK(requires_api_key("/v1/models"));
  CHECK_FALSE(requires_api_key("/health"));
  CHECK_FALSE(requires_api_key("/metrics"));
  CHECK_FALSE(requires_api_key("/v10/x"));
  const std::vector<std::string> key = {"s3cret"}, keys = {"first-key", "s3cret", "another"};
  CHECK_NOTHROW(check_api_key("Bearer s3cret", key));
  // Several keys: any of them, whatever its place in the list.
  for (const char* header : {"Bearer first-key", "Bearer s3cret", "Bearer another"}) {
    INFO(header);
    CHECK_NOTHROW(check_api_key(header, keys));
  }
  CHECK(error_of([&] { check_api_key("Bearer first-key", key); }).status() == 401);
  for (const char* header : {"", "s3cret", "Bearer s3cre", "Bearer s3cret2", "Bearer S3cret", "Basic s3cret",
                             "Bearer first-keys", "Bearer "}) {
    CHECK(error_of([&] { check_api_key(header, keys); }).status() == 401);
    const ApiError e = error_of([&] { check_api_key(header, key); });
    INFO(header);
    CHECK(e.status() == 401);
    CHECK(e.code() == std::optional<std::string>("invalid_api_key"));
  }
  const HttpReply reply = error_reply(unauthorized("no"));
  CHECK(reply.headers == std::vector<std::pair<std::string, std::string>>{{"WWW-Authenticate", "Bearer"}});
}

TEST_CASE("error bodies have OpenAI's shape, 503 carries Retry-After", "[server][routes]") {
  const HttpReply bad = error_reply(invalid_request("'n' is wrong", "n"));
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body) ==
        json{{"error", {{"message", "'n' is wrong"}, {"type", "invalid_request_error"}, {"param", "n"}, {"code", nullptr}}}});
  const HttpReply busy = error_reply(unavailable("busy", "overloaded", std::chrono::seconds(3)));
  CHECK(busy.status == 503);
  CHECK(busy.headers == std::vector<std::pair<std::string, std::string>>{{"Retry-After", "3"}});
  CHECK(json::parse(busy.body)["error"]["code"] == "overloaded");
}

TEST_CASE("models, version, health, metrics", "[server][routes]") {
  FakeEngine engine;
  ServerState state(engine, ServerConfig{});
  json models = json::parse(answer(Route::kModels, "/v1/models", "", state).body);
  CHECK(models["object"] == "list");
  REQUIRE(models["data"].size() == 1);
  CHECK(models["data"][0]["id"] == "fake-model");
  CHECK(models["data"][0]["object"] == "model");
  CHECK(models["data"][0]["max_model_len"] == 256);
  CHECK(json::parse(answer(Route::kModel, "/v1/models/fake-model", "", state).body)["id"] == "fake-model");
  const ApiError missing = error_of([&] { answer(Route::kModel, "/v1/models/other", "", state); });
  CHECK(missing.status() == 404);
  CHECK(missing.code() == std::optional<std::string>("model_not_found"));

  CHECK(json::parse(answer(Route::kVersion, "/version", "", state).body) == json{{"version", PAGEDLLM_VERSION}});

  // Health is the engine loop's, not the process's.
  CHECK(error_of([&] { answer(Route::kHealth, "/health", "", state); }).status() == 503);  // not started
  engine.start();
  CHECK(answer(Route::kHealth, "/health", "", state).status == 200);
  engine.set_health(false, "a step has not completed for 60 s");
  const ApiError sick = error_of([&] { answer(Route::kHealth, "/health", "", state); });
  CHECK(sick.status() == 503);
  CHECK_THAT(sick.what(), Contains("a step has not completed for 60 s"));
  CHECK(sick.retry_after.has_value());
  engine.set_health(true, "");
  state.set_draining();
  CHECK(error_of([&] { answer(Route::kHealth, "/health", "", state); }).code() == std::optional<std::string>("shutting_down"));

  const HttpReply metrics = answer(Route::kMetrics, "/metrics", "", state);
  CHECK(metrics.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK_THAT(metrics.body, Contains("pagedllm:num_requests_running{model_name=\"fake-model\"} 0"));
}

TEST_CASE("tokenize and detokenize in vLLM's shapes", "[server][routes]") {
  FakeEngine engine;
  ServerState state(engine, ServerConfig{});
  const auto& tok = engine.tokenizer();
  json reply = json::parse(answer(Route::kTokenize, "/tokenize", R"({"prompt": "Hello world"})", state).body);
  const auto ids = tok.encode("Hello world", true);
  CHECK(reply["tokens"] == json(ids));
  CHECK(reply["count"] == ids.size());
  CHECK(reply["max_model_len"] == 256);
  CHECK(reply["token_strs"] == nullptr);

  reply = json::parse(answer(Route::kTokenize, "/tokenize",
                             R"({"prompt": "Hello", "add_special_tokens": false, "return_token_strs": true})", state)
                          .body);
  CHECK(reply["tokens"] == json(tok.encode("Hello", false)));
  REQUIRE(reply["token_strs"].size() == reply["tokens"].size());
  CHECK(reply["token_strs"][0] == tok.id_to_token(reply["tokens"][0].get<std::int32_t>()).value());

  reply = json::parse(answer(Route::kTokenize, "/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})", state).body);
  const std::vector<tokenizer::ChatMessage> messages{{"user", "hi"}};
  CHECK(reply["tokens"] == json(tok.encode(engine.chat_template()->render(messages, true), false, true)));

  reply = json::parse(answer(Route::kDetokenize, "/detokenize", json{{"tokens", ids}}.dump(), state).body);
  CHECK(reply["prompt"] == tok.decode(ids, false));

  CHECK(error_of([&] { answer(Route::kTokenize, "/tokenize", "{}", state); }).param() ==
        std::optional<std::string>("prompt"));
  CHECK(error_of([&] { answer(Route::kTokenize, "/tokenize", R"({"prompt": 1})", state); }).status() == 400);
  CHECK(error_of([&] { answer(Route::kTokenize, "/tokenize", R"({"prompt": "x", "model": "m"})", state); }).status() == 404);
  CHECK(error_of([&] { answer(Route::kDetokenize, "/detokenize", R"({"tokens": [1, -5]})", state); }).param() ==
        std::optional<std::string>("tokens"));
  CHECK(error_of([&] { answer(Route::kDetokenize, "/detokenize", R"({})", state); }).status() == 400);
}
