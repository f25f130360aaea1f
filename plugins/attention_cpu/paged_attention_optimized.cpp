// The optimized kernel. Same math as the reference, organised for the CPU:
//
//  * Work item = (sequence, kv head, a chunk of the sequence's new-token rows).
//    All query heads of the GQA group that share the kv head are processed
//    together, so each K/V tile is read (and, for f16/bf16, converted) once per
//    group instead of once per query head, and K/V are never duplicated.
//  * The context is walked one block at a time: a block of one kv head is a
//    contiguous block_size x head_dim tile (see kv_cache.h).
//  * Online softmax (running max m, running sum l, rescaled accumulator), all
//    in f32: one pass over the context.
//  * Inner loops are unit-stride: the dot product uses GCC vector extensions
//    with four independent 4-lane accumulators (float addition is not
//    associative, so the compiler would not split a scalar reduction itself);
//    the V update is a plain axpy that -O3 vectorises.
//  * Items are sorted by estimated cost (longest first) and handed out by the
//    thread pool's atomic counter, which balances long prefill chunks against
//    many short decodes.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "plugins/attention_cpu/dtype_convert.h"
#include "plugins/attention_cpu/paged_attention.h"

namespace pagedllm::attention_cpu {
namespace {

typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float dot(const float* a, const float* b, int64_t n) {
  v4f acc0 = {0, 0, 0, 0}, acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    acc0 += load4(a + d) * load4(b + d);
    acc1 += load4(a + d + 4) * load4(b + d + 4);
    acc2 += load4(a + d + 8) * load4(b + d + 8);
    acc3 += load4(a + d + 12) * load4(b + d + 12);
  }
  for (; d + 4 <= n; d += 4) acc0 += load4(a + d) * load4(b + d);
  const v4f acc = (acc0 + acc1) + (acc2 + acc3);
  float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

inline void scale_in_place(float* y, float a, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] *= a;
}

// The first `rows` rows of a cache tile as f32: the tile itself for f32
// caches, a converted copy in `buffer` otherwise.
template <class Cache>
const float* tile_as_f32(const Cache* tile, int64_t rows, int64_t head_dim, float* buffer) {
  if constexpr (std::is_same_v<Cache, float>) {
    (void)rows;
    (void)head_dim;
    (void)buffer;
    return tile;
  } else {
    const int64_t n = rows * head_dim;
    for (int64_t i = 0; i < n; ++i) buffer[i] = to_f32(tile[i]);
    return buffer;
  }
}

template <class Cache>
void run_item(const AttentionProblem& p, const OptimizedAttention::WorkItem& item, OptimizedAttention::Scratch& sc) {
  const pllm_batch& b = *p.batch;
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int64_t hd = p.head_dim;
  const int32_t bs = p.block_size;
  const int32_t first = b.query_start_loc[item.seq];
  const int32_t query_len = b.query_start_loc[item.seq + 1] - first;
  const int32_t context_len = b.seq_lens[item.seq] - query_len;
  const int32_t num_rows = (item.row_end - item.row_begin) * group;  // row r = token (r / group), head (r % group)

  auto grow = [](std::vector<float>& v, int64_t n) {
    if (v.size() < std::size_t(n)) v.resize(std::size_t(n));
  };
  grow(sc.q, num_rows * hd);
  grow(sc.acc, num_rows * hd);
  grow(sc.m, num_rows);
  grow(sc.l, num_rows);
  grow(sc.s, bs);
  if constexpr (!std::is_same_v<Cache, float>) {
    grow(sc.k_tile, bs * hd);
    grow(sc.v_tile, bs * hd);
  }

  for (int32_t r = 0; r < num_rows; ++r) {
    const int32_t t = first + item.row_begin + r / group;
    const int32_t h = item.kv_head * group + r % group;
    load_f32(p.query.row(t, h), p.query.dtype, sc.q.data() + r * hd, hd);
    sc.m[std::size_t(r)] = -std::numeric_limits<float>::infinity();
    sc.l[std::size_t(r)] = 0.0f;
  }
  std::fill_n(sc.acc.data(), num_rows * hd, 0.0f);

  const auto* keys = reinterpret_cast<const Cache*>(p.key_cache);
  const auto* values = reinterpret_cast<const Cache*>(p.value_cache);
  const int32_t last_position = context_len + item.row_end - 1;
  const int32_t num_blocks = last_position / bs + 1;
  const int32_t* table = b.block_tables + int64_t(item.seq) * b.max_blocks_per_seq;
  float* scores = sc.s.data();

  for (int32_t blk = 0; blk < num_blocks; ++blk) {
    const int32_t start = blk * bs;
    const int32_t valid = std::min(bs, last_position + 1 - start);  // tokens of this block anyone attends to
    const int64_t tile_offset = (int64_t(table[blk]) * p.num_kv_heads + item.kv_head) * bs * hd;
    const float* k = tile_as_f32(keys + tile_offset, valid, hd, sc.k_tile.data());
    const float* v = tile_as_f32(values + tile_offset, valid, hd, sc.v_tile.data());

    for (int32_t r = 0; r < num_rows; ++r) {
      const int32_t position = context_len + item.row_begin + r / group;
      const int32_t limit = std::min(valid, position + 1 - start);  // causal: keys [start, position]
      if (limit <= 0) continue;
      const float* q = sc.q.data() + r * hd;
      float block_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < limit; ++j) {
        scores[j] = dot(q, k + j * hd, hd) * p.scale;
        block_max = std::max(block_max, scores[j]);
      }
      float* acc = sc.acc.data() + r * hd;
      float& m = sc.m[std::size_t(r)];
      float& l = sc.l[std::size_t(r)];
      if (block_max > m) {
        const float correction = std::exp(m - block_max);  // exp(-inf) = 0 on the first block
        l *= correction;
        scale_in_place(acc, correction, hd);
        m = block_max;
      }
      for (int32_t j = 0; j < limit; ++j) {
        const float w = std::exp(scores[j] - m);
        l += w;
        axpy(acc, w, v + j * hd, hd);
      }
    }
  }

  for (int32_t r = 0; r < num_rows; ++r) {
    float* acc = sc.acc.data() + r * hd;
    scale_in_place(acc, 1.0f / sc.l[std::size_t(r)], hd);
    const int32_t t = first + item.row_begin + r / group;
    const int32_t h = item.kv_head * group + r % group;
    store_f32(acc, p.output.dtype, p.output.row(t, h), hd);
  }
}

}  // namespace

void OptimizedAttention::run(const AttentionProblem& p) {
  const pllm_batch& b = *p.batch;
  const int32_t group = p.num_heads / p.num_kv_heads;
  // Enough rows per item to amortise each tile over the group, few enough
  // that a long prefill chunk splits across threads.
  const int32_t rows_per_item = std::max(1, 64 / group);

  items_.clear();
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int32_t query_len = b.query_start_loc[s + 1] - b.query_start_loc[s];
    for (int32_t begin = 0; begin < query_len; begin += rows_per_item) {
      const int32_t end = std::min(query_len, begin + rows_per_item);
      for (int32_t g = 0; g < p.num_kv_heads; ++g) items_.push_back({s, g, begin, end});
    }
  }
  // Longest first: cost ~ rows x context attended by the last row.
  auto cost = [&](const WorkItem& w) {
    const int32_t context_len = b.seq_lens[w.seq] - (b.query_start_loc[w.seq + 1] - b.query_start_loc[w.seq]);
    return int64_t(w.row_end - w.row_begin) * (context_len + w.row_end);
  };
  std::stable_sort(items_.begin(), items_.end(), [&](const WorkItem& a, const WorkItem& c) { return cost(a) > cost(c); });

  auto body = [&](int64_t index, int worker) {
    const WorkItem& item = items_[std::size_t(index)];
    Scratch& sc = scratch_[std::size_t(worker)];
    switch (p.cache_dtype) {
      case PLLM_DTYPE_F32: return run_item<float>(p, item, sc);
      case PLLM_DTYPE_F16: return run_item<f16_t>(p, item, sc);
      case PLLM_DTYPE_BF16: return run_item<bf16_t>(p, item, sc);
      case PLLM_DTYPE_INVALID:
      case PLLM_DTYPE_I32:
      case PLLM_DTYPE_I64:
      case PLLM_DTYPE_U8:
      case PLLM_DTYPE_I8:
        break;
    }
  };
  pool_.parallel_for(int64_t(items_.size()), body);
}

}  // namespace pagedllm::attention_cpu
