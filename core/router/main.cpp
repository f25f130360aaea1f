// pagedllm-router: an OpenAI-compatible front over pagedllm-host replicas (docs/router.md).
//   pagedllm-router --config configs/router.yaml [--set key=value ...] [--log-level LEVEL]
// Exit codes: 0 success, 2 usage or configuration error, 1 runtime error.

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/router/router_config.h"
#include "core/router/router_server.h"
#include "core/tokenizer/tokenizer_error.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr int kExitUsageError = 2;

constexpr std::string_view kUsage =
    "usage: pagedllm-router --config FILE [--set KEY=VALUE ...] [--log-level LEVEL]\n"
    "\n"
    "Serves the OpenAI API in front of the pagedllm-host replicas FILE lists, sending each request to the\n"
    "replica that served its prompt's longest prefix (docs/router.md).\n"
    "  --config FILE       the router's YAML config (configs/router.yaml is an example)\n"
    "  --set KEY=VALUE     replaces a key of the config (VALUE in YAML syntax); repeatable\n"
    "  --log-level LEVEL   trace, debug, info, warn, error or off (default: the config's logging.level)\n"
    "  --help, --version\n";

struct Options {
  std::optional<std::string> config_file;
  std::vector<std::string> overrides;
  std::optional<std::string> log_level;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace pagedllm;
  Options options;
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      fmt::print("{}", kUsage);
      return kExitOk;
    }
    if (arg == "--version") {
      fmt::print("pagedllm-router {}\n", PAGEDLLM_ROUTER_VERSION);
      return kExitOk;
    }
    const bool takes_value = arg == "--config" || arg == "--set" || arg == "--log-level";
    if (!takes_value) {
      fmt::print(stderr, "pagedllm-router: unknown argument '{}'\n\n{}", arg, kUsage);
      return kExitUsageError;
    }
    if (i + 1 == args.size()) {
      fmt::print(stderr, "pagedllm-router: {} needs a value\n\n{}", arg, kUsage);
      return kExitUsageError;
    }
    const std::string& value = args[++i];
    if (arg == "--config") options.config_file = value;
    if (arg == "--set") options.overrides.push_back(value);
    if (arg == "--log-level") options.log_level = value;
  }
  if (!options.config_file) {
    fmt::print(stderr, "pagedllm-router: --config FILE is required\n\n{}", kUsage);
    return kExitUsageError;
  }
  router::RouterConfig config;
  try {
    config = router::load_router_config(*options.config_file, options.overrides);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pagedllm-router: config error: {}\n", e.what());
    return kExitUsageError;
  }
  const std::string level_name = options.log_level.value_or(config.log_level);
  const auto level = parse_log_level(level_name);
  if (!level) {
    fmt::print(stderr, "pagedllm-router: --log-level must be trace, debug, info, warn, error or off, got '{}'\n",
               level_name);
    return kExitUsageError;
  }
  set_log_level(*level);
  try {
    return router::serve_router(config);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pagedllm-router: config error: {}\n", e.what());
    return kExitUsageError;
  } catch (const tokenizer::TokenizerError& e) {
    fmt::print(stderr, "pagedllm-router: config error: model.path: {}\n", e.what());
    return kExitUsageError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pagedllm-router: error: {}\n", e.what());
    return kExitRuntimeError;
  }
}
