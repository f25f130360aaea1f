#include "verify_kernels.h"

#include <cmath>
#include <cstdint>

#include "pagedllm/sdk/cpp/rejection_sampler.hpp"
#include "cuda_common/block_reduce.cuh"
#include "cuda_common/cuda_check.h"
#include "cuda_common/launch.cuh"

namespace pagedllm::spec_eagle {
namespace {

using cuda::block_reduce;
namespace rejection = pllm::rejection;

constexpr int64_t kNoFailure = INT64_MAX;

// The greedy order's better of two candidates (a tie keeps the lower id).
struct Candidate {
  float value;
  int32_t id;
};
struct Better {
  __device__ Candidate operator()(Candidate a, Candidate b) const {
    return rejection::ranks_before(a.value, a.id, b.value, b.id) ? a : b;
  }
};

// The first invalid value of row p (then q, when given) in the host's order,
// as 2 id (p) or 2 id + 1 (q); kNoFailure when all are valid.
__device__ int64_t first_invalid(const float* p, const float* q, int64_t vocab) {
  int64_t local = kNoFailure;
  for (int64_t i = threadIdx.x; i < vocab && local == kNoFailure; i += blockDim.x) {
    if (!rejection::valid_probability(p[i])) {
      local = 2 * i;
    } else if (q && !rejection::valid_probability(q[i])) {
      local = 2 * i + 1;
    }
  }
  return block_reduce(local, cuda::Min{});
}

__device__ VerifyRowResult failure(int64_t key, const float* p, const float* q, int32_t position) {
  const auto id = int32_t(key / 2);
  return key % 2 == 0 ? VerifyRowResult{0, rejection::kInvalidTarget, position, id, p[id]}
                      : VerifyRowResult{0, rejection::kInvalidDraft, position, id, q[id]};
}

// The inverse-CDF draw of rejection_sampler.hpp over the residual max(0, p - q)
// (or p, when q is null); -1 when it has no mass. The maximum is exact in any
// order; the sums are integers: each thread adds a contiguous range of ids,
// thread 0 turns the ranges' sums into their starts, and the thread whose
// range holds the target finds the token in it.
__device__ int32_t draw(const float* p, const float* q, int64_t vocab, uint64_t bits) {
  const auto weight = [&](int64_t i) { return q ? rejection::residual(p[i], q[i]) : double(p[i]); };
  double local_max = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) local_max = fmax(local_max, weight(i));
  const double max_weight = block_reduce(local_max, cuda::Max{});
  if (!(max_weight > 0.0)) return -1;
  const int shift = rejection::fixed_shift(max_weight, vocab);
  const int64_t per_thread = (vocab + int64_t(blockDim.x) - 1) / int64_t(blockDim.x);
  const int64_t begin = int64_t(threadIdx.x) * per_thread;
  const int64_t end = begin + per_thread < vocab ? begin + per_thread : vocab;
  uint64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += rejection::fixed_weight(weight(i), shift);

  __shared__ uint64_t range_start[cuda::kMaxBlockThreads];
  __shared__ uint64_t target;
  __shared__ int32_t token;
  range_start[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      const uint64_t range = range_start[t];
      range_start[t] = total;
      total += range;
    }
    target = rejection::draw_target(bits, total);
    token = -1;
  }
  __syncthreads();
  uint64_t cumulative = range_start[threadIdx.x];
  if (target >= cumulative && target < cumulative + sum) {
    for (int64_t i = begin; i < end; ++i) {
      cumulative += rejection::fixed_weight(weight(i), shift);
      if (cumulative > target) {
        token = int32_t(i);
        break;
      }
    }
  }
  __syncthreads();
  const int32_t chosen = token;
  __syncthreads();
  return chosen;
}

__global__ void verify_rows_kernel(VerifyKernelArgs a) {
  const int64_t s = blockIdx.x;
  const VerifyRowInput row = a.rows[s];
  const int32_t* drafts = a.drafts + s * a.max_drafts;
  int32_t* tokens = a.tokens + s * (a.max_drafts + 1);
  VerifyRowResult* result = a.results + s;
  const auto p_row = [&](int32_t i) { return a.p + s * a.p_stride0 + i * a.p_stride1; };
  const auto q_row = [&](int32_t i) { return a.q + s * a.q_stride0 + i * a.q_stride1; };

  if (row.greedy) {
    for (int32_t accepted = 0;; ++accepted) {
      const float* p = p_row(accepted);
      const int64_t invalid = first_invalid(p, nullptr, a.vocab);
      if (invalid != kNoFailure) {
        if (threadIdx.x == 0) *result = failure(invalid, p, nullptr, accepted);
        return;
      }
      Candidate local{-1.0f, INT32_MAX};
      for (int64_t i = threadIdx.x; i < a.vocab; i += blockDim.x) local = Better{}(local, {p[i], int32_t(i)});
      const int32_t best = block_reduce(local, Better{}).id;
      if (threadIdx.x == 0) tokens[accepted] = best;
      if (accepted < row.num_drafts && drafts[accepted] == best) continue;
      if (threadIdx.x == 0) *result = {accepted + 1, rejection::kOk, 0, 0, 0.0f};
      return;
    }
  }

  // The accept tests are sequential and read two values each: thread 0's.
  __shared__ int32_t accepted_shared, rejected_shared, failed_shared;
  if (threadIdx.x == 0) {
    const uint64_t accept_seed = pllm::mix64(row.seed ^ pllm::kAcceptStream);
    int32_t accepted = 0, rejected = 0, failed = 0;
    for (; accepted < row.num_drafts; ++accepted) {
      const int32_t d = drafts[accepted];
      const float pd = p_row(accepted)[d], qd = q_row(accepted)[d];
      if (!rejection::valid_probability(pd) || !rejection::valid_probability(qd)) {
        const bool target_bad = !rejection::valid_probability(pd);
        *result = {0, target_bad ? rejection::kInvalidTarget : rejection::kInvalidDraft, accepted, d,
                   target_bad ? pd : qd};
        failed = 1;
        break;
      }
      if (!rejection::accepts(pllm::uniform01(accept_seed, row.random_offset + uint64_t(accepted)), pd, qd)) {
        rejected = 1;
        break;
      }
      tokens[accepted] = d;
    }
    accepted_shared = accepted;
    rejected_shared = rejected;
    failed_shared = failed;
  }
  __syncthreads();
  const int32_t accepted = accepted_shared;
  const bool rejected = rejected_shared != 0;
  if (failed_shared) return;

  const float* p = p_row(accepted);
  const float* q = rejected ? q_row(accepted) : nullptr;
  const int64_t invalid = first_invalid(p, q, a.vocab);
  if (invalid != kNoFailure) {
    if (threadIdx.x == 0) *result = failure(invalid, p, q, accepted);
    return;
  }
  const uint64_t bits = pllm::random_bits(pllm::mix64(row.seed ^ pllm::kEmitStream), row.random_offset +
                                                                                          uint64_t(accepted));
  int32_t token = rejected ? draw(p, q, a.vocab, bits) : -1;
  if (token < 0) token = draw(p, nullptr, a.vocab, bits);
  if (threadIdx.x != 0) return;
  if (token < 0) {
    *result = {0, rejection::kNoMass, accepted, 0, 0.0f};
    return;
  }
  tokens[accepted] = token;
  *result = {accepted + 1, rejection::kOk, 0, 0, 0.0f};
}

// A power of two of threads, 32 to 1024, about 32 ids each.
unsigned threads_for(int64_t vocab) {
  unsigned threads = 32;
  while (threads < unsigned(cuda::kMaxBlockThreads) && int64_t(threads) * 32 < vocab) threads *= 2;
  return threads;
}

}  // namespace

void launch_verify_rows(const VerifyKernelArgs& args, int32_t num_rows, cudaStream_t stream) {
  if (num_rows == 0) return;
  cuda::launch<verify_rows_kernel>(unsigned(num_rows), threads_for(args.vocab), 0, stream, args);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace pagedllm::spec_eagle
