#pragma once
// pagedllm-host's command line.

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagedllm {

struct CliOptions {
  std::optional<std::string> config_file;
  std::vector<std::string> overrides;  // --set path.to.key=value, in order
  std::optional<std::string> log_level;
  bool check = false;
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
