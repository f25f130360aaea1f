// plugins/llama_cpu's linear() against a float64 dot product, through both of
// its paths (its own kernel up to kDotRowsMaxRows rows, OpenBLAS sgemm past
// that), and the kernel's promise that a row's result does not depend on the
// batch it is in.
//
// Tolerance: an f32 dot product of length k whose sums take at most d
// sequential additions is within about d * 2^-24 * sum |a_i w_i| of the exact
// value. The kernel adds k / 16 products per lane, then 4 tree levels, then
// at most 15 tail products: d <= k / 16 + 19 (38 at k = 300); sgemm's blocking
// is no worse than sequential (d <= k). So |got - ref| <= 2e-5 * sum |a_i w_i|
// (d = 335 at the 2^-24 rate) holds for every case here, and a wrong index
// (a lane, a tail element or a row skipped or read twice) is off by a whole
// product, far outside it.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugins/llama_cpu/cpu_kernels.h"

using pagedllm::llama_cpu::kDotRowsMaxRows;
using pagedllm::llama_cpu::linear;
using pagedllm::plugins::ThreadPool;

namespace {

struct Case {
  int64_t m, n, k;
  int64_t lda, ldc;  // >= k and >= n: padded rows
  bool accumulate;
};

std::vector<float> random_floats(std::size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

void check_against_float64(ThreadPool& pool, const Case& c, uint32_t seed) {
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " lda " << c.lda << " ldc " << c.ldc << " accumulate "
            << c.accumulate << " threads " << pool.size());
  const std::vector<float> a = random_floats(std::size_t(c.m * c.lda), seed);
  const std::vector<float> w = random_floats(std::size_t(c.n * c.k), seed + 1);
  std::vector<float> out = random_floats(std::size_t(c.m * c.ldc), seed + 2);
  const std::vector<float> before = out;
  linear(pool, a.data(), c.lda, c.m, w.data(), c.n, c.k, out.data(), c.ldc, c.accumulate);
  double worst = 0.0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < c.k; ++i) {
        const double product = double(a[std::size_t(r * c.lda + i)]) * double(w[std::size_t(j * c.k + i)]);
        exact += product;
        magnitude += std::abs(product);
      }
      if (c.accumulate) {
        exact += before[std::size_t(r * c.ldc + j)];
        magnitude += std::abs(before[std::size_t(r * c.ldc + j)]);
      }
      const double err = std::abs(double(out[std::size_t(r * c.ldc + j)]) - exact);
      worst = std::max(worst, err / (2e-5 * magnitude + 1e-30));
    }
    for (int64_t j = c.n; j < c.ldc; ++j) {  // the padding is left alone
      REQUIRE(std::memcmp(&out[std::size_t(r * c.ldc + j)], &before[std::size_t(r * c.ldc + j)], sizeof(float)) == 0);
    }
  }
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("llama_cpu: linear() matches a float64 dot product on both paths", "[llama_cpu]") {
  ThreadPool one(1), three(3);
  uint32_t seed = 1;
  for (ThreadPool* pool : {&one, &three}) {
    for (const int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(7), int64_t(8),
                            int64_t(13), kDotRowsMaxRows, kDotRowsMaxRows + 1, int64_t(33)}) {
      for (const int64_t k : {1, 15, 16, 17, 256, 300}) {
        for (const int64_t n : {1, 5, 64, 1000}) {
          check_against_float64(*pool, {m, n, k, k, n, false}, seed++);
          check_against_float64(*pool, {m, n, k, k + 3, n + 5, true}, seed++);
        }
      }
    }
  }
}

TEST_CASE("llama_cpu: a row's linear() result is the same bits alone or in a batch", "[llama_cpu]") {
  // What makes greedy decoding give the same logits for a sequence whether
  // it is decoded alone, in a batch of plain decodes, or verified with its
  // speculative drafts (up to kDotRowsMaxRows rows).
  const int64_t n = 1000, k = 300;
  const std::vector<float> a = random_floats(std::size_t(kDotRowsMaxRows * k), 7);
  const std::vector<float> w = random_floats(std::size_t(n * k), 8);
  ThreadPool one(1), two(2);
  std::vector<float> alone(std::size_t(kDotRowsMaxRows * n));
  for (int64_t r = 0; r < kDotRowsMaxRows; ++r) {
    linear(one, a.data() + r * k, k, 1, w.data(), n, k, alone.data() + r * n, n, false);
  }
  for (int64_t m = 2; m <= kDotRowsMaxRows; ++m) {
    for (ThreadPool* pool : {&one, &two}) {
      INFO("batch of " << m << " rows, " << pool->size() << " threads");
      std::vector<float> batch(std::size_t(m * n));
      linear(*pool, a.data(), k, m, w.data(), n, k, batch.data(), n, false);
      CHECK(std::memcmp(batch.data(), alone.data(), batch.size() * sizeof(float)) == 0);
    }
  }
}
