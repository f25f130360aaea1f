#include "core/host/parallel_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "core/config/config_error.h"

namespace pagedllm {
namespace {

// Set in the launcher's environment, so a relaunched process that still sees no MPI launcher
// stops instead of relaunching again.
constexpr const char* kRelaunchedVariable = "PAGEDLLM_RELAUNCHED_UNDER_MPI";

// What MPI launchers put in each rank's environment: Open MPI's mpirun, PMIx launchers (srun
// among them), MPICH's Hydra.
bool started_by_mpi_launcher() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

std::vector<std::string> split_on_spaces(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// For the message: the word as a shell would need it.
std::string shell_quoted(const std::string& word) {
  if (!word.empty() && word.find_first_of(" \t\n'\"\\$`()&;|<>*?") == std::string::npos) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

void relaunch_under_mpi_if_needed(const HostConfig& config, const std::vector<std::string>& args) {
  if (!config.parallel || config.parallel->tensor_parallel_size <= 1 || started_by_mpi_launcher()) return;
  const int ranks = config.parallel->tensor_parallel_size;
  const std::string where = config.sources.locate("parallel.tensor_parallel_size");
  if (std::getenv(kRelaunchedVariable) != nullptr) {
    throw ConfigError(fmt::format("{}: parallel.tensor_parallel_size: {}: this process was started by the launcher "
                                  "pagedllm-host ran, but its environment has none of an MPI launcher's variables "
                                  "(OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE): PAGEDLLM_MPIRUN must name an MPI "
                                  "launcher such as Open MPI's mpirun",
                                  where, ranks));
  }
  const char* configured = std::getenv("PAGEDLLM_MPIRUN");
  std::vector<std::string> command = split_on_spaces(configured && *configured ? configured : "mpirun");
  if (command.empty()) command.push_back("mpirun");
  // The launcher starts this very executable: /proc/self/exe, whatever the path it was started by.
  std::vector<char> self(4096);
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (length <= 0) {
    throw ConfigError(fmt::format("{}: cannot find this executable to relaunch: {}", where, std::strerror(errno)));
  }
  const std::string executable(self.data(), static_cast<std::size_t>(length));
  command.insert(command.end(), {"-np", std::to_string(ranks), executable});
  command.insert(command.end(), args.begin(), args.end());

  std::string shown;
  for (const std::string& word : command) shown += (shown.empty() ? "" : " ") + shell_quoted(word);
  // Open MPI's mpirun refuses to start ranks as root (as in a container) unless told twice; the operator who
  // runs pagedllm-host as root has chosen that already. Other launchers ignore these variables.
  std::string as_root;
  if (geteuid() == 0) {
    for (const char* variable : {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}) {
      if (std::getenv(variable) == nullptr) {
        setenv(variable, "1", 1);
        as_root += std::string(as_root.empty() ? "" : " ") + variable + "=1";
      }
    }
    if (!as_root.empty()) as_root = " (running as root: set " + as_root + ", which Open MPI needs for that)";
  }
  std::fprintf(stderr, "pagedllm-host: parallel.tensor_parallel_size is %d: starting the ranks with: %s%s\n", ranks,
               shown.c_str(), as_root.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  setenv(kRelaunchedVariable, "1", 1);
  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int failure = errno;
  unsetenv(kRelaunchedVariable);
  throw ConfigError(fmt::format("{}: parallel.tensor_parallel_size: {}: starting the ranks with `{}` failed: {} "
                                "(install Open MPI's mpirun, name another launcher in PAGEDLLM_MPIRUN, or start the "
                                "ranks yourself: mpirun -np {} pagedllm-host ...)",
                                where, ranks, shown, std::strerror(failure), ranks));
}

}  // namespace pagedllm
