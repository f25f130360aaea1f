#include "sampler_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pagedllm/sdk/sampler.h"
#include "cuda_common/block_reduce.cuh"
#include "cuda_common/cuda_check.h"
#include "cuda_common/launch.cuh"
#include "sampling_math.h"

namespace pagedllm::sampler {
namespace {

using cuda::block_reduce;
using cuda::Max;
using cuda::Or;
using cuda::Sum;
constexpr int kMaxThreads = cuda::kMaxBlockThreads;
constexpr int kRadixBins = 256;

// A row element's place in (value desc, id asc) as one integer, larger first:
// the value's ordered bits, then the complement of the id. Keys are distinct.
__device__ uint64_t rank_key(float value, int32_t id) {
  return (uint64_t(ordered_bits(value)) << 32) | uint64_t(0xffffffffu - uint32_t(id));
}
__device__ int32_t id_of(uint64_t key) { return int32_t(0xffffffffu - uint32_t(key & 0xffffffffu)); }

// The better of two (score, id) candidates: higher score, then lower id.
struct Scored {
  double score;
  int32_t id;
};
struct Best {
  __device__ Scored operator()(Scored a, Scored b) const {
    return (a.score > b.score || (a.score == b.score && a.id < b.id)) ? a : b;
  }
};

// Radix select over the 64-bit rank keys, 8 bits a pass from the top: the key
// K* of the element at which the weights of the eligible elements, taken in
// key order (largest first), first reach `target` (>= 1); so {K >= K*} is the
// smallest such prefix. `weight(i, key)` is an element's weight, 0 when not
// eligible. Returns 0 (keep everything) when the total falls short.
template <class Weight>
__device__ uint64_t radix_select(int64_t vocab, const float* values, uint64_t target, Weight weight) {
  __shared__ unsigned long long histogram[kRadixBins];
  __shared__ uint64_t chosen_prefix;
  __shared__ uint64_t still_needed;
  __shared__ int found;
  if (threadIdx.x == 0) {
    chosen_prefix = 0;
    still_needed = target;
    found = 1;
  }
  __syncthreads();
  uint64_t mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = int(threadIdx.x); b < kRadixBins; b += int(blockDim.x)) histogram[b] = 0;
    __syncthreads();
    const uint64_t prefix = chosen_prefix;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint64_t key = rank_key(values[i], int32_t(i));
      if ((key & mask) != prefix) continue;
      const uint64_t w = weight(i, key);
      if (w > 0) atomicAdd(&histogram[(key >> shift) & 0xff], (unsigned long long)w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t cumulative = 0;
      int bin = -1;
      for (int b = kRadixBins - 1; b >= 0; --b) {
        if (cumulative + histogram[b] >= still_needed) {
          bin = b;
          break;
        }
        cumulative += histogram[b];
      }
      if (bin < 0) {
        found = 0;
      } else {
        still_needed -= cumulative;
        chosen_prefix |= uint64_t(bin) << shift;
      }
    }
    __syncthreads();
    if (!found) return 0;
    mask |= uint64_t(0xff) << shift;
  }
  return chosen_prefix;
}

__global__ void sample_rows_kernel(SampleKernelArgs a) {
  const DeviceRow row = a.rows[blockIdx.x];
  const int64_t vocab = a.vocab;
  const float* raw = a.logits + int64_t(a.gathered ? int32_t(blockIdx.x) : row.logits_row) * a.logits_stride;
  float* work = a.work + int64_t(blockIdx.x) * vocab;
  DeviceResult* result = a.results + blockIdx.x;
  const bool probabilities = a.probs != nullptr;
  float* probs = probabilities ? a.probs + int64_t(blockIdx.x) * a.probs_stride : nullptr;
  int32_t* top_ids = a.top_ids + int64_t(blockIdx.x) * a.max_top;
  float* top_logprobs = a.top_logprobs + int64_t(blockIdx.x) * a.max_top;

  // ---- finiteness (log_sum_exp defined) and the raw max ----
  float local_max = -INFINITY;
  int nan = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = raw[i];
    nan |= x != x;
    local_max = fmaxf(local_max, x);
    work[i] = x;
  }
  const float raw_max = block_reduce(local_max, Max{});
  if (block_reduce(nan, Or{}) || !(raw_max < INFINITY && raw_max > -INFINITY)) {
    for (int64_t i = threadIdx.x; probabilities && i < vocab; i += blockDim.x) probs[i] = 0.0f;
    for (int j = int(threadIdx.x); !probabilities && j < a.max_top; j += int(blockDim.x)) {
      top_ids[j] = -1;
      top_logprobs[j] = -INFINITY;
    }
    if (threadIdx.x == 0) *result = {-1, PLLM_SAMPLE_NON_FINITE_LOGITS, -INFINITY};
    return;
  }
  const bool reports = !probabilities && (a.want_logprobs || a.max_top > 0);
  double lse = 0.0;
  if (reports) {
    double local = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) local += exp(double(raw[i]) - double(raw_max));
    lse = double(raw_max) + log(block_reduce(local, Sum{}));
  }

  // ---- logit_bias and min_tokens over the row's distinct adjusted tokens ----
  for (int32_t e = int32_t(threadIdx.x); e < row.adjustment_count; e += int32_t(blockDim.x)) {
    const AdjustmentEntry adjustment = a.adjustments[row.adjustment_begin + e];
    work[adjustment.id] = adjusted_logit(work[adjustment.id], adjustment.bias, adjustment.banned != 0);
  }
  __syncthreads();

  // ---- penalties over the row's distinct history tokens ----
  for (int32_t e = int32_t(threadIdx.x); e < row.penalty_count; e += int32_t(blockDim.x)) {
    const PenaltyEntry p = a.penalties[row.penalty_begin + e];
    work[p.id] = penalized(work[p.id], row.repetition, row.frequency, row.presence, p.count);
  }
  __syncthreads();

  int32_t chosen;
  const bool greedy = row.temperature < kGreedyTemperature;
  if (row.scored >= 0 && !probabilities) {
    chosen = row.scored;  // the same for every thread of the block: no reduction skipped unevenly
  } else if (greedy) {
    uint64_t best = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint64_t key = rank_key(work[i], int32_t(i));
      best = key > best ? key : best;
    }
    chosen = id_of(block_reduce(best, Max{}));
    if (probabilities) {
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) probs[i] = i == chosen ? 1.0f : 0.0f;
    }
  } else {
    // ---- temperature, then the kept set: min-p, top-k, top-p ----
    float local = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      work[i] /= row.temperature;
      local = fmaxf(local, work[i]);
    }
    __syncthreads();
    const float max_scaled = block_reduce(local, Max{});
    const float min_p = row.min_p;
    uint64_t local_count = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      local_count += passes_min_p(weight(work[i], max_scaled), min_p) ? 1 : 0;
    }
    const uint64_t eligible = block_reduce(local_count, Sum{});
    const uint64_t top_k_key =
        row.top_k > 0 && uint64_t(row.top_k) < eligible
            ? radix_select(vocab, work, uint64_t(row.top_k),
                           [&](int64_t i, uint64_t) -> uint64_t {
                             return passes_min_p(weight(work[i], max_scaled), min_p) ? 1 : 0;
                           })
            : 0;
    const auto kept_before_top_p = [&](int64_t i, uint64_t key) {
      return key >= top_k_key && passes_min_p(weight(work[i], max_scaled), min_p);
    };
    uint64_t top_p_key = 0;
    if (row.top_p < 1.0f) {
      uint64_t mass = 0;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (kept_before_top_p(i, rank_key(work[i], int32_t(i)))) mass += fixed_mass(weight(work[i], max_scaled));
      }
      const uint64_t total = block_reduce(mass, Sum{});
      top_p_key = radix_select(vocab, work, top_p_target(row.top_p, total), [&](int64_t i, uint64_t key) -> uint64_t {
        return kept_before_top_p(i, key) ? fixed_mass(weight(work[i], max_scaled)) : 0;
      });
    }
    const auto kept = [&](int64_t i) {
      const uint64_t key = rank_key(work[i], int32_t(i));
      return key >= top_p_key && kept_before_top_p(i, key);
    };
    if (probabilities) {
      double local_total = 0.0;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (kept(i)) local_total += weight(work[i], max_scaled);
      }
      const double total = block_reduce(local_total, Sum{});
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        probs[i] = kept(i) ? float(weight(work[i], max_scaled) / total) : 0.0f;
      }
      chosen = -1;
    } else {
      // ---- Gumbel-max over the kept tokens ----
      Scored best{-INFINITY, int32_t(vocab)};
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (!kept(i)) continue;
        const Scored s{double(work[i]) + gumbel_noise(row.key, int32_t(i)), int32_t(i)};
        best = Best{}(best, s);
      }
      chosen = block_reduce(best, Best{}).id;
    }
  }
  if (probabilities) {
    if (threadIdx.x == 0) *result = {chosen, PLLM_SAMPLE_OK, 0.0f};
    return;
  }
  if (threadIdx.x == 0) *result = {chosen, PLLM_SAMPLE_OK, float(double(raw[chosen]) - lse)};

  // ---- the top-N raw logprobs: a radix select of the N-th key, then rank the N ----
  // A row may ask for more than the call's capacity: it gets max_top (its
  // slots, and its share of top_keys, hold no more).
  const int32_t wanted = row.num_top < a.max_top ? row.num_top : a.max_top;
  const int32_t n = int64_t(wanted) < vocab ? wanted : int32_t(vocab);
  if (n <= 0) {
    for (int j = int(threadIdx.x); j < a.max_top; j += int(blockDim.x)) {
      top_ids[j] = -1;
      top_logprobs[j] = -INFINITY;
    }
    return;
  }
  const uint64_t nth_key =
      n < vocab ? radix_select(vocab, raw, uint64_t(n), [](int64_t, uint64_t) -> uint64_t { return 1; }) : 0;
  uint64_t* keys = a.top_keys + int64_t(blockIdx.x) * a.max_top;
  __shared__ int32_t collected;
  if (threadIdx.x == 0) collected = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const uint64_t key = rank_key(raw[i], int32_t(i));
    if (key >= nth_key) keys[atomicAdd(&collected, 1)] = key;
  }
  __syncthreads();
  for (int32_t c = int32_t(threadIdx.x); c < n; c += int32_t(blockDim.x)) {
    int32_t rank = 0;
    for (int32_t o = 0; o < n; ++o) rank += keys[o] > keys[c] ? 1 : 0;
    const int32_t id = id_of(keys[c]);
    top_ids[rank] = id;
    top_logprobs[rank] = float(double(raw[id]) - lse);
  }
  for (int j = n + int(threadIdx.x); j < a.max_top; j += int(blockDim.x)) {
    top_ids[j] = -1;
    top_logprobs[j] = -INFINITY;
  }
}

// A power of two of threads, 32 to 1024, about 32 elements each.
__global__ void mask_rows_kernel(MaskKernelArgs a) {
  const DeviceRow row = a.rows[blockIdx.x];
  const float* raw = a.logits + int64_t(row.logits_row) * a.logits_stride;
  float* out = a.masked + int64_t(blockIdx.x) * a.vocab;
  const uint32_t* mask = a.bitmask + int64_t(blockIdx.x) * a.words;
  for (int64_t i = threadIdx.x; i < a.vocab; i += blockDim.x) {
    out[i] = !row.constrained || ((mask[i >> 5] >> (i & 31)) & 1u) ? raw[i] : -INFINITY;
  }
}

unsigned threads_for(int64_t vocab) {
  unsigned threads = 32;
  while (threads < kMaxThreads && int64_t(threads) * 32 < vocab) threads *= 2;
  return threads;
}

}  // namespace

void launch_sample_rows(const SampleKernelArgs& args, int32_t num_rows, cudaStream_t stream) {
  if (num_rows == 0) return;
  cuda::launch<sample_rows_kernel>(unsigned(num_rows), threads_for(args.vocab), 0, stream, args);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

void launch_mask_rows(const MaskKernelArgs& args, int32_t num_rows, cudaStream_t stream) {
  if (num_rows == 0) return;
  cuda::launch<mask_rows_kernel>(unsigned(num_rows), threads_for(args.vocab), 0, stream, args);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace pagedllm::sampler
