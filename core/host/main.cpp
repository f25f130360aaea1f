// pagedllm-host: the serving host. Exit codes: 0 success, 2 usage or
// configuration error, 1 runtime error.

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config.h"
#include "core/config/config_error.h"
#include "core/host/cli_options.h"
#include "core/host/one_shot.h"
#include "core/host/plugin_check.h"
#include "core/plugin/sdk_version.h"
#include "core/server/serve.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr int kExitUsageError = 2;

int run(const std::vector<std::string>& args) {
  using namespace pagedllm;
  const auto started = std::chrono::steady_clock::now();
  CliOptions options;
  try {
    options = parse_cli(args);
  } catch (const UsageError& e) {
    fmt::print(stderr, "pagedllm-host: {}\n\n{}", e.what(), usage_text());
    return kExitUsageError;
  }
  if (options.help) {
    fmt::print("{}", usage_text());
    return kExitOk;
  }
  if (options.version) {
    fmt::print("pagedllm-host {} (plugin SDK {})\n", PAGEDLLM_HOST_VERSION, kHostSdkVersion.str());
    return kExitOk;
  }
  if (options.log_level) {
    const auto level = parse_log_level(*options.log_level);
    if (!level) {
      fmt::print(stderr, "pagedllm-host: --log-level must be trace, debug, info, warn, error or off, got '{}'\n",
                 *options.log_level);
      return kExitUsageError;
    }
    set_log_level(*level);
  }

  HostConfig config;
  try {
    config = load_config(*options.config_file, options.overrides);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pagedllm-host: config error: {}\n", e.what());
    return kExitUsageError;
  }
  if (!options.log_level) {
    if (auto level = parse_log_level(config.log_level)) set_log_level(*level);
  }

  PluginRegistry registry = make_plugin_registry(config);
  const ConfiguredPlugins configured = load_configured_plugins(config, registry);
  for (const auto& error : configured.errors) fmt::print(stderr, "pagedllm-host: config error: {}\n", error);
  if (!configured.ok()) return kExitUsageError;

  if (options.generate) {
    try {
      return run_one_shot(config, registry, *options.generate, stdout);
    } catch (const ConfigError& e) {
      fmt::print(stderr, "pagedllm-host: config error: {}\n", e.what());
      return kExitUsageError;
    }
  }

  if (options.check) {
    fmt::print("pagedllm-host {} (plugin SDK {}): {} is valid\n\n", PAGEDLLM_HOST_VERSION, kHostSdkVersion.str(),
               *options.config_file);
    print_check_summary(config, configured, std::cout);
    return kExitOk;
  }

  try {
    std::unique_ptr<Engine> engine = Engine::create(config, registry);
    engine->start();
    return server::serve(*engine, config.server, started);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pagedllm-host: config error: {}\n", e.what());
    return kExitUsageError;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedllm-host: error: %s\n", e.what());
    return kExitRuntimeError;
  }
}
