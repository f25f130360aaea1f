// pagedllm-fake-server: serve() in front of the fake engine, as a process of
// its own, for tests of signals and shutdown (and of clients, without a model).
//   pagedllm-fake-server [--port N] [--step-ms N] [--grace S] [--api-key K]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/server/serve.h"
#include "tests/server/fake_engine.h"

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  pagedllm::ServerConfig config;
  config.port = 0;
  pagedllm::testing::FakeEngineOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--port") {
      config.port = std::stoi(value);
    } else if (flag == "--step-ms") {
      options.step_interval = std::chrono::milliseconds(std::stoi(value));
    } else if (flag == "--grace") {
      config.shutdown_grace_period_s = std::stod(value);
    } else if (flag == "--api-key") {
      config.api_keys.push_back(value);
    } else {
      std::fprintf(stderr, "pagedllm-fake-server: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    pagedllm::testing::FakeEngine engine(options);
    engine.start();
    return pagedllm::server::serve(engine, config, started);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedllm-fake-server: %s\n", e.what());
    return 1;
  }
}
