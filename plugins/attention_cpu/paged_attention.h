#pragma once
// Paged attention over the CPU KV cache: the problem one run() solves, and the
// two kernels that solve it (same math, different speed).
//
// For every sequence s and each of its new token rows i (0-based inside the
// chunk), at position p = seq_lens[s] - query_len + i, and each query head h:
//   out[t, h] = softmax_j(scale * q[t, h] . K[s, j, g]) V[s, j, g],  j in [lo, p],
// where lo = 0, or p - sliding_window + 1 (at least 0) under a window, g = h /
// (num_heads / num_kv_heads), and K[s, j, g] is read from block
// block_tables[s][j / block_size] at offset j % block_size. Nothing outside
// [lo, p] is used, so stale cache contents cannot leak into a result.

#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"
#include "common/thread_pool.h"

namespace pagedllm::attention_cpu {

// A strided [num_tokens, heads, head_dim] activation with unit-stride rows.
struct Rows {
  std::byte* data = nullptr;
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
  int64_t element_size = 0;

  std::byte* row(int64_t token, int64_t head) const {
    return data + (token * token_stride + head * head_stride) * element_size;
  }
};

// The first position a row at `position` attends under `window` (0: none).
inline int32_t first_visible(int32_t position, int32_t window) {
  return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}

struct AttentionProblem {
  const pllm_batch* batch = nullptr;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0: the whole context
  Rows query;
  Rows output;
  // This layer's caches, [num_blocks, num_kv_heads, block_size, head_dim] of cache_dtype.
  const std::byte* key_cache = nullptr;
  const std::byte* value_cache = nullptr;
  pllm_dtype cache_dtype = PLLM_DTYPE_INVALID;
};

// The plain loop: one query row and head at a time, one context token at a
// time through the block table, two-pass softmax. Obviously correct, slow.
void reference_attention(const AttentionProblem& problem);

// Blocked, GQA-grouped, online-softmax kernel, parallel over work items;
// prefill chunks go through tiled cblas_sgemm (flash-attention style).
class OptimizedAttention {
 public:
  // Also sets OpenBLAS to one thread, process-wide (the pool is the parallelism).
  explicit OptimizedAttention(int num_threads);
  void run(const AttentionProblem& problem);
  int num_threads() const { return pool_.size(); }

  // Per-thread buffers, grown on demand and reused across calls.
  struct Scratch {
    std::vector<float> q, acc, m, l, s, k_tile, v_tile;
  };

  // One (sequence, kv head, chunk of new-token rows) unit of work, over the
  // context blocks [block_begin, block_end): all the rows see, unless a long
  // context is split across items (then `partial` >= 0 says where in
  // partials_ the item leaves its rows' softmax state for the merge).
  struct WorkItem {
    int32_t seq;
    int32_t kv_head;
    int32_t row_begin;  // new-token rows [row_begin, row_end) of the sequence
    int32_t row_end;
    int32_t block_begin;
    int32_t block_end;
    int64_t partial;  // -1: the item writes the output itself
  };

  // The rows of one (sequence, kv head, rows) whose context was split into
  // `parts` items with consecutive partial states from `first_partial` on.
  struct Split {
    WorkItem rows;
    int64_t first_partial;
    int32_t parts;
  };

 private:
  // Decode-style items over long contexts split into pieces of their blocks
  // (flash-decoding) when there are too few items to keep every thread busy.
  void split_long_contexts(const AttentionProblem& problem);
  void merge_splits(const AttentionProblem& problem) const;

  plugins::ThreadPool pool_;
  std::vector<Scratch> scratch_;
  std::vector<WorkItem> items_;
  std::vector<Split> splits_;
  std::vector<float> partials_;  // per split item and row: m, l, then the unnormalised accumulator
};

}  // namespace pagedllm::attention_cpu
