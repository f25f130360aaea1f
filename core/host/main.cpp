// pagedllm-host: the serving host. Exit codes: 0 success, 2 usage or
// configuration error, 1 runtime error.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config.h"
#include "core/config/config_error.h"
#include "core/engine/model_check.h"
#include "core/engine/tensor_parallel.h"
#include "core/host/cli_options.h"
#include "core/host/one_shot.h"
#include "core/host/parallel_launch.h"
#include "core/host/plugin_check.h"
#include "core/plugin/sdk_version.h"
#include "core/server/serve.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr int kExitUsageError = 2;

// Serves, or generates (--prompt), or — as rank > 0 of a tensor-parallel group — runs a worker.
// Under tensor parallelism a rank that fails ends the whole job at once (end_parallel_job): the
// others may be waiting for it inside a collective, which nothing but the job's end releases.
int run_engine(const pagedllm::HostConfig& config, pagedllm::PluginRegistry& registry,
               const pagedllm::CliOptions& options, pagedllm::TensorParallelGroup* group,
               std::chrono::steady_clock::time_point started) {
  using namespace pagedllm;
  const std::string who = group ? fmt::format("pagedllm-host rank {} of {}", group->rank(), group->size())
                                : std::string("pagedllm-host");
  try {
    if (group && group->rank() > 0) return run_tensor_parallel_worker(config, registry, *group);
    if (options.generate) return run_one_shot(config, registry, *options.generate, stdout, group);
    std::unique_ptr<Engine> engine = Engine::create(config, registry, group);
    engine->start();
    return server::serve(*engine, config.server, started);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}: config error: {}\n", who, e.what());
    return kExitUsageError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
    if (group) end_parallel_job(kExitRuntimeError);
    return kExitRuntimeError;
  }
}

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
  try {
    auto [keys, source] = resolve_api_keys(options.api_keys, std::getenv(kApiKeyEnvironment), config.server.api_keys);
    config.server.api_keys = std::move(keys);
    if (!source.empty()) host_log().info("API keys: {} from {}", config.server.api_keys.size(), source);
  } catch (const UsageError& e) {
    fmt::print(stderr, "pagedllm-host: {}\n", e.what());
    return kExitUsageError;
  }

  PluginRegistry registry = make_plugin_registry(config);
  const ConfiguredPlugins configured = load_configured_plugins(config, registry);
  for (const auto& error : configured.errors) fmt::print(stderr, "pagedllm-host: config error: {}\n", error);
  if (!configured.ok()) return kExitUsageError;

  if (options.check) {
    // As far as serving would read the model before its weights: a missing path, an architecture or a
    // config.json key the model plugin refuses.
    const auto model_plugin = std::find_if(configured.plugins.begin(), configured.plugins.end(),
                                           [](const ConfiguredPlugin& p) { return p.kind == PLLM_PLUGIN_KIND_MODEL; });
    try {
      if (model_plugin != configured.plugins.end() && model_plugin->library) {
        check_model(config, *model_plugin->library);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "pagedllm-host: config error: {}\n", e.what());
      return kExitUsageError;
    }
    fmt::print("pagedllm-host {} (plugin SDK {}): {} is valid\n\n", PAGEDLLM_HOST_VERSION, kHostSdkVersion.str(),
               *options.config_file);
    print_check_summary(config, configured, std::cout);
    return kExitOk;
  }

  // Tensor parallelism (docs/tensor-parallel.md): every rank mpirun started joins the group; rank 0
  // serves (or generates) and drives the others, which run its steps on their shards. Started by
  // hand, the host first replaces itself with mpirun starting the ranks.
  std::unique_ptr<TensorParallelGroup> group;
  try {
    relaunch_under_mpi_if_needed(config, args);
    group = TensorParallelGroup::join(config, registry);
    if (group) {
      set_log_process_label(fmt::format("rank {}", group->rank()));
      config.device = group->device();  // on CUDA, each rank's own (parallel.devices)
    }
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pagedllm-host: config error: {}\n", e.what());
    // A rank whose device failed after the others joined: they wait for it, and MPI_Finalize would too.
    if (config.parallel && config.parallel->tensor_parallel_size > 1) end_parallel_job(kExitUsageError);
    return kExitUsageError;
  }
  const int exit_code = run_engine(config, registry, options, group.get(), started);
  if (group && exit_code != kExitOk && exit_code != kExitRuntimeError) end_parallel_job(exit_code);
  return exit_code;
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
