#pragma once
// The physical paged KV cache in host memory: a "device" pool (the blocks
// attention reads and writes) and a separate host swap pool.
//
// Layout, per pool, per layer, K and V separately:
//   [num_blocks, num_kv_heads, block_size, head_dim]
// so one block of one KV head is a contiguous block_size x head_dim tile whose
// rows (one token each) are contiguous head_dim vectors: the attention kernels
// stream a tile and take dot products over unit-stride rows. The pool is one
// allocation ordered [layer][K|V][block][...]; a block copy is 2 * num_layers
// memcpy calls of one tile group each. Pools are anonymous mappings marked
// for transparent huge pages (where the kernel allows them): a sequence's
// blocks are scattered through the pool, and with 4 KiB pages every tile a
// long-context decode reads needs a TLB entry of its own.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pagedllm/sdk.h"
#include "common/kv_cache_geometry.h"

namespace pagedllm::attention_cpu {

using plugins::CacheGeometry;

// An anonymous mapping (zero-filled, committed page by page as it is touched).
struct PoolUnmap {
  std::size_t bytes = 0;
  void operator()(std::byte* pool) const;
};
using Pool = std::unique_ptr<std::byte[], PoolUnmap>;

class KvCache {
 public:
  KvCache(const CacheGeometry& geometry, int64_t num_device_blocks, int64_t num_host_blocks);

  const CacheGeometry& geometry() const { return geometry_; }
  int64_t num_device_blocks() const { return num_device_blocks_; }
  int64_t num_host_blocks() const { return num_host_blocks_; }

  // Start of layer `layer`'s K (or V) cache in the device pool: [num_blocks, num_kv_heads, block_size, head_dim].
  std::byte* keys(int32_t layer) { return device_layer(layer, 0); }
  std::byte* values(int32_t layer) { return device_layer(layer, 1); }

  // Block operations; every pair is validated before anything is copied.
  void copy_blocks(std::span<const pllm_block_copy> pairs);  // device -> device
  void swap_out(std::span<const pllm_block_copy> pairs);     // device -> host
  void swap_in(std::span<const pllm_block_copy> pairs);      // host -> device

 private:
  std::byte* device_layer(int32_t layer, int kv) const;
  static void copy_between(const CacheGeometry& g, std::byte* dst_pool, int64_t dst_blocks, const std::byte* src_pool,
                           int64_t src_blocks, std::span<const pllm_block_copy> pairs);

  CacheGeometry geometry_;
  int64_t num_device_blocks_;
  int64_t num_host_blocks_;
  Pool device_;
  Pool host_;
};

}  // namespace pagedllm::attention_cpu
