#include "plugins/models_llama/cpu_kernels.h"

#include <cblas.h>

#include <cmath>

namespace pagedllm::models_llama {

void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  // Column slices of a multiple of 16 (whole cache lines of w rows and of out),
  // a few per thread so a thread slowed by a neighbour does not hold up the rest.
  const int64_t threads = pool.size();
  const int64_t target = threads == 1 ? 1 : threads * 3;
  int64_t slice = (n + target - 1) / target;
  slice = std::max<int64_t>(64, (slice + 15) / 16 * 16);
  const int64_t slices = (n + slice - 1) / slice;
  pool.parallel_for(slices, [&](int64_t s, int) {
    const int64_t n0 = s * slice;
    const auto cols = static_cast<int>(std::min(slice, n - n0));
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, int(k), 1.0f, w + n0 * k, int(k), a, 1, beta, out + n0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), cols, int(k), 1.0f, a, int(lda), w + n0 * k, int(k),
                  beta, out + n0, int(ldc));
    }
  });
}

void rms_norm(ThreadPool& pool, const float* x, int64_t ld_x, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ld_out) {
  parallel_rows(pool, rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = x + t * ld_x;
      double sum = 0.0;
      for (int64_t i = 0; i < dim; ++i) sum += double(row[i]) * double(row[i]);
      const auto inv = static_cast<float>(1.0 / std::sqrt(sum / double(dim) + double(eps)));
      float* dst = out + t * ld_out;
      for (int64_t i = 0; i < dim; ++i) dst[i] = weight[i] * (row[i] * inv);
    }
  });
}

void swiglu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out) {
  // exp costs about ten element operations.
  parallel_rows(pool, rows, inter * 10, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = gate_up + t * 2 * inter;
      const float* up = gate + inter;
      float* dst = out + t * inter;
      for (int64_t i = 0; i < inter; ++i) dst[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
  });
}

void use_single_threaded_blas() { openblas_set_num_threads(1); }

}  // namespace pagedllm::models_llama
