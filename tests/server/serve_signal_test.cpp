// serve() as a process: SIGTERM / SIGINT stop accepting, let in-flight
// requests finish within the grace period (or abort them), and exit 0.

#include <catch2/catch.hpp>

#include <csignal>
#include <string>

#include "tests/server/child_process.h"
#include "tests/server/http_test_client.h"

using namespace pagedllm::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const std::string kFakeServer = PAGEDLLM_BINARY_DIR "/bin/pagedllm-fake-server";

// Starts the fake server and returns its port (from "listening on http://127.0.0.1:PORT").
unsigned short start(ChildProcess& server) {
  const std::string line = server.read_line();
  INFO(line);
  REQUIRE_THAT(line, Contains("listening on http://127.0.0.1:"));
  REQUIRE_THAT(line, Contains("ready in"));
  return static_cast<unsigned short>(std::stoi(line.substr(line.rfind(':') + 1)));
}

json stream_request(int max_tokens) {
  return {{"prompt", "Hello there, world"}, {"max_tokens", max_tokens}, {"stream", true}};
}

}  // namespace

TEST_CASE("SIGTERM drains: the stream in flight finishes, then exit 0", "[server][serve]") {
  ChildProcess server({kFakeServer, "--step-ms", "10", "--grace", "30"});
  const unsigned short port = start(server);
  TestConnection c(port);
  TestConnection::Stream stream{c, {}};
  c.start_stream("/v1/completions", stream_request(40), stream);
  stream.read_until([](const std::string& body) { return !body.empty(); });
  server.signal(SIGTERM);
  const auto events = sse_events(stream.read_all());
  CHECK(events.back() == "[DONE]");
  CHECK(events[events.size() - 2]["choices"][0]["finish_reason"] == "length");
  CHECK(server.wait(std::chrono::seconds(10)) == 0);
}

TEST_CASE("past the grace period, requests in flight are aborted with an error event, exit 0", "[server][serve]") {
  ChildProcess server({kFakeServer, "--step-ms", "20", "--grace", "0.2"});
  const unsigned short port = start(server);
  TestConnection c(port);
  TestConnection::Stream stream{c, {}};
  c.start_stream("/v1/completions", stream_request(240), stream);  // ~5 s of tokens
  stream.read_until([](const std::string& body) { return !body.empty(); });
  const auto signalled = std::chrono::steady_clock::now();
  server.signal(SIGINT);
  const auto events = sse_events(stream.read_all());
  CHECK(events.back() == "[DONE]");
  CHECK(events[events.size() - 2]["error"]["code"] == "request_aborted");
  CHECK(server.wait(std::chrono::seconds(10)) == 0);
  CHECK(std::chrono::steady_clock::now() - signalled < std::chrono::seconds(3));
}

TEST_CASE("a second signal cuts the grace period short", "[server][serve]") {
  ChildProcess server({kFakeServer, "--step-ms", "20", "--grace", "60"});
  const unsigned short port = start(server);
  TestConnection c(port);
  TestConnection::Stream stream{c, {}};
  c.start_stream("/v1/completions", stream_request(240), stream);
  stream.read_until([](const std::string& body) { return !body.empty(); });
  server.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.signal(SIGTERM);
  const auto events = sse_events(stream.read_all());
  CHECK(events[events.size() - 2]["error"]["code"] == "request_aborted");
  CHECK(server.wait(std::chrono::seconds(10)) == 0);
}

TEST_CASE("an idle server exits 0 on SIGTERM at once", "[server][serve]") {
  ChildProcess server({kFakeServer});
  const unsigned short port = start(server);
  TestConnection idle(port);
  server.signal(SIGTERM);
  CHECK(server.wait(std::chrono::seconds(5)) == 0);
  CHECK(idle.closed_by_server());
}
