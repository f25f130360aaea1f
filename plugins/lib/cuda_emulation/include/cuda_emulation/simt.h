#pragma once
// The SIMT emulator's interface (libpagedllm_cuda_emulation.so): what the
// launch helper (cuda_common/launch.cuh) and the device intrinsics
// (cuda_emulation.h) call in the emulated build. README.md next to this file
// describes the emulator; docs/architecture.md "CUDA emulation" the build.
//
// A launch runs to completion before launch_kernel returns, on the
// emulator's device thread: blocks one at a time in a seeded shuffled order,
// the threads of a block as cooperative fibers that switch only at
// __syncthreads and warp intrinsics. Static __shared__ variables are
// thread_local in the kernel's module (one instance on the device thread)
// and refilled with the NaN pattern before every block.

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <span>

#define PAGEDLLM_EMULATION_API __attribute__((visibility("default")))

namespace pagedllm::cuda::emulation {

// The launched thread's coordinates, set by the scheduler before it resumes a
// fiber (the kernels read them through threadIdx etc., cuda_emulation.h).
struct ThreadCoordinates {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  std::byte* dynamic_shared;
};
PAGEDLLM_EMULATION_API extern ThreadCoordinates coordinates;

// A buffer a kernel's arguments point into: a pointer parameter (written when
// it points to non-const) or a pointer found inside a by-value struct (read
// and written: the emulator cannot tell).
struct Access {
  const void* pointer;
  bool write;
};

struct KernelLaunch {
  const char* name = nullptr;  // "write_kv_kernel<float>"
  dim3 grid, block;
  std::size_t dynamic_shared_bytes = 0;
  cudaStream_t stream = nullptr;
  // Runs the kernel body once for the current coordinates.
  void (*run_thread)(void* context) = nullptr;
  void* context = nullptr;
  // Returns the address of a thread_local of the kernel's module on the
  // calling thread: how the emulator finds that module's TLS block (the
  // static shared memory) to poison it.
  void* (*module_tls_anchor)() = nullptr;
  std::span<const Access> accesses;
};

// Validates the configuration (cudaErrorInvalidConfiguration as a GPU would),
// checks the stream ordering of `accesses`, runs every block. The result is
// also the thread's last error (cudaPeekAtLastError).
PAGEDLLM_EMULATION_API cudaError_t launch_kernel(const KernelLaunch& launch) noexcept;

// ---- inside a kernel (called from the intrinsics) ------------------------------------

enum class WarpOp { kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncWarp };

// The block barrier. Every thread of the block must reach the same
// __syncthreads; anything else (a thread that returned, another call site)
// fails the launch with an error naming the kernel and both sites.
PAGEDLLM_EMULATION_API void sync_threads(std::source_location site);
// A warp-synchronous operation over the lanes of `mask` (which must all
// reach it, at the same call site with the same mask). `value` is the
// calling lane's operand (up to 8 bytes) or predicate; `arg` the source lane,
// delta or lane mask; returns the lane's result.
PAGEDLLM_EMULATION_API uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                                        std::source_location site);

}  // namespace pagedllm::cuda::emulation
