#include "plugins/llama_cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "plugins/common/fast_exp.h"

namespace pagedllm::llama_cpu {

void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  // Column slices, 16-float multiples. Few rows (decode): the GEMM streams w
  // and each slice costs the same wherever it is cut, so two slices per thread
  // balance a thread slowed by a neighbour. Many rows (prefill): every slice
  // re-packs all of `a`, so one wide slice per thread. Tiny products run on
  // the calling thread: waking the pool costs more than they do.
  constexpr int64_t kInlineMacs = int64_t(1) << 17;
  const int64_t threads = pool.size();
  const int64_t target = threads == 1 || m * n * k < kInlineMacs ? 1 : (m <= 16 ? 2 * threads : threads);
  int64_t slice = (n + target - 1) / target;
  slice = std::max<int64_t>(64, (slice + 15) / 16 * 16);
  const int64_t slices = (n + slice - 1) / slice;
  pool.parallel_for(slices, [&](int64_t s, int) {
    const int64_t n0 = s * slice;
    const auto cols = static_cast<int>(std::min(slice, n - n0));
    if (m == 1) {  // sgemv: sgemm would pack w for a single row
      cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, int(k), 1.0f, w + n0 * k, int(k), a, 1, beta, out + n0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), cols, int(k), 1.0f, a, int(lda), w + n0 * k, int(k),
                  beta, out + n0, int(ldc));
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
