#pragma once
// Where one side of the A/B runs: the CPU (host buffers as they are) or a
// CUDA device (Q/K/V and the output staged in device memory, run() on a
// stream of the bench's, timed with events). The CUDA half is compiled only
// when the build has CUDA (device_side_cuda.cpp); without it, asking for a
// CUDA side is a BenchError, and the CPU path is what it always was.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.h"
#include "tools/attn_bench/bench_cases.h"
#include "tools/attn_bench/paged_case.h"

namespace pagedllm::attn_bench {

// "cpu", "cuda" (= cuda:0) or "cuda:N"; throws UsageError naming `flag`.
pllm_device parse_device(std::string_view text, std::string_view flag);
std::string device_label(const pllm_device& device);

class DeviceSide {
 public:
  virtual ~DeviceSide() = default;

  virtual pllm_device device() const = 0;
  // "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string description() const = 0;

  // Makes `in`'s Q/K/V and an output buffer (every element NaN, so one a
  // backend leaves unwritten shows up) available where the plugin runs, and
  // returns run()'s arguments for them. They point at tensors this side holds:
  // valid until the next stage().
  virtual pllm_attention_layer_args stage(StepInputs& in, const CaseSpec& c, float scale) = 0;
  // The staged output as f32, after everything queued so far completed.
  virtual std::vector<float> output() = 0;

  // Seconds `run` takes: host clock on the CPU; on a device, events recorded
  // on the stream around it, synchronised.
  virtual double time_run(const std::function<void()>& run) = 0;
  // Waits for everything queued on the side's stream (no-op on the CPU).
  virtual void synchronize() = 0;

  // Device-to-device copy bandwidth in GB/s, (bytes read + bytes written) /
  // time of a cudaMemcpy of a large buffer: the practical memory bandwidth a
  // bandwidth-bound kernel is measured against. 0 on the CPU (not measured).
  virtual double copy_bandwidth_gbs() = 0;
};

// Throws BenchError for a CUDA device on a build without CUDA or a machine without the device.
std::unique_ptr<DeviceSide> make_device_side(const pllm_device& device, const std::string& side);

// The CPU side: host buffers, host clock.
std::unique_ptr<DeviceSide> make_cpu_side();
#ifdef PAGEDLLM_ATTN_BENCH_CUDA
std::unique_ptr<DeviceSide> make_cuda_side(const pllm_device& device, const std::string& side);
#endif

}  // namespace pagedllm::attn_bench
