#pragma once
// A step's metadata on the device: plan() builds the work list (which CTA
// attends which rows over which context range, and which tiles are split
// into partitions) from core's host batch, packs it with the batch arrays
// into pinned staging memory and uploads it asynchronously on its own
// stream, recording ready() for the compute stream to wait on.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"
#include "cuda_handles.h"
#include "kernels.h"

namespace pagedllm::attention_cuda {

// When a tile's context is split into partitions (split-K, vLLM's "v2").
struct SplitPolicy {
  int32_t partition_size = 512;      // context tokens per partition
  int32_t split_min_context = 1024;  // tiles attending more tokens than this are split
};

// The host-side work list of one batch.
struct WorkList {
  std::vector<WorkItem> work;
  std::vector<CombineItem> combine;
  int32_t num_partials = 0;
  int32_t max_tile_rows = 0;

  // Tiles of kTileRows rows per sequence; each tile whose last row attends
  // more than policy.split_min_context positions becomes one item per
  // partition_size positions (and one combine item), the others one item.
  void build(const pllm_batch& batch, const SplitPolicy& policy);
};

class StepMetadata {
 public:
  // Builds and uploads `batch`'s metadata. The upload first waits (on the
  // device) for `previous_compute`, recorded after the previous step's last
  // kernel: those kernels read the device buffer this overwrites.
  void upload(const pllm_batch& batch, const SplitPolicy& policy, cudaEvent_t previous_compute);

  // Recorded on the upload stream once the metadata is on the device.
  cudaEvent_t ready() const { return ready_.get(); }
  const DeviceStep& device_step() const { return device_step_; }
  int32_t num_partials() const { return work_.num_partials; }
  // Waits for everything this object queued (before destruction or reallocation).
  void synchronize() const { PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }
  void synchronize_quietly() const noexcept { (void)cudaStreamSynchronize(stream_.get()); }

 private:
  Stream stream_;
  Event ready_;
  PinnedBuffer staging_;
  DeviceBuffer device_;
  WorkList work_;
  DeviceStep device_step_;
};

}  // namespace pagedllm::attention_cuda
