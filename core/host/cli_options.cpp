#include "core/host/cli_options.h"

#include <fmt/format.h>

namespace pagedllm {

std::string usage_text() {
  return R"(Usage: pagedllm-host --config FILE [options]

Serves the model the config describes (OpenAI-compatible HTTP API).

Options:
  --config FILE         the YAML config (see configs/serve.yaml)
  --check               validate the config, load and validate every configured
                        plugin, print a summary and exit
  --set PATH=VALUE      override one config value, validated like the file
                        (repeatable; VALUE is YAML: --set scheduler.max_num_seqs=64,
                        --set attention.options.variant=reference)
  --log-level LEVEL     trace, debug, info, warn, error or off (overrides logging.level)
  --version             print the host and SDK versions and exit
  --help                print this help and exit

Exit codes: 0 success, 2 usage or configuration error, 1 runtime error.
)";
}

CliOptions parse_cli(const std::vector<std::string>& args) {
  CliOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // Both "--flag value" and "--flag=value".
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
    }
    auto take_value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", name));
      return args[++i];
    };
    auto no_value = [&] {
      if (inline_value) throw UsageError(fmt::format("{} takes no value", name));
    };
    if (name == "--config") {
      options.config_file = take_value();
    } else if (name == "--set") {
      options.overrides.push_back(take_value());
    } else if (name == "--log-level") {
      options.log_level = take_value();
    } else if (name == "--check") {
      no_value();
      options.check = true;
    } else if (name == "--version") {
      no_value();
      options.version = true;
    } else if (name == "--help" || name == "-h") {
      no_value();
      options.help = true;
    } else {
      throw UsageError(fmt::format("unknown argument '{}'", arg));
    }
  }
  if (!options.config_file && !options.version && !options.help) {
    throw UsageError("--config FILE is required");
  }
  return options;
}

}  // namespace pagedllm
