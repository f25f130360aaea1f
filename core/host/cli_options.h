#pragma once
// pagedllm-host's command line.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
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

}  // namespace pagedllm
