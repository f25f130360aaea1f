// The optimized kernel. Same math as the reference, organised for the CPU:
//
//  * Work item = (sequence, kv head, a chunk of the sequence's new-token rows).
//    All query heads of the GQA group that share the kv head are processed
//    together, so each K/V tile is read (and, for f16/bf16, converted) once per
//    group instead of once per query head, and K/V are never duplicated.
//    Row r of an item is (token r / group, head r % group).
//  * Online softmax (running max m, running sum l, rescaled accumulator), all
//    in f32: one pass over the context.
//  * Two paths per item:
//    - tiled (>= kMinTiledRows rows: prefill chunks): the item's query rows
//      form a [rows x head_dim] matrix; the context is walked kKeyTile keys at
//      a time, gathered from the blocks into a contiguous f32 K and V tile
//      (f16/bf16 converted once per tile); S = scale Q K^T and acc += P V are
//      cblas_sgemm calls (flash-attention style), with the causal mask and the
//      online softmax applied to S in between. Rows that see none of a tile
//      (causal) are left out of both GEMMs.
//    - per-row (decodes, short chunks): one block at a time, scores eight keys
//      at a time, vector max/exp/sum, and acc += w V four keys per pass; a
//      GEMM with <16 rows would not pay for itself. Blocks are prefetched
//      ahead (they lie scattered through the pool).
//  * Split contexts (flash-decoding): a step with too few items to occupy
//    every thread cuts its per-row items' contexts into pieces; each leaves
//    its rows' softmax state (m, l, unnormalised acc) and merge_splits
//    combines them after the parallel loop.
//  * The element-wise loops (dot products, softmax with a polynomial exp,
//    axpy, f16/bf16 conversion) are compiled for AVX-512, AVX2 and baseline
//    x86-64 and picked at load time (GCC target_clones), like models_llama.
//  * Items are sorted by estimated cost (longest first) and handed out by the
//    thread pool's atomic counter, which balances long prefill chunks against
//    many short decodes. A step too small to split runs on the calling thread
//    without waking the pool.
//  * BLAS: OpenBLAS is told to use one thread (process-wide, as models_llama
//    does): parallelism comes from this kernel's own pool.

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "dtype_convert.h"
#include "common/fast_exp.h"
#include "paged_attention.h"

namespace pagedllm::attention_cpu {
namespace {


constexpr int32_t kKeyTile = 128;       // keys per K/V tile in the tiled path
constexpr int32_t kMinTiledRows = 16;   // items with fewer rows take the per-row path
constexpr int32_t kPrefetchBlocks = 2;  // the per-row path asks for the K/V tiles this many blocks ahead
// A step with fewer than kItemsPerThread items per thread splits its per-row
// items' contexts into pieces of at least kMinSplitKeys keys (flash-decoding):
// one long decode must not leave threads idle, and a piece must stay long
// enough that the merge (a few operations per row) costs nothing next to it.
constexpr int32_t kItemsPerThread = 4;
constexpr int32_t kMinSplitKeys = 256;
constexpr int64_t kMinParallelWork = 1 << 18;  // multiply-adds below which the pool is not woken

// Only ever called with x <= 0 here (scores minus their running max).
using pagedllm::plugins::exp_approx;

typedef float v8f __attribute__((vector_size(32)));

// Dot product with two independent 8-lane accumulators (float addition is not
// associative, so the compiler would not split a scalar reduction itself).
// GCC lowers v8f to whatever the clone's target has (2 x SSE, AVX2, ...).
inline float dot(const float* a, const float* b, int64_t n) {
  v8f acc0 = {0, 0, 0, 0, 0, 0, 0, 0}, acc1 = acc0;
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    v8f a0, a1, b0, b1;
    std::memcpy(&a0, a + d, sizeof a0);
    std::memcpy(&b0, b + d, sizeof b0);
    std::memcpy(&a1, a + d + 8, sizeof a1);
    std::memcpy(&b1, b + d + 8, sizeof b1);
    acc0 += a0 * b0;
    acc1 += a1 * b1;
  }
  for (; d + 8 <= n; d += 8) {
    v8f a0, b0;
    std::memcpy(&a0, a + d, sizeof a0);
    std::memcpy(&b0, b + d, sizeof b0);
    acc0 += a0 * b0;
  }
  const v8f acc = acc0 + acc1;
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

typedef int v8i __attribute__((vector_size(32)));

// Lane i of the result: x's lanes summed, for eight vectors x (written to out).
// A transpose-and-add tree (7 vector additions, 14 shuffles for all eight)
// instead of eight horizontal reductions of ~10 operations each. Macros, not
// helpers: a function taking or returning v8f outside the target_clones
// bodies would be compiled for baseline x86-64 (and changes the ABI).
#define PAGEDLLM_ADD_PAIRS(a, b) \
  (__builtin_shuffle(a, b, v8i{0, 8, 2, 10, 4, 12, 6, 14}) + __builtin_shuffle(a, b, v8i{1, 9, 3, 11, 5, 13, 7, 15}))
#define PAGEDLLM_ADD_QUADS(a, b) \
  (__builtin_shuffle(a, b, v8i{0, 1, 8, 9, 4, 5, 12, 13}) + __builtin_shuffle(a, b, v8i{2, 3, 10, 11, 6, 7, 14, 15}))
#define PAGEDLLM_ADD_HALVES(a, b) \
  (__builtin_shuffle(a, b, v8i{0, 1, 2, 3, 8, 9, 10, 11}) + __builtin_shuffle(a, b, v8i{4, 5, 6, 7, 12, 13, 14, 15}))

// scores[j] = scale * (q . k_j) for the first n keys of a [n x hd] tile.
// Eight keys at a time (each with its own accumulator, reduced together by
// the add tree above) when hd is a multiple of 8; the rest one dot product each.
PAGEDLLM_VECTOR_CLONES
void score_keys(const float* q, const float* k, int32_t n, int64_t hd, float scale, float* __restrict scores) {
  int32_t j = 0;
  if (hd % 8 == 0) {
    for (; j + 8 <= n; j += 8) {
      v8f acc[8] = {};
      for (int64_t d = 0; d < hd; d += 8) {
        v8f qv;
        std::memcpy(&qv, q + d, sizeof qv);
        for (int i = 0; i < 8; ++i) {
          v8f kv;
          std::memcpy(&kv, k + (j + i) * hd + d, sizeof kv);
          acc[i] += qv * kv;
        }
      }
      const v8f low = PAGEDLLM_ADD_QUADS(PAGEDLLM_ADD_PAIRS(acc[0], acc[1]), PAGEDLLM_ADD_PAIRS(acc[2], acc[3]));
      const v8f high = PAGEDLLM_ADD_QUADS(PAGEDLLM_ADD_PAIRS(acc[4], acc[5]), PAGEDLLM_ADD_PAIRS(acc[6], acc[7]));
      const v8f s = PAGEDLLM_ADD_HALVES(low, high) * scale;
      std::memcpy(scores + j, &s, sizeof s);
    }
  }
  for (; j < n; ++j) scores[j] = dot(q, k + j * hd, hd) * scale;
}

// max of x[0, n), -inf for n = 0. Vector lanes: GCC does not vectorise a
// float max reduction by itself (it is order-sensitive for NaN and -0).
inline float max_of(const float* x, int32_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  v8f best = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f v;
    std::memcpy(&v, x + j, sizeof v);
    best = v > best ? v : best;
  }
  float m = kNegInf;
  for (int i = 0; i < 8; ++i) m = std::max(m, best[i]);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// x[j] = exp(x[j] - max) for j < n, returning their sum. The exps are their
// own loop (no reduction in it, so it vectorises); the sum uses vector lanes.
inline float exp_shifted_sum(float* __restrict x, int32_t n, float max) {
  for (int32_t j = 0; j < n; ++j) x[j] = exp_approx(x[j] - max);
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f v;
    std::memcpy(&v, x + j, sizeof v);
    acc += v;
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) sum += x[j];
  return sum;
}

// acc += sum_j w[j] v_j over the first n rows of a [n x hd] tile, four rows
// per pass over acc (a quarter of the accumulator loads and stores).
inline void accumulate_rows(const float* __restrict w, const float* __restrict v, int32_t n, int64_t hd,
                            float* __restrict acc) {
  int32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float w0 = w[j], w1 = w[j + 1], w2 = w[j + 2], w3 = w[j + 3];
    const float* v0 = v + j * hd;
    const float* v1 = v0 + hd;
    const float* v2 = v1 + hd;
    const float* v3 = v2 + hd;
    for (int64_t d = 0; d < hd; ++d) acc[d] += (w0 * v0[d] + w1 * v1[d]) + (w2 * v2[d] + w3 * v3[d]);
  }
  for (; j < n; ++j) {
    const float* vj = v + j * hd;
    for (int64_t d = 0; d < hd; ++d) acc[d] += w[j] * vj[d];
  }
}

// Per-row path: one query row against the first `limit` keys of one block,
// updating the row's online-softmax state (m, l, acc).
PAGEDLLM_VECTOR_CLONES
void attend_block(const float* q, const float* k, const float* v, int32_t limit, int64_t hd, float scale,
                  float* __restrict scores, float* __restrict acc, float* m, float* l) {
  score_keys(q, k, limit, hd, scale, scores);
  const float block_max = max_of(scores, limit);
  if (block_max > *m) {
    const float correction = exp_approx(*m - block_max);  // ~0 on the first block (m = -inf, acc = l = 0)
    *l *= correction;
    for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
    *m = block_max;
  }
  *l += exp_shifted_sum(scores, limit, *m);
  accumulate_rows(scores, v, limit, hd, acc);
}

// Tiled path: the online-softmax step between the two GEMMs. For each of
// `rows` rows of S (row stride ld), keys [lower(r), limit(r)) are visible, with
// limit(r) = min(nk, first_limit + r / group) and, under a window,
// lower(r) = max(0, first_lower + r / group) (else 0): turns scores into
// weights exp(s - m) (0 for masked keys), rescales the row's accumulator when
// its max grows and adds the weights to l.
PAGEDLLM_VECTOR_CLONES
void softmax_tile(float* __restrict s, int32_t rows, int32_t nk, int32_t ld, int32_t first_limit,
                  std::optional<int32_t> first_lower, int32_t group, float* __restrict acc, int64_t hd,
                  float* __restrict m, float* __restrict l) {
  for (int32_t r = 0; r < rows; ++r) {
    float* sr = s + int64_t(r) * ld;
    const int32_t limit = std::min(nk, first_limit + r / group);
    const int32_t lower = first_lower ? std::clamp(*first_lower + r / group, 0, std::max(limit, 0)) : 0;
    const float block_max = max_of(sr + lower, limit - lower);
    if (block_max > m[r]) {
      const float correction = exp_approx(m[r] - block_max);
      l[r] *= correction;
      float* ar = acc + r * hd;
      for (int64_t d = 0; d < hd; ++d) ar[d] *= correction;
      m[r] = block_max;
    }
    l[r] += exp_shifted_sum(sr + lower, limit - lower, m[r]);
    for (int32_t j = 0; j < lower; ++j) sr[j] = 0.0f;
    for (int32_t j = std::max(limit, 0); j < nk; ++j) sr[j] = 0.0f;
  }
}

PAGEDLLM_VECTOR_CLONES
void f16_to_f32_n(const std::uint16_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

PAGEDLLM_VECTOR_CLONES
void bf16_to_f32_n(const std::uint16_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

template <class Cache>
void copy_as_f32(const Cache* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<Cache, float>) {
    std::memcpy(dst, src, std::size_t(n) * sizeof(float));
  } else if constexpr (std::is_same_v<Cache, f16_t>) {
    f16_to_f32_n(reinterpret_cast<const std::uint16_t*>(src), dst, n);
  } else {
    bf16_to_f32_n(reinterpret_cast<const std::uint16_t*>(src), dst, n);
  }
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
    copy_as_f32(tile, buffer, rows * head_dim);
    return buffer;
  }
}

// A sequence's blocks lie scattered through the pool, so the hardware
// prefetcher cannot see the next tile coming: at long contexts the kernel
// would otherwise wait on memory at every block. Asks for `elements` cache
// elements from `tile` on, one 64-byte line at a time.
template <class Cache>
void prefetch_elements(const Cache* tile, int64_t elements) {
  const char* bytes = reinterpret_cast<const char*>(tile);
  const int64_t size = elements * int64_t(sizeof(Cache));
  for (int64_t offset = 0; offset < size; offset += 64) __builtin_prefetch(bytes + offset);
}

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < std::size_t(n)) v.resize(std::size_t(n));
}

template <class Cache>
void run_item(const AttentionProblem& p, const OptimizedAttention::WorkItem& item, OptimizedAttention::Scratch& sc,
              float* partials) {
  const pllm_batch& b = *p.batch;
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int64_t hd = p.head_dim;
  const int32_t bs = p.block_size;
  const int32_t first = b.query_start_loc[item.seq];
  const int32_t query_len = b.query_start_loc[item.seq + 1] - first;
  const int32_t context_len = b.seq_lens[item.seq] - query_len;
  const int32_t num_rows = (item.row_end - item.row_begin) * group;
  const bool tiled = num_rows >= kMinTiledRows;

  grow(sc.q, num_rows * hd);
  grow(sc.acc, num_rows * hd);
  grow(sc.m, num_rows);
  grow(sc.l, num_rows);
  if (tiled) {
    grow(sc.s, int64_t(num_rows) * kKeyTile);
    grow(sc.k_tile, kKeyTile * hd);
    grow(sc.v_tile, kKeyTile * hd);
  } else {
    grow(sc.s, bs);
    if constexpr (!std::is_same_v<Cache, float>) {
      grow(sc.k_tile, bs * hd);
      grow(sc.v_tile, bs * hd);
    }
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
  const int32_t first_position = context_len + item.row_begin;  // of row 0
  const int32_t last_position = context_len + item.row_end - 1;
  const int32_t* table = b.block_tables + int64_t(item.seq) * b.max_blocks_per_seq;
  auto tile_offset = [&](int32_t block) { return (int64_t(table[block]) * p.num_kv_heads + item.kv_head) * bs * hd; };

  const int32_t window = p.sliding_window;
  if (tiled) {
    // Under a window, tiles wholly before row 0's first visible key are skipped.
    const int32_t first_start = first_visible(first_position, window) / kKeyTile * kKeyTile;
    for (int32_t start = first_start; start <= last_position; start += kKeyTile) {
      const int32_t nk = std::min(kKeyTile, last_position + 1 - start);
      // Gather keys/values [start, start + nk) from their blocks.
      for (int32_t pos = start; pos < start + nk;) {
        const int32_t blk = pos / bs, off = pos % bs;
        const int32_t run = std::min(bs - off, start + nk - pos);
        const int64_t src = tile_offset(blk) + int64_t(off) * hd;
        copy_as_f32(keys + src, sc.k_tile.data() + int64_t(pos - start) * hd, run * hd);
        copy_as_f32(values + src, sc.v_tile.data() + int64_t(pos - start) * hd, run * hd);
        pos += run;
      }
      // The next tile's blocks load while this one is multiplied.
      for (int32_t pos = start + nk; pos < std::min(start + nk + kKeyTile, last_position + 1);) {
        const int32_t blk = pos / bs, off = pos % bs;
        const int32_t run = std::min(bs - off, start + nk + kKeyTile - pos);
        const int64_t src = tile_offset(blk) + int64_t(off) * hd;
        prefetch_elements(keys + src, run * hd);
        prefetch_elements(values + src, run * hd);
        pos += run;
      }
      // Rows before r0 (positions < start) see none of this tile.
      const int32_t r0 = std::max(0, start - first_position) * group;
      const int32_t rows = num_rows - r0;
      float* s = sc.s.data() + int64_t(r0) * kKeyTile;
      float* acc = sc.acc.data() + r0 * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, int(hd), p.scale, sc.q.data() + r0 * hd,
                  int(hd), sc.k_tile.data(), int(hd), 0.0f, s, kKeyTile);
      // Row r0's position is first_position + r0 / group; it sees keys up to it (and under a window
      // from window - 1 before it).
      const int32_t first_limit = first_position + r0 / group + 1 - start;
      const std::optional<int32_t> first_lower =
          window > 0 ? std::optional(first_position + r0 / group - window + 1 - start) : std::nullopt;
      softmax_tile(s, rows, nk, kKeyTile, first_limit, first_lower, group, acc, hd, sc.m.data() + r0,
                   sc.l.data() + r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, int(hd), nk, 1.0f, s, kKeyTile,
                  sc.v_tile.data(), int(hd), 1.0f, acc, int(hd));
    }
  } else {
    const int32_t end_block = std::min(item.block_end, last_position / bs + 1);
    // Under a window, blocks wholly before row 0's first visible key are skipped.
    const int32_t begin_block = std::max(item.block_begin, first_visible(first_position, window) / bs);
    for (int32_t blk = begin_block; blk < end_block; ++blk) {
      const int32_t start = blk * bs;
      const int32_t valid = std::min(bs, last_position + 1 - start);  // tokens of this block anyone attends to
      if (blk + kPrefetchBlocks < end_block) {
        const int32_t ahead = std::min(bs, last_position + 1 - start - kPrefetchBlocks * bs);
        prefetch_elements(keys + tile_offset(blk + kPrefetchBlocks), ahead * hd);
        prefetch_elements(values + tile_offset(blk + kPrefetchBlocks), ahead * hd);
      }
      const float* k = tile_as_f32(keys + tile_offset(blk), valid, hd, sc.k_tile.data());
      const float* v = tile_as_f32(values + tile_offset(blk), valid, hd, sc.v_tile.data());
      for (int32_t r = 0; r < num_rows; ++r) {
        const int32_t position = first_position + r / group;
        const int32_t limit = std::min(valid, position + 1 - start);  // causal: keys [start, position]
        const int32_t lower = std::max(0, first_visible(position, window) - start);  // the window's first
        if (limit <= lower) continue;
        attend_block(sc.q.data() + r * hd, k + int64_t(lower) * hd, v + int64_t(lower) * hd, limit - lower, hd,
                     p.scale, sc.s.data(), sc.acc.data() + r * hd, &sc.m[std::size_t(r)], &sc.l[std::size_t(r)]);
      }
    }
  }

  if (item.partial >= 0) {  // one piece of a split context: the merge normalises
    for (int32_t r = 0; r < num_rows; ++r) {
      float* state = partials + item.partial + r * (hd + 2);
      state[0] = sc.m[std::size_t(r)];
      state[1] = sc.l[std::size_t(r)];
      std::memcpy(state + 2, sc.acc.data() + r * hd, std::size_t(hd) * sizeof(float));
    }
    return;
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    float* acc = sc.acc.data() + r * hd;
    const float inv = 1.0f / sc.l[std::size_t(r)];
    for (int64_t d = 0; d < hd; ++d) acc[d] *= inv;
    const int32_t t = first + item.row_begin + r / group;
    const int32_t h = item.kv_head * group + r % group;
    store_f32(acc, p.output.dtype, p.output.row(t, h), hd);
  }
}

}  // namespace

OptimizedAttention::OptimizedAttention(int num_threads)
    : pool_(num_threads), scratch_(static_cast<std::size_t>(pool_.size())) {
  // Process-wide (as in models_llama): BLAS calls from inside the pool must
  // not start BLAS threads of their own.
  openblas_set_num_threads(1);
}

void OptimizedAttention::run(const AttentionProblem& p) {
  const pllm_batch& b = *p.batch;
  const int32_t group = p.num_heads / p.num_kv_heads;
  // Enough rows per item to amortise each tile over the group (and to make
  // the tiled path's GEMMs worthwhile), few enough that a long prefill chunk
  // splits across threads.
  const int32_t rows_per_item = std::max(1, 64 / group);

  items_.clear();
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int32_t query_len = b.query_start_loc[s + 1] - b.query_start_loc[s];
    for (int32_t begin = 0; begin < query_len; begin += rows_per_item) {
      const int32_t end = std::min(query_len, begin + rows_per_item);
      const int32_t blocks = (b.seq_lens[s] - query_len + end - 1) / p.block_size + 1;  // up to row end - 1
      for (int32_t g = 0; g < p.num_kv_heads; ++g) items_.push_back({s, g, begin, end, 0, blocks, -1});
    }
  }
  // Longest first: cost ~ rows x context attended by the last row (of this item's blocks).
  auto cost = [&](const WorkItem& w) {
    const int32_t context_len = b.seq_lens[w.seq] - (b.query_start_loc[w.seq + 1] - b.query_start_loc[w.seq]);
    const int32_t keys = std::min(context_len + w.row_end, w.block_end * p.block_size) - w.block_begin * p.block_size;
    return int64_t(w.row_end - w.row_begin) * keys;
  };
  int64_t work = 0;  // multiply-adds of Q K^T and P V, roughly
  for (const WorkItem& w : items_) work += cost(w) * group * p.head_dim * 2;
  splits_.clear();
  const bool too_few_items = int64_t(items_.size()) < int64_t(kItemsPerThread) * pool_.size();
  if (pool_.size() > 1 && work >= kMinParallelWork && too_few_items) {
    split_long_contexts(p);
  }
  std::stable_sort(items_.begin(), items_.end(), [&](const WorkItem& a, const WorkItem& c) { return cost(a) > cost(c); });

  auto body = [&](int64_t index, int worker) {
    const WorkItem& item = items_[std::size_t(index)];
    Scratch& sc = scratch_[std::size_t(worker)];
    switch (p.cache_dtype) {
      case PLLM_DTYPE_F32: return run_item<float>(p, item, sc, partials_.data());
      case PLLM_DTYPE_F16: return run_item<f16_t>(p, item, sc, partials_.data());
      case PLLM_DTYPE_BF16: return run_item<bf16_t>(p, item, sc, partials_.data());
      case PLLM_DTYPE_FORCE_32BIT:
      case PLLM_DTYPE_INVALID:
      case PLLM_DTYPE_I32:
      case PLLM_DTYPE_I64:
      case PLLM_DTYPE_U8:
      case PLLM_DTYPE_I8:
        break;
    }
  };
  if (work < kMinParallelWork) {
    // Too little to split (e.g. a few decodes): waking the pool costs more.
    for (std::size_t i = 0; i < items_.size(); ++i) body(int64_t(i), 0);
    return;
  }
  pool_.parallel_for(int64_t(items_.size()), body);
  merge_splits(p);
}

void OptimizedAttention::split_long_contexts(const AttentionProblem& p) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t min_blocks = std::max(1, kMinSplitKeys / p.block_size);
  const int64_t wanted = int64_t(kItemsPerThread) * pool_.size();
  const int64_t state_floats = p.head_dim + 2;
  const std::size_t unsplit = items_.size();
  int64_t partial_floats = 0;
  for (std::size_t i = 0; i < unsplit; ++i) {
    WorkItem& item = items_[i];
    const int32_t rows = (item.row_end - item.row_begin) * group;
    if (rows >= kMinTiledRows) continue;  // the tiled path walks its context whole
    const int64_t by_threads = (wanted + int64_t(unsplit) - 1) / int64_t(unsplit);
    const int32_t parts = int32_t(std::min<int64_t>(by_threads, item.block_end / min_blocks));
    if (parts < 2) continue;
    splits_.push_back({item, partial_floats, parts});
    const int32_t blocks = item.block_end;
    for (int32_t part = 0; part < parts; ++part) {
      WorkItem piece = splits_.back().rows;
      piece.block_begin = int32_t(int64_t(blocks) * part / parts);
      piece.block_end = int32_t(int64_t(blocks) * (part + 1) / parts);
      piece.partial = partial_floats;
      partial_floats += rows * state_floats;
      if (part == 0) {
        item = piece;  // replaces the whole item in place
      } else {
        items_.push_back(piece);
      }
    }
  }
  if (partials_.size() < std::size_t(partial_floats)) partials_.resize(std::size_t(partial_floats));
}

// out = (sum_i e^(m_i - M) acc_i) / (sum_i e^(m_i - M) l_i), M = max_i m_i: the
// online-softmax update applied once across the pieces. Piece 0 holds key 0,
// which every row sees, so M is finite; a piece a row sees nothing of has
// m = -inf, l = 0, acc = 0 and weighs 0.
void OptimizedAttention::merge_splits(const AttentionProblem& p) const {
  const pllm_batch& b = *p.batch;
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int64_t hd = p.head_dim, state_floats = hd + 2;
  std::vector<float> out(std::size_t(hd), 0.0f);
  for (const Split& split : splits_) {
    const WorkItem& w = split.rows;
    const int32_t rows = (w.row_end - w.row_begin) * group;
    const int64_t piece_floats = rows * state_floats;
    for (int32_t r = 0; r < rows; ++r) {
      const float* first = partials_.data() + split.first_partial + r * state_floats;
      float max = -std::numeric_limits<float>::infinity();
      for (int32_t i = 0; i < split.parts; ++i) max = std::max(max, first[i * piece_floats]);
      float l = 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int32_t i = 0; i < split.parts; ++i) {
        const float* state = first + i * piece_floats;
        if (state[1] == 0.0f) continue;  // saw no key
        const float weight = exp_approx(state[0] - max);
        l += weight * state[1];
        for (int64_t d = 0; d < hd; ++d) out[std::size_t(d)] += weight * state[2 + d];
      }
      for (int64_t d = 0; d < hd; ++d) out[std::size_t(d)] /= l;
      const int32_t t = b.query_start_loc[w.seq] + w.row_begin + r / group;
      const int32_t h = w.kv_head * group + r % group;
      store_f32(out.data(), p.output.dtype, p.output.row(t, h), hd);
    }
  }
}

}  // namespace pagedllm::attention_cpu
