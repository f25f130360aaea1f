#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/config/config_error.h"
#include "core/router/router_config.h"

using namespace pagedllm;
using namespace pagedllm::router;
using Catch::Matchers::Contains;

namespace {

const std::string kMinimal = R"(model:
  path: ../models/tiny
replicas:
  - url: http://127.0.0.1:8001
  - {url: "http://localhost:8002/"}
)";

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_router_config(yaml, "/etc/pagedllm/router.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("a minimal router config gets the documented defaults", "[router][config]") {
  const RouterConfig c = parse_router_config(kMinimal, "/etc/pagedllm/router.yaml", {});
  CHECK(c.model_path == "/etc/models/tiny");
  CHECK_FALSE(c.chat_template.has_value());
  REQUIRE(c.replicas.size() == 2);
  CHECK(c.replicas[0].host == "127.0.0.1");
  CHECK(c.replicas[0].port == "8001");
  CHECK(c.replicas[1].host == "localhost");
  CHECK(c.replicas[1].port == "8002");
  CHECK(c.policy == RoutingPolicy::kPrefixAffinity);
  CHECK(c.block_size == 16);
  CHECK(c.load_margin == 4);
  CHECK(c.host == "127.0.0.1");
  CHECK(c.port == 8100);
  CHECK(c.shutdown_grace_period_s == 30.0);
  CHECK(c.log_level == "info");
}

TEST_CASE("every router section is read", "[router][config]") {
  const RouterConfig c = parse_router_config(kMinimal + R"(routing: {policy: round_robin, block_size: 32,
          load_margin: 0, affinity_entries: 100}
health: {interval_s: 0.5, timeout_s: 3}
server: {host: 0.0.0.0, port: 0, io_threads: 4, max_request_body: 1MiB, connect_timeout_s: 2,
         shutdown_grace_period_s: 0}
logging: {level: warn}
)",
                                             "/etc/pagedllm/router.yaml", {"routing.load_margin=2"});
  CHECK(c.policy == RoutingPolicy::kRoundRobin);
  CHECK(c.block_size == 32);
  CHECK(c.load_margin == 2);
  CHECK(c.affinity_entries == 100);
  CHECK(c.health_interval_s == 0.5);
  CHECK(c.health_timeout_s == 3.0);
  CHECK(c.host == "0.0.0.0");
  CHECK(c.port == 0);
  CHECK(c.io_threads == 4);
  CHECK(c.max_request_body_bytes == 1u << 20);
  CHECK(c.connect_timeout_s == 2.0);
  CHECK(c.shutdown_grace_period_s == 0.0);
  CHECK(c.log_level == "warn");
}

TEST_CASE("unknown router keys are refused with their line", "[router][config]") {
  CHECK_THAT(config_error(kMinimal + "routing: {polcy: round_robin}\n"),
             Contains("router.yaml:6:11: routing.polcy: unknown key (did you mean 'policy'?)"));
  CHECK_THAT(config_error(kMinimal + "replica: []\n"), Contains("router.yaml:6:1: replica: unknown key"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas:\n  - {url: http://h:1, weight: 2}\n"),
             Contains("router.yaml:3:23: replicas[0].weight: unknown key"));
}

TEST_CASE("replica urls and required sections are checked", "[router][config]") {
  CHECK_THAT(config_error("model: {path: m}\n"), Contains("replicas: is required"));
  CHECK_THAT(config_error("replicas: [{url: http://h:1}]\n"), Contains("model: is required"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas: []\n"), Contains("must list at least one replica"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas: [{url: https://h:1}]\n"),
             Contains("replicas[0].url: 'https://h:1' is not http://HOST:PORT"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas: [{url: http://h:1}, {url: http://h:1}]\n"),
             Contains("replicas[1].url: 'http://h:1' is listed twice"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas: [{url: http://h:1}]\nrouting: {policy: random}\n"),
             Contains("routing.policy"));
  CHECK_THAT(config_error("model: {path: m}\nreplicas: http://h:1\n"), Contains("expected a list of mappings"));
}

TEST_CASE("replica urls parse to host and port", "[router][config]") {
  CHECK(parse_replica_url("http://[::1]:8000")->host == "::1");
  CHECK(parse_replica_url("http://10.0.0.2:65535")->port == "65535");
  CHECK_FALSE(parse_replica_url("http://h").has_value());
  CHECK_FALSE(parse_replica_url("http://h:0").has_value());
  CHECK_FALSE(parse_replica_url("http://h:70000").has_value());
  CHECK_FALSE(parse_replica_url("http://h:80/v1").has_value());
  CHECK_FALSE(parse_replica_url("http://:80").has_value());
}
