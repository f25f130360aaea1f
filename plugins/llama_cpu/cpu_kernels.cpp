#include "plugins/llama_cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "plugins/common/fast_exp.h"

// GCC warns that a 64-byte vector passed by value has another ABI with and
// without AVX-512. The helpers below are always inlined into dot_rows' clones,
// so no call passes one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pagedllm::llama_cpu {
namespace {

// Sixteen floats: one AVX-512 register in the avx512f clone, two AVX registers
// in the avx2 one.
using Floats16 = float __attribute__((vector_size(64)));

[[gnu::always_inline]] inline Floats16 load16(const float* p) {
  Floats16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lane l of fold<W>(a, b) adds two lanes W apart of a or b: chunks of W
// result lanes alternate between a and b, and chunk c reads a's (or b's)
// lanes (c / 2) * 2W + [0, W) and W past them. fold<8> puts the half-sums of
// a in lanes 0-7 and of b in 8-15; fold<4>, <2>, <1> repeat that inside each
// half, quarter and eighth.
template <int W>
constexpr int fold_source(int lane, bool upper) {
  const int chunk = lane / W;
  return (chunk % 2 == 1 ? 16 : 0) + chunk / 2 * 2 * W + lane % W + (upper ? W : 0);
}
template <int W, int... Lane>
[[gnu::always_inline]] inline Floats16 fold(Floats16 a, Floats16 b, std::integer_sequence<int, Lane...>) {
  return __builtin_shufflevector(a, b, fold_source<W>(Lane, false)...) +
         __builtin_shufflevector(a, b, fold_source<W>(Lane, true)...);
}
template <int W>
[[gnu::always_inline]] inline Floats16 fold(Floats16 a, Floats16 b) {
  return fold<W>(a, b, std::make_integer_sequence<int, 16>());
}

// The lane sums of sixteen accumulators in one vector (15 shuffle pairs
// instead of 240 scalar adds): accumulator s ends in lane bit_reverse4(s).
// Every accumulator's lanes are added in the same tree, whichever slot it is.
[[gnu::always_inline]] inline Floats16 sum_lanes(const Floats16 (&acc)[16]) {
  Floats16 halves[8], quarters[4], eighths[2];
  for (int p = 0; p < 8; ++p) halves[p] = fold<8>(acc[2 * p], acc[2 * p + 1]);
  for (int p = 0; p < 4; ++p) quarters[p] = fold<4>(halves[2 * p], halves[2 * p + 1]);
  for (int p = 0; p < 2; ++p) eighths[p] = fold<2>(quarters[2 * p], quarters[2 * p + 1]);
  return fold<1>(eighths[0], eighths[1]);
}
constexpr int kLaneOfAccumulator[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

// out[r, j] (+)= a[r] . w[j] for M rows and all n columns, J columns at a
// time: each 16-float piece of J weight rows is loaded once and multiplied
// into all M rows (M * J <= 16 accumulators), so w streams from memory once
// whatever M is. Row r's sum is the same whatever M, J or its place in the
// batch: lane l accumulates k = l, l + 16, ... in order, the lanes are added
// by sum_lanes' fixed tree, then the k % 16 tail in order.
template <int M, int J>
[[gnu::always_inline]] inline void dot_row_block(const float* a, int64_t lda, const float* w, int64_t n, int64_t k,
                                                 float* out, int64_t ldc, bool accumulate) {
  static_assert(M * J <= 16);
  const int64_t k16 = k / 16 * 16;
  int64_t j0 = 0;
  for (; j0 + J <= n; j0 += J) {
    Floats16 acc[16] = {};
    for (int64_t i = 0; i < k16; i += 16) {
      Floats16 wv[J];
      for (int j = 0; j < J; ++j) wv[j] = load16(w + (j0 + j) * k + i);
      for (int r = 0; r < M; ++r) {
        const Floats16 av = load16(a + r * lda + i);
        for (int j = 0; j < J; ++j) acc[r * J + j] += av * wv[j];
      }
    }
    const Floats16 sums = sum_lanes(acc);
    for (int r = 0; r < M; ++r) {
      for (int j = 0; j < J; ++j) {
        float sum = sums[kLaneOfAccumulator[r * J + j]];
        for (int64_t i = k16; i < k; ++i) sum += a[r * lda + i] * w[(j0 + j) * k + i];
        float& o = out[r * ldc + j0 + j];
        o = accumulate ? o + sum : sum;
      }
    }
  }
  if constexpr (J > 1) {
    if (j0 < n) dot_row_block<M, 1>(a, lda, w + j0 * k, n - j0, k, out + j0, ldc, accumulate);
  }
}

// linear() for up to kDotRowsMaxRows rows: blocks of four rows, then the
// remaining one to three, over tiles of columns whose weights (~256 KiB) stay
// in L2 from the first block to the last, so w comes from memory once.
PAGEDLLM_VECTOR_CLONES
void dot_rows(const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out, int64_t ldc,
              bool accumulate) {
  const int64_t tile = m <= 4 ? n : std::max<int64_t>(8, (int64_t(1) << 16) / k);
  for (int64_t j = 0; j < n; j += tile) {
    const int64_t cols = std::min(tile, n - j);
    const float* wt = w + j * k;
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) dot_row_block<4, 4>(a + r * lda, lda, wt, cols, k, out + r * ldc + j, ldc, accumulate);
    switch (m - r) {
      case 1: dot_row_block<1, 8>(a + r * lda, lda, wt, cols, k, out + r * ldc + j, ldc, accumulate); break;
      case 2: dot_row_block<2, 8>(a + r * lda, lda, wt, cols, k, out + r * ldc + j, ldc, accumulate); break;
      case 3: dot_row_block<3, 5>(a + r * lda, lda, wt, cols, k, out + r * ldc + j, ldc, accumulate); break;
      default: break;
    }
  }
}

}  // namespace

void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  // Column slices, 16-float multiples. Few rows (decode): the GEMM streams w
  // and each slice costs the same wherever it is cut, so two slices per thread
  // balance a thread slowed by a neighbour. Many rows (prefill): every slice
  // re-packs all of `a`, so one wide slice per thread. Tiny products run on
  // the calling thread: waking the pool costs more than they do.
  constexpr int64_t kInlineMacs = int64_t(1) << 17;
  const int64_t threads = pool.size();
  const int64_t target = threads == 1 || m * n * k < kInlineMacs ? 1 : (m <= kDotRowsMaxRows ? 2 * threads : threads);
  int64_t slice = (n + target - 1) / target;
  slice = std::max<int64_t>(64, (slice + 15) / 16 * 16);
  const int64_t slices = (n + slice - 1) / slice;
  pool.parallel_for(slices, [&](int64_t s, int) {
    const int64_t n0 = s * slice;
    const auto cols = static_cast<int>(std::min(slice, n - n0));
    if (m <= kDotRowsMaxRows) {
      dot_rows(a, lda, m, w + n0 * k, cols, k, out + n0, ldc, accumulate);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), cols, int(k), 1.0f, a, int(lda), w + n0 * k, int(k),
                  accumulate ? 1.0f : 0.0f, out + n0, int(ldc));
    }
  });
}

namespace {

using pagedllm::plugins::exp_approx;

PAGEDLLM_VECTOR_CLONES
void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
}

// The sum of squares in eight double lanes: exact enough for any hidden size,
// and still vectorised.
PAGEDLLM_VECTOR_CLONES
double sum_of_squares(const float* x, int64_t n) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lanes[j] += double(x[i + j]) * double(x[i + j]);
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += double(x[i]) * double(x[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

PAGEDLLM_VECTOR_CLONES
void scale_row(const float* x, const float* weight, float inv, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

}  // namespace

void rms_norm(ThreadPool& pool, const float* x, int64_t ld_x, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ld_out) {
  parallel_rows(pool, rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const double mean_square = sum_of_squares(x + t * ld_x, dim) / double(dim);
      const auto inv = static_cast<float>(1.0 / std::sqrt(mean_square + double(eps)));
      scale_row(x + t * ld_x, weight, inv, out + t * ld_out, dim);
    }
  });
}

void swiglu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out) {
  parallel_rows(pool, rows, inter * 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = gate_up + t * 2 * inter;
      swiglu_row(gate, gate + inter, out + t * inter, inter);
    }
  });
}

void use_single_threaded_blas() { openblas_set_num_threads(1); }

}  // namespace pagedllm::llama_cpu
