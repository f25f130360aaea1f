#pragma once
// Runs a shell command and captures its exit code, stdout and stderr.

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace pagedllm::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CommandResult run_command(const std::string& command) {
  TempDir dir;
  const auto out_file = dir.path() / "stdout";
  const auto err_file = dir.path() / "stderr";
  const std::string full =
      command + " >'" + out_file.string() + "' 2>'" + err_file.string() + "' </dev/null";
  const int status = std::system(full.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  result.out = slurp(out_file);
  result.err = slurp(err_file);
  return result;
}

}  // namespace pagedllm::testing
