#pragma once
// The host-side interface of the attention_cuda kernels (compiled by nvcc in
// cache_write.cu, paged_attention.cu): plain structs and launch functions, so
// the plugin class (compiled by the host compiler) never sees device code.
//
// Every launch is asynchronous on `stream` and reports a bad launch through
// PAGEDLLM_CUDA_CHECK_LAUNCH (a pllm::Error).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedllm/sdk/tensor.h"

namespace pagedllm::attention_cuda {

// Query vectors of one CTA: rows of a tile times the query heads of one kv
// head. Bounds the per-thread softmax state (registers); a tile with more
// vectors (rows x GQA group) is covered by several CTAs along grid.y.
inline constexpr int32_t kMaxQueryVectors = 8;
// Query rows per work item. A decode sequence (1 row, or 1 + K under
// speculative decoding) is one tile; a prefill chunk is ceil(rows / 8) tiles.
inline constexpr int32_t kTileRows = 8;

// One CTA's worth of attention: query rows [row_begin, row_begin + row_count)
// of sequence `seq` (0-based inside its new tokens) over context positions
// [kv_begin, kv_end). `partial` is -1 when the item covers the rows' whole
// context and writes the output directly; otherwise the index of its slot in
// the partials buffer (split-K, reduced by the combine kernel).
struct WorkItem {
  int32_t seq;
  int32_t row_begin;
  int32_t row_count;
  int32_t kv_begin;
  int32_t kv_end;
  int32_t partial;
};

// One split tile for the combine kernel: its partial slots are
// [first_partial, first_partial + num_partials), in context order.
struct CombineItem {
  int32_t seq;
  int32_t row_begin;
  int32_t row_count;
  int32_t first_partial;
  int32_t num_partials;
};

// The step's metadata in device memory (uploaded by plan()).
struct DeviceStep {
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  const int64_t* slot_mapping = nullptr;     // [num_tokens]
  const WorkItem* work = nullptr;            // [num_work]
  const CombineItem* combine = nullptr;      // [num_combine]
  int32_t num_tokens = 0;
  int32_t num_work = 0;
  int32_t num_combine = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t max_tile_rows = 0;  // the largest WorkItem::row_count: sizes grid.y
};

// A [tokens, heads, head_dim] activation on the device; head_dim is contiguous.
struct DeviceRows {
  void* data = nullptr;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
};

// One layer's cache: [num_blocks, num_kv_heads, block_size, head_dim] for K and for V.
struct LayerCache {
  void* keys = nullptr;
  void* values = nullptr;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
};

// Writes the new tokens' K/V rows into the cache at slot_mapping (slot -1: skipped).
void launch_write_kv(const LayerCache& cache, const DeviceStep& step, const DeviceRows& key, const DeviceRows& value,
                     cudaStream_t stream);

// Split-K scratch: per partial slot, kTileRows x num_heads query vectors of
// head_dim f32 (normalised partial output) plus their running max and sum.
struct Partials {
  float* out = nullptr;      // [slots, kTileRows, num_heads, head_dim]
  float* max = nullptr;      // [slots, kTileRows, num_heads]
  float* sum = nullptr;      // [slots, kTileRows, num_heads]
};
// Floats the partials buffer needs for `slots` slots.
inline int64_t partial_floats(int64_t slots, int32_t num_heads, int32_t head_dim) {
  return slots * kTileRows * num_heads * (int64_t(head_dim) + 2);
}

struct AttentionLaunch {
  LayerCache cache;
  DeviceStep step;
  DeviceRows query;
  DeviceRows output;
  int32_t num_heads = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // > 0: a row at position p sees keys (p - sliding_window, p] only
  Partials partials;
};

// CTAs per kv head along grid.y (query-vector chunks of the step's largest
// tile) for `launch`; PLLM_ERROR_UNSUPPORTED when a grid would exceed grid.y's
// 65535. run() asks before it enqueues anything, so a refused layer has
// written nothing (not even its K/V) and left no work in flight.
int32_t query_vector_chunks(const AttentionLaunch& launch);

// The attention kernel over every work item, then (when the step has split
// tiles) the combine kernel.
void launch_paged_attention(const AttentionLaunch& launch, cudaStream_t stream);

}  // namespace pagedllm::attention_cuda
