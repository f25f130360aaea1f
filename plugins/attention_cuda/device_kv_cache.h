#pragma once
// The physical paged KV cache of attention_cuda: a device pool (the blocks
// attention reads and writes) and a pinned host swap pool.
//
// Layout of both pools, the same as attention_cpu's (README.md "KV cache
// layout"): one allocation ordered [layer][K|V][block][kv_head][offset][head_dim],
// so one block of one kv head is a contiguous block_size x head_dim tile of
// unit-stride token rows, and a block of one layer's K (or V) is one
// contiguous run of block_bytes_per_layer() bytes.
//
// Block operations are enqueued on the caller's stream; the plugin orders
// that stream against the compute stream with events.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pagedllm/sdk.h"
#include "common/kv_cache_geometry.h"

namespace pagedllm::attention_cuda {

using plugins::CacheGeometry;

class DeviceKvCache {
 public:
  // Allocates both pools on the current device; a pool that does not fit is
  // a PLLM_ERROR_OUT_OF_MEMORY naming the bytes requested.
  DeviceKvCache(const CacheGeometry& geometry, int64_t num_device_blocks, int64_t num_host_blocks);
  // The owner synchronises every stream that used the pools before destroying them.

  const CacheGeometry& geometry() const { return geometry_; }
  int64_t num_device_blocks() const { return num_device_blocks_; }
  int64_t num_host_blocks() const { return num_host_blocks_; }
  uint64_t device_bytes() const { return uint64_t(num_device_blocks_) * geometry_.bytes_per_block(); }

  // Start of layer `layer`'s K (or V) cache in the device pool.
  void* keys(int32_t layer) const { return device_layer(layer, 0); }
  void* values(int32_t layer) const { return device_layer(layer, 1); }

  // Validates every pair, then enqueues the copies on `stream`.
  void copy_blocks(std::span<const pllm_block_copy> pairs, cudaStream_t stream);  // device -> device
  void swap_out(std::span<const pllm_block_copy> pairs, cudaStream_t stream);     // device -> host
  void swap_in(std::span<const pllm_block_copy> pairs, cudaStream_t stream);      // host -> device

 private:
  std::byte* device_layer(int32_t layer, int kv) const;
  void copy_between(std::byte* dst_pool, int64_t dst_blocks, const std::byte* src_pool, int64_t src_blocks,
                    std::span<const pllm_block_copy> pairs, cudaMemcpyKind kind, cudaStream_t stream) const;

  CacheGeometry geometry_;
  int64_t num_device_blocks_;
  int64_t num_host_blocks_;
  struct FreeDevice {
    void operator()(std::byte* p) const noexcept;
  };
  struct FreeHost {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, FreeDevice> device_;  // cudaMalloc
  std::unique_ptr<std::byte, FreeHost> host_;      // cudaHostAlloc: pinned, so swaps are async DMA copies
};

}  // namespace pagedllm::attention_cuda
