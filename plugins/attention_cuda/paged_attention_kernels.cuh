#pragma once
// The paged attention kernels: one kernel for every work item of a step
// (decode rows, speculative 1 + K rows, prefill chunk tiles; whole context or
// one partition of it) and a combine kernel for split tiles. Launched by
// paged_attention.cu; also compiled as host code and run under a SIMT
// emulation by tests/plugins/attention_cuda/kernel_emulation_test.cpp.
// README.md "Kernels" explains the choices.
//
// Work split inside a CTA (kThreads = 4 warps):
//   - the CTA owns up to kMaxQueryVectors query vectors: (row, query head)
//     pairs of one tile and one kv head, so every query head of a GQA group
//     reads the kv head's K/V once, from the same loads;
//   - a warp processes kTokensPerWarp context tokens at a time: a token group
//     of kGroupLanes lanes reads one token's head_dim row with one 16-byte
//     load per lane, so a warp's loads cover kTokensPerWarp * head_dim
//     consecutive elements of a block tile (coalesced), and the 4 warps take
//     consecutive token groups;
//   - each token group keeps an online softmax (running max m, sum l, output
//     accumulator over its lanes' dims) per query vector; the groups are
//     merged with shuffles, the warps through shared memory.

#include <cmath>

#include "dtype_traits.cuh"
#include "kernels.h"

namespace pagedllm::attention_cuda::device {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Scores are kept in base 2: q is pre-multiplied by scale * log2(e), so
// exp(scale * q.k - m) = exp2(q'.k - m') and every exponential is one exp2f
// (the hardware's native exponential) instead of expf's extra range
// reduction. Maxima (m, and the partials' max) are in the same base-2 units.
constexpr float kLog2e = 1.4426950408889634f;

template <class T, int HeadDim>
struct Geometry {
  static constexpr int kVec = kVecElems<T>;                // elements per lane per token
  static constexpr int kGroupLanes = HeadDim / kVec;       // lanes reading one token row
  static constexpr int kTokensPerWarp = 32 / kGroupLanes;  // tokens a warp reads per step
  static_assert(HeadDim % kVec == 0 && kGroupLanes >= 1 && kGroupLanes <= 32 && 32 % kGroupLanes == 0,
                "head_dim must split into whole 16-byte lanes within one warp");
};

// Merges softmax state (m_o, l_o, acc_o) into (m, l, acc): both describe
// disjoint token sets; an empty set has m = -inf and l = acc = 0.
__device__ __forceinline__ void merge_scales(float m, float m_o, float& self, float& other, float& m_new) {
  m_new = fmaxf(m, m_o);
  // exp2(-inf - -inf) would be NaN: an empty side contributes nothing instead.
  self = m == -INFINITY ? 0.0f : exp2f(m - m_new);
  other = m_o == -INFINITY ? 0.0f : exp2f(m_o - m_new);
}

template <class T, int HeadDim>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(AttentionLaunch p, int32_t qv_chunks) {
  using G = Geometry<T, HeadDim>;
  constexpr int kVec = G::kVec;
  constexpr int kQv = kMaxQueryVectors;

  const WorkItem item = p.step.work[blockIdx.x];
  const int32_t kv_head = int32_t(blockIdx.y) / qv_chunks;
  const int32_t group = p.num_heads / p.cache.num_kv_heads;
  const int32_t v_begin = (int32_t(blockIdx.y) % qv_chunks) * kQv;
  const int32_t v_total = item.row_count * group;
  if (v_begin >= v_total) return;  // a tile with fewer rows than the step's largest
  const int32_t num_vectors = min(kQv, v_total - v_begin);

  const int32_t q_start = p.step.query_start_loc[item.seq];
  const int32_t query_len = p.step.query_start_loc[item.seq + 1] - q_start;
  const int32_t context_len = p.step.seq_lens[item.seq] - query_len;

  const int lane = int(threadIdx.x) % 32;
  const int warp = int(threadIdx.x) / 32;
  const int group_lane = lane % G::kGroupLanes;  // which 16 bytes of a row
  const int token_slot = lane / G::kGroupLanes;  // which token of the warp's step
  const int dim0 = group_lane * kVec;

  // Query vector v: row (inside the sequence's new tokens) and query head.
  auto row_of = [&](int v) { return item.row_begin + (v_begin + v) / group; };
  auto head_of = [&](int v) { return kv_head * group + (v_begin + v) % group; };

  // The tile's query vectors, scaled once, in shared memory rather than
  // registers (which hold the accumulators): a lane reads its 16-byte slice
  // of a vector with float4 loads; the lanes of a token group read
  // consecutive slices and the groups the same ones (a broadcast), so the
  // reads are free of bank conflicts.
  __shared__ __align__(16) float s_q[kQv][HeadDim];
  for (int idx = int(threadIdx.x); idx < num_vectors * HeadDim; idx += kThreads) {
    const int v = idx / HeadDim;
    const int d = idx % HeadDim;
    const T* src = static_cast<const T*>(p.query.data) + int64_t(q_start + row_of(v)) * p.query.token_stride +
                   int64_t(head_of(v)) * p.query.head_stride;
    s_q[v][d] = to_float(src[d]) * (p.scale * kLog2e);
  }
  __syncthreads();

  float m[kQv], l[kQv], acc[kQv][kVec];
#pragma unroll
  for (int v = 0; v < kQv; ++v) {
    m[v] = -INFINITY;
    l[v] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[v][i] = 0.0f;
  }

  const int32_t* table = p.step.block_tables + int64_t(item.seq) * p.step.max_blocks_per_seq;
  const T* keys = static_cast<const T*>(p.cache.keys);
  const T* values = static_cast<const T*>(p.cache.values);
  const int32_t block_size = p.cache.block_size;

  for (int32_t base = item.kv_begin + warp * G::kTokensPerWarp; base < item.kv_end;
       base += kWarps * G::kTokensPerWarp) {
    const int32_t pos = base + token_slot;
    const bool in_range = pos < item.kv_end;
    float k[kVec], val[kVec];
    if (in_range) {
      const int64_t block = table[pos / block_size];
      // [block, kv_head, offset, d] in int64: a pool can hold more than 2^31 elements.
      const int64_t row = ((block * p.cache.num_kv_heads + kv_head) * block_size + pos % block_size) * HeadDim + dim0;
      load_vec<T>(keys + row, k);
      load_vec<T>(values + row, val);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) k[i] = val[i] = 0.0f;
    }
#pragma unroll
    for (int v = 0; v < kQv; ++v) {
      if (v >= num_vectors) break;  // uniform across the CTA: the shuffles below stay converged
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; i += 4) {
        const float4 q4 = *reinterpret_cast<const float4*>(&s_q[v][dim0 + i]);
        dot = fmaf(q4.x, k[i], dot);
        dot = fmaf(q4.y, k[i + 1], dot);
        dot = fmaf(q4.z, k[i + 2], dot);
        dot = fmaf(q4.w, k[i + 3], dot);
      }
#pragma unroll
      for (int offset = G::kGroupLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
      // Causal inside the new tokens: row r (position context_len + r) sees positions <= its own, and
      // under a window none sliding_window or more before it.
      const int32_t position = context_len + row_of(v);
      if (in_range && pos <= position && (p.sliding_window <= 0 || position - pos < p.sliding_window)) {
        const float m_new = fmaxf(m[v], dot);
        const float rescale = exp2f(m[v] - m_new);  // m = -inf before the first token: exp2(-inf) = 0
        const float weight = exp2f(dot - m_new);
        l[v] = fmaf(l[v], rescale, weight);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[v][i] = fmaf(acc[v][i], rescale, weight * val[i]);
        m[v] = m_new;
      }
    }
  }

  // Merge the warp's token groups: lanes with the same group_lane hold the same dims.
#pragma unroll
  for (int v = 0; v < kQv; ++v) {
    if (v >= num_vectors) break;
#pragma unroll
    for (int offset = G::kGroupLanes; offset < 32; offset *= 2) {
      const float m_o = __shfl_xor_sync(kFullMask, m[v], offset);
      const float l_o = __shfl_xor_sync(kFullMask, l[v], offset);
      float self, other, m_new;
      merge_scales(m[v], m_o, self, other, m_new);
      l[v] = l[v] * self + l_o * other;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float acc_o = __shfl_xor_sync(kFullMask, acc[v][i], offset);
        acc[v][i] = acc[v][i] * self + acc_o * other;
      }
      m[v] = m_new;
    }
  }

  // Merge the warps. Written once per CTA, so the 2- to 4-way bank conflicts
  // of the strided acc stores below cost nothing measurable.
  __shared__ float s_m[kWarps][kQv], s_l[kWarps][kQv];
  __shared__ float s_acc[kWarps][kQv][HeadDim];
  if (token_slot == 0) {
#pragma unroll
    for (int v = 0; v < kQv; ++v) {
      if (v >= num_vectors) break;
#pragma unroll
      for (int i = 0; i < kVec; ++i) s_acc[warp][v][dim0 + i] = acc[v][i];
      if (group_lane == 0) {
        s_m[warp][v] = m[v];
        s_l[warp][v] = l[v];
      }
    }
  }
  __syncthreads();

  for (int idx = int(threadIdx.x); idx < num_vectors * HeadDim; idx += kThreads) {
    const int v = idx / HeadDim;
    const int d = idx % HeadDim;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w][v]);
    float l_all = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = s_m[w][v] == -INFINITY ? 0.0f : exp2f(s_m[w][v] - m_all);
      l_all = fmaf(s_l[w][v], weight, l_all);
      o = fmaf(s_acc[w][v][d], weight, o);
    }
    // l_all = 0 only for a partition entirely after a row's position (split tiles).
    const float normalized = l_all > 0.0f ? o / l_all : 0.0f;
    const int32_t row = row_of(v);
    const int32_t head = head_of(v);
    if (item.partial < 0) {
      T* out = static_cast<T*>(p.output.data) + int64_t(q_start + row) * p.output.token_stride +
               int64_t(head) * p.output.head_stride;
      out[d] = from_float<T>(normalized);
    } else {
      const int64_t slot = (int64_t(item.partial) * kTileRows + (row - item.row_begin)) * p.num_heads + head;
      p.partials.out[slot * HeadDim + d] = normalized;
      if (d == 0) {
        p.partials.max[slot] = m_all;
        p.partials.sum[slot] = l_all;
      }
    }
  }
}

// grid.x = split tile, grid.y = query head. Reduces the tile's partitions
// (each a normalised partial output o_p with its max m_p and sum l_p):
//   out = sum_p o_p l_p exp2(m_p - M) / sum_p l_p exp2(m_p - M),  M = max_p m_p
// (m in the kernel's base-2 units).
template <class T>
__global__ void __launch_bounds__(kThreads)
    combine_partitions_kernel(AttentionLaunch p, int32_t head_dim) {
  const CombineItem item = p.step.combine[blockIdx.x];
  const int32_t head = int32_t(blockIdx.y);
  const int32_t q_start = p.step.query_start_loc[item.seq];
  for (int idx = int(threadIdx.x); idx < item.row_count * head_dim; idx += kThreads) {
    const int32_t r = idx / head_dim;
    const int32_t d = idx % head_dim;
    auto slot_of = [&](int32_t part) {
      return (int64_t(item.first_partial + part) * kTileRows + r) * p.num_heads + head;
    };
    float m_all = -INFINITY;
    for (int32_t part = 0; part < item.num_partials; ++part) m_all = fmaxf(m_all, p.partials.max[slot_of(part)]);
    float l_all = 0.0f, o = 0.0f;
    for (int32_t part = 0; part < item.num_partials; ++part) {
      const int64_t slot = slot_of(part);
      const float m_p = p.partials.max[slot];
      const float weight = m_p == -INFINITY ? 0.0f : p.partials.sum[slot] * exp2f(m_p - m_all);
      l_all += weight;
      o = fmaf(p.partials.out[slot * head_dim + d], weight, o);
    }
    // Every row sees at least its own position (inside any window), so some partition has l > 0.
    T* out = static_cast<T*>(p.output.data) + int64_t(q_start + item.row_begin + r) * p.output.token_stride +
             int64_t(head) * p.output.head_stride;
    out[d] = from_float<T>(o / l_all);
  }
}

}  // namespace pagedllm::attention_cuda::device
