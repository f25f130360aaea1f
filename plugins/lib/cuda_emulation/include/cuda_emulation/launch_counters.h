#pragma once
// The work the emulated device was given, counted as a GPU's launch queue sees it: kernel
// launches and cuBLAS GEMM calls (one each, whatever their grid or batch). What a test records
// as the launches of a decode step: the proxy for per-step launch overhead between GPU sessions
// (issue 34). Exported by libpagedllm_cuda_emulation.so; a test links pagedllm_cudart.

#include <cstdint>

namespace pagedllm::cuda::emulation {

struct LaunchCounters {
  uint64_t kernel_launches = 0;
  uint64_t gemm_calls = 0;  // cublasGemmEx and cublasGemmStridedBatchedEx
};

// Every launch and GEMM that ran (refused ones are not counted) since the process started or
// the last reset. Thread-safe.
__attribute__((visibility("default"))) LaunchCounters launch_counters();
__attribute__((visibility("default"))) void reset_launch_counters();

}  // namespace pagedllm::cuda::emulation
