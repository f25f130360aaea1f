#include "core/host/cli_options.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

namespace pagedllm {

std::string usage_text() {
  return R"(Usage: pagedllm-host --config FILE [options]

Serves the model the config describes (OpenAI-compatible HTTP API on
server.host:server.port, until SIGINT or SIGTERM: docs/server.md), or with
--prompt generates one completion and streams it to stdout.

Options:
  --config FILE         the YAML config (see configs/serve.yaml)
  --check               validate the config, load and validate every configured
                        plugin, print a summary and exit
  --set PATH=VALUE      override one config value, validated like the file
                        (repeatable; VALUE is YAML: --set scheduler.max_num_seqs=64,
                        --set attention.options.variant=reference)
  --prompt TEXT         generate a completion of TEXT to stdout and exit
    --max-tokens N      tokens to generate (default: up to the context limit)
    --temperature T     0 = greedy (default: the model's generation_config, else 1)
    --top-p P, --top-k K, --min-p P, --repetition-penalty R
    --seed S            makes sampling reproducible
    --stop STR          stop before STR (repeatable)
    --ignore-eos        keep going past the end-of-sequence token
    --no-speculation    decode one token per step even with a speculative: section
  --chat-template FILE  render chat prompts with the Jinja template FILE instead of the model's
                        own (or a built-in format: chatml, llama2, llama3, mistral, zephyr);
                        the same as --set model.chat_template=FILE
  --api-key KEY         require "Authorization: Bearer KEY" on /v1/* (repeatable: any of the
                        keys; replaces server.api_key; PAGEDLLM_API_KEY=KEY1,KEY2 does the
                        same without putting keys on the command line)
  --log-level LEVEL     trace, debug, info, warn, error or off (overrides logging.level)
  --version             print the host and SDK versions and exit
  --help                print this help and exit

Exit codes: 0 success, 2 usage or configuration error, 1 runtime error.
)";
}

namespace {

template <class T>
T parse_number(const std::string& name, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    throw UsageError(fmt::format("{} needs a number, got '{}'", name, text));
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) throw UsageError(fmt::format("{} needs a finite number, got '{}'", name, text));
  }
  return value;
}

}  // namespace

CliOptions parse_cli(const std::vector<std::string>& args) {
  CliOptions options;
  GenerateOptions generate;
  bool generate_flag_seen = false;  // a generation flag, which needs --prompt
  std::string first_generate_flag;
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
    } else if (name == "--chat-template") {
      // A YAML single-quoted string (quotes doubled), so any path reads back as itself.
      std::string quoted = "'";
      for (const char c : take_value()) quoted += c == '\'' ? std::string("''") : std::string(1, c);
      options.overrides.push_back("model.chat_template=" + quoted + "'");
    } else if (name == "--api-key") {
      options.api_keys.push_back(take_value());
      if (options.api_keys.back().empty()) throw UsageError("--api-key needs a non-empty key");
    } else if (name == "--log-level") {
      options.log_level = take_value();
    } else if (name == "--prompt") {
      options.generate = GenerateOptions{};
      generate.prompt = take_value();
    } else if (name == "--max-tokens" || name == "--temperature" || name == "--top-p" ||
               name == "--top-k" || name == "--min-p" || name == "--repetition-penalty" ||
               name == "--seed" || name == "--stop") {
      if (!generate_flag_seen) first_generate_flag = name;
      generate_flag_seen = true;
      const std::string value = take_value();
      if (name == "--max-tokens") generate.max_tokens = parse_number<int>(name, value);
      if (name == "--temperature") generate.temperature = parse_number<float>(name, value);
      if (name == "--top-p") generate.top_p = parse_number<float>(name, value);
      if (name == "--top-k") generate.top_k = parse_number<int>(name, value);
      if (name == "--min-p") generate.min_p = parse_number<float>(name, value);
      if (name == "--repetition-penalty") generate.repetition_penalty = parse_number<float>(name, value);
      if (name == "--seed") generate.seed = parse_number<std::uint64_t>(name, value);
      if (name == "--stop") generate.stop.push_back(value);
    } else if (name == "--ignore-eos") {
      no_value();
      if (!generate_flag_seen) first_generate_flag = name;
      generate_flag_seen = true;
      generate.ignore_eos = true;
    } else if (name == "--no-speculation") {
      no_value();
      if (!generate_flag_seen) first_generate_flag = name;
      generate_flag_seen = true;
      generate.speculative = false;
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
  if (generate_flag_seen && !options.generate) {
    throw UsageError(fmt::format("{} only applies to one-shot generation: add --prompt TEXT", first_generate_flag));
  }
  if (options.generate) {
    if (options.check) throw UsageError("--check and --prompt cannot be combined");
    options.generate = std::move(generate);
  }
  return options;
}

std::pair<std::vector<std::string>, std::string> resolve_api_keys(const std::vector<std::string>& cli_keys,
                                                                  const char* environment_keys,
                                                                  const std::vector<std::string>& config_keys) {
  if (!cli_keys.empty()) return {cli_keys, "--api-key"};
  if (environment_keys) {
    std::vector<std::string> keys;
    std::string_view rest(environment_keys);
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string_view key = rest.substr(0, comma);
      if (key.empty()) throw UsageError(fmt::format("{} holds an empty key (keys are separated by commas)",
                                                    kApiKeyEnvironment));
      keys.emplace_back(key);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    return {keys, kApiKeyEnvironment};
  }
  return {config_keys, config_keys.empty() ? "" : "server.api_key"};
}

}  // namespace pagedllm
