#pragma once
// pagedllm-host's command line.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pagedllm {

// One-shot generation (--prompt): unset fields take the model's
// generation_config.json defaults, then the OpenAI defaults.
struct GenerateOptions {
  std::string prompt;
  std::optional<int> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool speculative = true;
};

struct CliOptions {
  std::optional<std::string> config_file;
  std::vector<std::string> overrides;  // --set path.to.key=value, in order
  std::optional<std::string> log_level;
  bool check = false;
  std::vector<std::string> api_keys;  // --api-key KEY, in order (repeatable)
  std::optional<GenerateOptions> generate;  // --prompt given
  bool version = false;
  bool help = false;
};

// A command line that cannot be understood; exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv (without argv[0]). Throws UsageError.
CliOptions parse_cli(const std::vector<std::string>& args);

std::string usage_text();

// The environment variable that holds the server's API keys (separated by commas) when no --api-key is given.
inline constexpr const char* kApiKeyEnvironment = "PAGEDLLM_API_KEY";

// The keys the server requires, and where they came from ("--api-key", kApiKeyEnvironment, "server.api_key",
// or "" for none): --api-key replaces the config's server.api_key, and so does `environment_keys` (the
// variable's value, null when unset) when no --api-key is given. Throws UsageError for an empty key.
std::pair<std::vector<std::string>, std::string> resolve_api_keys(const std::vector<std::string>& cli_keys,
                                                                  const char* environment_keys,
                                                                  const std::vector<std::string>& config_keys);

}  // namespace pagedllm
