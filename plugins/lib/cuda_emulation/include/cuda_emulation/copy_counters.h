#pragma once
// The bytes the emulated device copied across the host boundary: what a test
// asserts to hold a step's device-to-host traffic to its contract (SDK 2.0:
// sampled ids and requested logprobs, never vocabulary-sized logits).
// Exported by libpagedllm_cuda_emulation.so; a test links pagedllm_cudart.

#include <cstdint>

namespace pagedllm::cuda::emulation {

struct CopyCounters {
  uint64_t host_to_device_bytes = 0;
  uint64_t device_to_host_bytes = 0;
  uint64_t host_to_device_copies = 0;
  uint64_t device_to_host_copies = 0;
};

// Every successful cudaMemcpy / cudaMemcpyAsync between host and device
// memory since the process started or the last reset (device-to-device and
// host-to-host copies are not counted). Thread-safe.
__attribute__((visibility("default"))) CopyCounters copy_counters();
__attribute__((visibility("default"))) void reset_copy_counters();

}  // namespace pagedllm::cuda::emulation
