#pragma once
// Counters of the KV cache manager. Gauges describe the pools now; counters
// only grow over the manager's life (a rate is the difference of two readings).

#include <cstdint>

namespace pagedllm {

struct KvCacheStats {
  // --- Gauges ---
  int num_device_blocks = 0;
  // Device blocks with no owner, cached ones included (they are reusable).
  int num_free_device_blocks = 0;
  // Device blocks holding a prefix-cache hash, owned or free.
  int num_hashed_device_blocks = 0;
  int num_host_blocks = 0;
  int num_free_host_blocks = 0;

  // --- Counters ---
  // Prefix-cache lookups, counted when a sequence is admitted with the result:
  // queried tokens = the sequence's tokens at admission; queried blocks = the
  // full blocks among them that a hit could cover (the last token is always
  // computed, so floor((tokens - 1) / block_size)).
  std::int64_t prefix_cache_queried_tokens = 0;
  std::int64_t prefix_cache_queried_blocks = 0;
  // Tokens / blocks taken from the cache instead of computed.
  std::int64_t prefix_cache_hit_tokens = 0;
  std::int64_t prefix_cache_hit_blocks = 0;
  // Cached blocks whose hash was dropped because allocation reused them.
  std::int64_t num_evictions = 0;
  // Copy-on-write copies (one per block copied for a forked sequence).
  std::int64_t num_copied_blocks = 0;
  // Blocks moved device -> host and host -> device.
  std::int64_t num_swapped_out_blocks = 0;
  std::int64_t num_swapped_in_blocks = 0;

  // usage = (device blocks - free device blocks) / device blocks, in [0, 1].
  double usage() const {
    return num_device_blocks == 0
               ? 0.0
               : static_cast<double>(num_device_blocks - num_free_device_blocks) /
                     num_device_blocks;
  }
  // hit rate = hit tokens / queried tokens (0 before any query).
  double prefix_cache_hit_rate() const {
    return prefix_cache_queried_tokens == 0
               ? 0.0
               : static_cast<double>(prefix_cache_hit_tokens) / prefix_cache_queried_tokens;
  }
};

}  // namespace pagedllm
