// A benchmark, not a test: llama_cpu's linear() on one thread against the
// OpenBLAS call it made before it had its own kernel for few rows (sgemv for
// one row, sgemm otherwise), on the embedded model's shapes and a 1B model's,
// for 1 to 32 rows. Each time is the best of 40 calls (this machine is
// shared: the minimum is the least disturbed), and the ratio is measured in
// the same run.
//   build/bin/llama_cpu_linear_bench

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "plugins/llama_cpu/cpu_kernels.h"

namespace {

template <class Fn>
double best_of_40_us(Fn&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < 40; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main() {
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(1);
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"tiny qkv", 384, 256},        {"tiny gate_up", 1376, 256}, {"tiny down", 256, 688},
                          {"tiny lm_head", 8192, 256},   {"1B qkv", 3072, 2048},      {"1B down", 2048, 8192},
                          {"1B lm_head slice", 16384, 2048}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::printf("linear() vs the OpenBLAS call it replaced (sgemv for 1 row, sgemm otherwise), one thread, best of 40\n");
  std::printf("%-18s %5s %12s %12s %8s\n", "shape [n x k]", "rows", "OpenBLAS us", "linear() us", "speedup");
  for (const Shape& s : shapes) {
    std::vector<float> w(std::size_t(s.n * s.k)), a(std::size_t(32 * s.k)), out(std::size_t(32 * s.n));
    for (float& x : w) x = normal(rng);
    for (float& x : a) x = normal(rng);
    for (const int64_t m : {1, 2, 4, 8, 16, 32}) {
      const double blas = best_of_40_us([&] {
        if (m == 1) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, int(s.n), int(s.k), 1.0f, w.data(), int(s.k), a.data(), 1, 0.0f,
                      out.data(), 1);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(s.n), int(s.k), 1.0f, a.data(), int(s.k),
                      w.data(), int(s.k), 0.0f, out.data(), int(s.n));
        }
      });
      const double ours = best_of_40_us(
          [&] { pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, w.data(), s.n, s.k, out.data(), s.n, false); });
      std::printf("%-18s %5lld %12.1f %12.1f %7.2fx\n", s.name, static_cast<long long>(m), blas, ours, blas / ours);
    }
  }
  return 0;
}
