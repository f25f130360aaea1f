#pragma once
// MPI for a plugin: the process's one MPI initialisation, error text, and a
// wait on a non-blocking request that gives up after a timeout instead of
// hanging (MPI's blocking calls have no timeout). plugins/collectives_mpi/README.md
// says what this can and cannot detect.

#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "pagedllm/sdk.hpp"

namespace pagedllm::mpi_runtime {

using Clock = std::chrono::steady_clock;

// The options of both collectives plugins: how long one call waits for its peers.
struct TimeoutOptions {
  double timeout_seconds;
  static TimeoutOptions parse(pllm::OptionReader& r) {
    return {r.get_in_range("timeout_seconds", 300.0, 0.001, 86400.0)};
  }
  Clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  }
};

// The arguments streamed into one string.
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream text;
  (text << ... << std::forward<Args>(args));
  return text.str();
}

inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return cat("MPI error ", code);
  return std::string(text, static_cast<std::size_t>(length));
}

// Whether this library initialised MPI (and so finalises it at shutdown).
inline bool& initialised_here() {
  static bool value = false;
  return value;
}

// Open MPI opens its transport components with dlopen, and they resolve
// symbols of libmpi; the host loads a plugin (and with it libmpi) with
// RTLD_LOCAL, which hides them. Re-opening the loaded libmpi with RTLD_GLOBAL
// makes them visible, as in a program linked to libmpi. The handle stays open
// for the life of the process: MPI cannot be loaded twice.
inline void make_mpi_symbols_global() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) == 0 || !info.dli_fname) return;
  (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

// Initialises MPI for this process unless someone already did, with
// MPI_THREAD_SERIALIZED: successive calls may come from different threads,
// never at once (sdk/README.md, "Threads and reentrancy"). Errors on
// MPI_COMM_WORLD are returned, not fatal. `who` prefixes messages.
inline void ensure_initialised(const std::string& who) {
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, who + ": MPI was finalised in this process already");
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = 0;
  if (!initialised) {
    make_mpi_symbols_global();
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) throw pllm::Error(PLLM_ERROR_COMMUNICATION, who + ": MPI_Init_thread: " + error_text(rc));
    initialised_here() = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(who, ": this MPI provides thread level ", provided,
                                                  ", below the MPI_THREAD_SERIALIZED the host's threads need"));
  }
}

// For a plugin's shutdown: finalises MPI when this library initialised it.
inline void finalise() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialised_here() && !finalized) MPI_Finalize();
}

// Polls `ready()` until it returns true, or `timeout` passes (then false).
// Polling spins for a few rounds (a collective between ranks of one machine
// completes in microseconds), then yields the core (ranks may share cores),
// then sleeps in steps growing to 1 ms.
template <class Ready>
bool poll_until(Ready&& ready, Clock::duration timeout) {
  const auto start = Clock::now();
  for (std::int64_t polls = 0;; ++polls) {
    if (ready()) return true;
    const auto waited = Clock::now() - start;
    if (waited > timeout) return false;
    if (polls < 64) continue;
    if (waited < std::chrono::milliseconds(2)) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(waited / 16, std::chrono::milliseconds(1)));
    }
  }
}

}  // namespace pagedllm::mpi_runtime
