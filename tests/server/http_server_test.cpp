// The real server over real sockets, in front of the fake engine: HTTP
// framing, limits, keys, keep-alive, SSE, disconnects, overload, shutdown.

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/server/http_server.h"
#include "tests/server/fake_engine.h"
#include "tests/server/http_test_client.h"

using namespace pagedllm;
using namespace pagedllm::testing;
using pagedllm::server::HttpServer;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

ServerConfig test_config() {
  ServerConfig config;
  config.port = 0;
  config.io_threads = 2;
  config.max_request_body_bytes = 64 * 1024;
  config.keep_alive_timeout_s = 5;
  config.request_timeout_s = 5;
  config.send_timeout_s = 5;
  return config;
}

struct Served {
  explicit Served(ServerConfig config = test_config(), FakeEngineOptions options = {})
      : engine(std::move(options)), server(engine, std::move(config)) {
    engine.start();
    server.start();
  }
  ~Served() {
    engine.shutdown(ShutdownMode::kAbort);
    server.stop();
  }
  unsigned short port() const { return server.port(); }

  FakeEngine engine;
  HttpServer server;
};

template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

json body_of(const HttpResponse& response) { return json::parse(response.body()); }

const json kHello = {{"model", "fake-model"}, {"prompt", "Hello there, world"}, {"max_tokens", 5}};

}  // namespace

TEST_CASE("completions over HTTP, twice on one keep-alive connection", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  for (int i = 0; i < 2; ++i) {
    const HttpResponse r = c.post("/v1/completions", kHello);
    REQUIRE(r.result_int() == 200);
    CHECK(r[http::field::content_type] == "application/json");
    CHECK(r.keep_alive());
    const json body = body_of(r);
    CHECK(body["object"] == "text_completion");
    CHECK(body["choices"][0]["finish_reason"] == "length");
    CHECK(body["usage"]["completion_tokens"] == 5);
    // The fake engine repeats the prompt's tokens: the text is the prompt's start.
    const auto ids = s.engine.tokenizer().encode("Hello there, world", true);
    const std::vector<std::int32_t> first(ids.begin(), ids.begin() + 5);
    CHECK(body["choices"][0]["text"] == s.engine.tokenizer().decode(first, true));
  }
  CHECK(s.engine.requests().size() == 2);
}

TEST_CASE("chat, models, tokenize and metrics over HTTP", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  HttpResponse r = c.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}});
  REQUIRE(r.result_int() == 200);
  json body = body_of(r);
  CHECK(body["object"] == "chat.completion");
  CHECK(body["choices"][0]["message"]["role"] == "assistant");
  r = c.request(http::verb::get, "/v1/models");
  CHECK(body_of(r)["data"][0]["id"] == "fake-model");
  r = c.post("/tokenize", {{"prompt", "hi"}});
  CHECK(body_of(r)["count"] == s.engine.tokenizer().encode("hi", true).size());
  r = c.request(http::verb::get, "/metrics");
  CHECK(r[http::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");
  CHECK_THAT(r.body(), Contains("pagedllm:request_success_total{finished_reason=\"length\",model_name=\"fake-model\"} 1"));
  r = c.request(http::verb::get, "/health");
  CHECK(r.result_int() == 200);
}

TEST_CASE("batch prompts with n = 2 over HTTP", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  const HttpResponse r = c.post("/v1/completions", {{"prompt", {"one two", "three four"}}, {"n", 2}, {"max_tokens", 2}});
  REQUIRE(r.result_int() == 200);
  const json body = body_of(r);
  REQUIRE(body["choices"].size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(body["choices"][i]["index"] == i);
  CHECK(s.engine.requests().size() == 2);
}

TEST_CASE("HTTP/1.0 and Connection: close end the connection after the response", "[server][http]") {
  Served s;
  {
    TestConnection c(s.port());
    c.send("GET /health HTTP/1.0\r\n\r\n");
    const HttpResponse r = c.read_response();
    CHECK(r.result_int() == 200);
    CHECK_FALSE(r.keep_alive());
    CHECK(c.closed_by_server());
  }
  {
    TestConnection c(s.port());
    const HttpResponse r = c.request(http::verb::get, "/version", "", {{"Connection", "close"}});
    CHECK(r.result_int() == 200);
    CHECK(c.closed_by_server());
  }
}

TEST_CASE("malformed HTTP gets a 400 and a closed connection, the server goes on", "[server][http]") {
  Served s;
  static constexpr char kTlsHello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n";  // NULs included
  for (const std::string& garbage : {std::string("GARBAGE\r\n\r\n"), std::string("GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
                                    std::string("POST /v1/completions HTTP/9.9\r\n\r\n"),
                                    std::string(kTlsHello, sizeof(kTlsHello) - 1)}) {
    TestConnection c(s.port());
    c.send(garbage);
    const HttpResponse r = c.read_response();
    CHECK(r.result_int() == 400);
    CHECK_THAT(r.body(), Contains("Malformed HTTP request"));
    CHECK(c.closed_by_server());
  }
  {
    TestConnection c(s.port());  // a request cut short: nobody to answer
    c.send("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro");
    c.close();
  }
  TestConnection c(s.port());
  CHECK(c.post("/v1/completions", kHello).result_int() == 200);
}

TEST_CASE("bodies over the limit get 413, headers over the limit 431", "[server][http]") {
  Served s;
  {
    TestConnection c(s.port());
    // Refused from the header alone: the body is never sent.
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    const HttpResponse r = c.read_response();
    CHECK(r.result_int() == 413);
    CHECK(body_of(r)["error"]["code"] == "request_too_large");
    CHECK_THAT(r.body(), Contains("65536 bytes"));
    CHECK(c.closed_by_server());
  }
  {
    TestConnection c(s.port());
    // A chunked body that grows past the limit.
    std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string chunk(8192, 'a');
    for (int i = 0; i < 9; ++i) request += "2000\r\n" + chunk + "\r\n";
    c.send(request);
    CHECK(c.read_response().result_int() == 413);
  }
  {
    TestConnection c(s.port());
    c.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n");
    CHECK(c.read_response().result_int() == 431);
  }
}

TEST_CASE("API key: 401 without it or with a wrong one, /health stays open", "[server][http]") {
  ServerConfig config = test_config();
  config.api_keys = {"s3cret"};
  Served s(config);
  TestConnection c(s.port());
  HttpResponse r = c.post("/v1/completions", kHello);
  CHECK(r.result_int() == 401);
  CHECK(r[http::field::www_authenticate] == "Bearer");
  CHECK(body_of(r)["error"]["code"] == "invalid_api_key");
  r = c.post("/v1/completions", kHello, {{"Authorization", "Bearer wrong"}});
  CHECK(r.result_int() == 401);
  r = c.post("/v1/completions", kHello, {{"Authorization", "Bearer s3cret"}});
  CHECK(r.result_int() == 200);
  CHECK(c.request(http::verb::get, "/health").result_int() == 200);
  CHECK(s.engine.requests().size() == 1);
}

TEST_CASE("CORS: nothing allowed by default, listed origins get preflights and headers without the API key",
          "[server][http][cors]") {
  const std::vector<std::pair<std::string, std::string>> preflight = {
      {"Origin", "http://app.example:3000"},
      {"Access-Control-Request-Method", "POST"},
      {"Access-Control-Request-Headers", "authorization, content-type"}};
  {
    // Default: a preflight is an OPTIONS like any other (405), and no response names an origin.
    Served s;
    TestConnection c(s.port());
    HttpResponse r = c.request(http::verb::options, "/v1/chat/completions", "", preflight);
    CHECK(r.result_int() == 405);
    CHECK(r[http::field::access_control_allow_origin].empty());
    r = c.post("/v1/completions", kHello, {{"Origin", "http://app.example:3000"}});
    CHECK(r.result_int() == 200);
    CHECK(r[http::field::access_control_allow_origin].empty());
  }
  ServerConfig config = test_config();
  config.api_keys = {"s3cret"};
  config.cors.allowed_origins = {"http://app.example:3000"};
  config.cors.max_age_s = 120;
  Served s(config);
  TestConnection c(s.port());
  // The preflight carries no API key (browsers never send one there) and is answered.
  HttpResponse r = c.request(http::verb::options, "/v1/chat/completions", "", preflight);
  CHECK(r.result_int() == 204);
  CHECK(r[http::field::access_control_allow_origin] == "http://app.example:3000");
  CHECK(r[http::field::access_control_allow_methods] == "GET, POST, OPTIONS");
  CHECK(r[http::field::access_control_allow_headers] == "authorization, content-type");
  CHECK(r[http::field::access_control_max_age] == "120");
  CHECK(r[http::field::vary] == "Origin");
  // Another origin's preflight: 403 naming it; the request then never comes (the browser stops).
  auto other = preflight;
  other[0].second = "http://evil.example";
  r = c.request(http::verb::options, "/v1/chat/completions", "", other);
  CHECK(r.result_int() == 403);
  CHECK_THAT(body_of(r)["error"]["message"].get<std::string>(), Contains("http://evil.example"));
  CHECK(r[http::field::access_control_allow_origin].empty());
  // The actual request: allowed origin, with the key -> the header; errors carry it too, so the page reads them.
  r = c.post("/v1/completions", kHello, {{"Origin", "http://app.example:3000"}, {"Authorization", "Bearer s3cret"}});
  CHECK(r.result_int() == 200);
  CHECK(r[http::field::access_control_allow_origin] == "http://app.example:3000");
  r = c.post("/v1/completions", kHello, {{"Origin", "http://app.example:3000"}});
  CHECK(r.result_int() == 401);
  CHECK(r[http::field::access_control_allow_origin] == "http://app.example:3000");
  r = c.post("/v1/completions", kHello, {{"Origin", "http://evil.example"}, {"Authorization", "Bearer s3cret"}});
  CHECK(r.result_int() == 200);
  CHECK(r[http::field::access_control_allow_origin].empty());
  // A streamed response carries it in its header.
  TestConnection streaming(s.port());
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::origin, "http://app.example:3000");
  req.set(http::field::authorization, "Bearer s3cret");
  req.body() = json{{"model", "fake-model"}, {"prompt", "Hello"}, {"max_tokens", 2}, {"stream", true}}.dump();
  req.prepare_payload();
  streaming.send_request(req);
  TestConnection::Stream stream{streaming, {}};
  streaming.read_stream_header(stream);
  CHECK(stream.parser.get().result_int() == 200);
  CHECK(stream.parser.get()[http::field::access_control_allow_origin] == "http://app.example:3000");
  CHECK(sse_events(stream.read_all()).back() == "[DONE]");
}

TEST_CASE("404 for unknown routes and models, 405 with Allow", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  HttpResponse r = c.request(http::verb::get, "/v1/nothing");
  CHECK(r.result_int() == 404);
  CHECK(body_of(r)["error"]["type"] == "invalid_request_error");
  r = c.request(http::verb::get, "/v1/completions");
  CHECK(r.result_int() == 405);
  CHECK(r[http::field::allow] == "POST");
  r = c.post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}});
  CHECK(r.result_int() == 404);
  CHECK(body_of(r)["error"]["code"] == "model_not_found");
  r = c.post("/v1/completions", {{"prompt", "x"}, {"temperature", "hot"}});
  CHECK(r.result_int() == 400);
  CHECK(body_of(r)["error"]["param"] == "temperature");
  CHECK(r.keep_alive());  // a 400 for a well-formed request keeps the connection
  CHECK(c.request(http::verb::get, "/health").result_int() == 200);
}

TEST_CASE("Expect: 100-continue", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  const std::string body = kHello.dump();
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
  // The interim response, then the real one after the body.
  const HttpResponse continue_response = c.read_response();
  CHECK(continue_response.result_int() == 100);
  c.send(body);
  CHECK(c.read_response().result_int() == 200);
}

TEST_CASE("SSE: data chunks, the finish, usage and [DONE], the connection stays usable", "[server][http][sse]") {
  Served s;
  TestConnection c(s.port());
  TestConnection::Stream stream{c, {}};
  c.start_stream("/v1/completions", {{"prompt", "Hello there, world"}, {"max_tokens", 4}, {"stream", true},
                                     {"stream_options", {{"include_usage", true}}}},
                 stream);
  CHECK(stream.parser.get().result_int() == 200);
  CHECK(stream.parser.get()[http::field::content_type] == "text/event-stream");
  CHECK(stream.parser.chunked());
  const auto events = sse_events(stream.read_all());
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  const json& usage_chunk = events[events.size() - 2];
  CHECK(usage_chunk["choices"] == json::array());
  CHECK(usage_chunk["usage"]["completion_tokens"] == 4);
  const json& last = events[events.size() - 3];
  CHECK(last["choices"][0]["finish_reason"] == "length");
  std::string text;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) text += events[i]["choices"][0]["text"].get<std::string>();
  CHECK(text == body_of(c.post("/v1/completions", {{"prompt", "Hello there, world"}, {"max_tokens", 4}}))["choices"][0]["text"]);
}

TEST_CASE("a client that disconnects mid-stream has its request aborted", "[server][http][abort]") {
  FakeEngineOptions slow;
  slow.step_interval = std::chrono::milliseconds(10);
  Served s(test_config(), slow);
  for (const bool rst : {false, true}) {
    TestConnection c(s.port());
    TestConnection::Stream stream{c, {}};
    c.start_stream("/v1/completions", {{"prompt", "Hello there"}, {"max_tokens", 200}, {"stream", true}}, stream);
    stream.read_until([](const std::string& body) { return complete_events(body) >= 2; });
    if (rst) {
      c.reset();
    } else {
      c.close();
    }
    CHECK(eventually([&] { return s.engine.aborted().size() == (rst ? 2u : 1u); }));
    CHECK(s.engine.wait_idle(std::chrono::seconds(5)));
    CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
  }
  CHECK(s.engine.metrics().requests_aborted == 2);
}

TEST_CASE("a client that disconnects while waiting for a whole response has its request aborted",
          "[server][http][abort]") {
  Served s;
  s.engine.pause();
  TestConnection c(s.port());
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(kHello.dump().size()) + "\r\n\r\n" + kHello.dump());
  REQUIRE(eventually([&] { return s.engine.num_active() == 1; }));
  c.close();
  CHECK(eventually([&] { return s.engine.aborted().size() == 1; }));
  CHECK(s.engine.wait_idle(std::chrono::seconds(5)));
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
}

TEST_CASE("pipelined requests are answered in order", "[server][http]") {
  Served s;
  TestConnection c(s.port());
  const std::string body = kHello.dump();
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  c.send(post + "GET /version HTTP/1.1\r\nHost: x\r\n\r\n" + post);
  CHECK(body_of(c.read_response())["object"] == "text_completion");
  CHECK(body_of(c.read_response()).contains("version"));
  CHECK(body_of(c.read_response())["object"] == "text_completion");
}

TEST_CASE("503 with Retry-After when over max_concurrent_requests or the engine is unavailable",
          "[server][http]") {
  ServerConfig config = test_config();
  config.max_concurrent_requests = 2;
  Served s(config);
  s.engine.pause();
  TestConnection busy(s.port());
  TestConnection::Stream stream{busy, {}};
  busy.start_stream("/v1/completions", {{"prompt", "x"}, {"n", 2}, {"stream", true}}, stream);  // one request, n = 2
  TestConnection c(s.port());
  HttpResponse r = c.post("/v1/completions", {{"prompt", {"a", "b"}}});  // two more would be three
  CHECK(r.result_int() == 503);
  CHECK(r[http::field::retry_after] == "1");
  CHECK(body_of(r)["error"]["code"] == "overloaded");
  r = c.post("/v1/completions", {{"prompt", {"a", "b", "c"}}});  // more than the limit can ever hold
  CHECK(r.result_int() == 400);
  s.engine.resume();
  stream.read_all();
  CHECK(c.post("/v1/completions", {{"prompt", {"a", "b"}}}).result_int() == 200);

  s.engine.set_unavailable("the engine queue is full");
  r = c.post("/v1/completions", kHello);
  CHECK(r.result_int() == 503);
  CHECK(r[http::field::retry_after] == "2");
  CHECK_THAT(r.body(), Contains("the engine queue is full"));
  s.engine.set_unavailable(std::nullopt);
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
}

TEST_CASE("RequestRejected is a 400, engine failure is a 500 or a last error event", "[server][http]") {
  FakeEngineOptions options;
  options.step_interval = std::chrono::milliseconds(5);
  Served s(test_config(), options);
  TestConnection c(s.port());
  s.engine.reject_next("max_tokens (9000) exceeds what the KV cache can ever hold", "max_tokens");
  HttpResponse r = c.post("/v1/completions", kHello);
  CHECK(r.result_int() == 400);
  CHECK(body_of(r)["error"] == json{{"message", "max_tokens (9000) exceeds what the KV cache can ever hold"},
                                    {"type", "invalid_request_error"}, {"param", "max_tokens"}, {"code", nullptr}});
  s.engine.pause();
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(kHello.dump().size()) + "\r\n\r\n" + kHello.dump());
  REQUIRE(eventually([&] { return s.engine.num_active() == 1; }));
  s.engine.fail_next_step("the model plugin failed: out of memory");
  s.engine.resume();
  r = c.read_response();
  CHECK(r.result_int() == 500);
  CHECK_THAT(r.body(), Contains("out of memory"));

  TestConnection::Stream stream{c, {}};
  s.engine.pause();
  c.start_stream("/v1/completions", {{"prompt", "x y z"}, {"max_tokens", 50}, {"stream", true}}, stream);
  REQUIRE(eventually([&] { return s.engine.num_active() == 1; }));
  s.engine.fail_next_step("the sampler plugin failed");
  s.engine.resume();
  const auto events = sse_events(stream.read_all());
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  CHECK_THAT(events[events.size() - 2]["error"]["message"].get<std::string>(), Contains("the sampler plugin failed"));
}

TEST_CASE("a stream reader that stops reading counts as gone after send_timeout_s", "[server][http][abort]") {
  ServerConfig config = test_config();
  config.send_timeout_s = 0.5;
  FakeEngineOptions options;
  options.max_model_len = 1 << 20;
  options.step_interval = std::chrono::microseconds(100);
  options.text_repeat = 256;  // fill the socket buffers in few events, even under sanitizers
  Served s(config, options);
  TestConnection c(s.port(), std::chrono::seconds(10), 4096);
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ");
  const std::string body = json{{"prompt", "Hello there, world"}, {"n", 8}, {"max_tokens", 500000}, {"stream", true}}.dump();
  c.send(std::to_string(body.size()) + "\r\n\r\n" + body);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return s.engine.aborted().size() == 1; }, std::chrono::seconds(30)));
  INFO("aborted after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s");
  CHECK(s.engine.wait_idle(std::chrono::seconds(5)));
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
}

TEST_CASE("a stream reader more than 16 MiB behind counts as gone", "[server][http][abort]") {
  ServerConfig config = test_config();
  config.send_timeout_s = 600;  // the backlog, not the stall, must end it
  FakeEngineOptions options;
  options.max_model_len = 1 << 20;
  options.step_interval = std::chrono::microseconds(100);
  options.text_repeat = 1024;
  Served s(config, options);
  TestConnection c(s.port(), std::chrono::seconds(10), 4096);
  const std::string body = json{{"prompt", "Hello there, world"}, {"n", 8}, {"max_tokens", 500000}, {"stream", true}}.dump();
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  REQUIRE(eventually([&] { return s.engine.aborted().size() == 1; }, std::chrono::seconds(60)));
  CHECK(s.engine.wait_idle(std::chrono::seconds(5)));
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
}

TEST_CASE("idle keep-alive connections time out", "[server][http]") {
  ServerConfig config = test_config();
  config.keep_alive_timeout_s = 0.2;
  Served s(config);
  TestConnection c(s.port());
  CHECK(c.request(http::verb::get, "/health").result_int() == 200);
  const auto start = std::chrono::steady_clock::now();
  CHECK(c.closed_by_server());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}

TEST_CASE("hundreds of idle connections cost no thread and do not stop the server", "[server][http]") {
  Served s;
  std::vector<std::unique_ptr<TestConnection>> idle;
  for (int i = 0; i < 500; ++i) idle.push_back(std::make_unique<TestConnection>(s.port()));
  CHECK(eventually([&] { return s.server.num_connections() >= 500; }));
  TestConnection c(s.port());
  CHECK(c.post("/v1/completions", kHello).result_int() == 200);
  CHECK(idle[250]->request(http::verb::get, "/health").result_int() == 200);
}

TEST_CASE("64 concurrent streams, a third of them abandoned mid-stream", "[server][http][sse]") {
  FakeEngineOptions options;
  options.step_interval = std::chrono::milliseconds(2);
  Served s(test_config(), options);
  constexpr int kClients = 64;
  std::atomic<int> complete{0};
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      try {
        TestConnection c(s.port());
        TestConnection::Stream stream{c, {}};
        c.start_stream("/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "count to ten please " + std::to_string(i)}}}},
                        {"max_tokens", 30}, {"stream", true}},
                       stream);
        if (i % 3 == 0) {
          stream.read_until([](const std::string& body) { return complete_events(body) >= 3; });
          c.close();
          return;
        }
        const auto events = sse_events(stream.read_all());
        int content_chunks = 0;
        for (const auto& e : events) {
          if (e.is_object() && e["choices"][0]["delta"].contains("content")) ++content_chunks;
        }
        if (events.back() == "[DONE]" && events[events.size() - 2]["choices"][0]["finish_reason"] == "length" &&
            content_chunks > 0) {
          ++complete;
        }
      } catch (const std::exception& e) {
        const std::lock_guard lock(errors_mutex);
        errors.push_back(fmt::format("client {}: {}", i, e.what()));
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(errors == std::vector<std::string>{});
  CHECK(complete == kClients - (kClients + 2) / 3);
  CHECK(s.engine.wait_idle(std::chrono::seconds(10)));
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
  const EngineMetrics m = s.engine.metrics();
  CHECK(m.scheduler.num_running == 0);
  CHECK(m.scheduler.kv.num_free_device_blocks == m.scheduler.kv.num_device_blocks);
}

TEST_CASE("shutdown: idle connections close, the stream in flight finishes, new connections are refused",
          "[server][http][shutdown]") {
  FakeEngineOptions options;
  options.step_interval = std::chrono::milliseconds(5);
  Served s(test_config(), options);
  TestConnection idle(s.port());
  CHECK(idle.request(http::verb::get, "/health").result_int() == 200);
  TestConnection c(s.port());
  TestConnection::Stream stream{c, {}};
  c.start_stream("/v1/completions", {{"prompt", "Hello there"}, {"max_tokens", 40}, {"stream", true}}, stream);
  stream.read_until([](const std::string& body) { return !body.empty(); });
  s.server.begin_shutdown();
  CHECK(idle.closed_by_server());
  const auto events = sse_events(stream.read_all());
  CHECK(events.back() == "[DONE]");
  CHECK(events[events.size() - 2]["choices"][0]["finish_reason"] == "length");
  CHECK(c.closed_by_server());  // no keep-alive while draining
  CHECK(eventually([&] { return s.server.requests_in_flight() == 0; }));
  CHECK_THROWS(TestConnection(s.port()));
}
