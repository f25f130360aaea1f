#pragma once
// The single-command launch of a tensor-parallel job (docs/tensor-parallel.md): `pagedllm-host
// --config F` whose config asks for N > 1 ranks, started by hand rather than by an MPI launcher,
// replaces itself with `mpirun -np N <this executable> <the same arguments>`, which starts the N
// ranks (rank 0 serves, as under a hand-written mpirun).

#include <string>
#include <vector>

#include "core/config/config.h"

namespace pagedllm {

// Does nothing when the config has no parallel.tensor_parallel_size > 1 or an MPI launcher started
// this process (its environment says so). Otherwise execs the launcher: PAGEDLLM_MPIRUN (a command
// line, split on spaces: "mpirun --oversubscribe") or "mpirun". Returns only when nothing is to be
// done; throws ConfigError when the launcher cannot be started or a relaunched process finds no
// launcher's environment (a launcher that is not MPI's).
void relaunch_under_mpi_if_needed(const HostConfig& config, const std::vector<std::string>& args);

}  // namespace pagedllm
