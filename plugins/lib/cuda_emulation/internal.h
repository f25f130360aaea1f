#pragma once
// Between the emulator's parts (simt.cpp, runtime.cpp, cublas.cpp): error
// reporting and the device-side bookkeeping every operation goes through.

#include <cuda_runtime_api.h>

#include <span>
#include <string>

#include "cuda_emulation/simt.h"

// Under AddressSanitizer (gcc's or clang's spelling) the emulator poisons guard zones and
// tells ASan about its fiber stacks.
#if defined(__SANITIZE_ADDRESS__)
#define PAGEDLLM_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGEDLLM_EMULATION_ASAN 1
#endif
#endif
#ifdef PAGEDLLM_EMULATION_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace pagedllm::cuda::emulation::detail {

// Returns `code` after making it the thread's last error, with `message` as
// what cudaGetErrorString(code) says until the next error. A `bug` (stream
// ordering, guard zone, divergence) is also printed to stderr, and aborts
// when PAGEDLLM_CUDA_EMULATION_ABORT=1 (for a debugger).
cudaError_t fail(cudaError_t code, const std::string& message, bool bug = false);

// A fault that leaves the context unusable, as on a GPU: every later call
// returns it (sticky), until the process ends.
cudaError_t fault(cudaError_t code, const std::string& message);

// Before an operation described by `what` runs on `stream`: the sticky error,
// the stream's validity, then the ordering of its accesses against the
// operations of other streams (see runtime.cpp). On success the operation is
// recorded as the last reader or writer of each buffer it touches.
cudaError_t begin_operation(cudaStream_t stream, const std::string& what, std::span<const Access> accesses);

// Checks the guard zones of the allocations `accesses` point into (all
// allocations when empty); a damaged zone is a fault naming `after`.
cudaError_t check_guards(const std::string& after, std::span<const Access> accesses);

// A fault (cudaErrorIllegalAddress) unless [p, p + bytes) lies inside one
// device allocation: what a library kernel reading past a buffer would hit.
cudaError_t check_range(const std::string& what, const void* p, std::size_t bytes);

// Counts a GEMM that ran (launch_counters.h).
void count_gemm_call();

// The stream a cuBLAS handle was given (cublasSetStream).
std::string stream_name(cudaStream_t stream);

}  // namespace pagedllm::cuda::emulation::detail
