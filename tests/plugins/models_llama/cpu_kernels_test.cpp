// plugins/lib/llama_cpu's linear() against a float64 dot product over the
// widened weights, for f32, bf16 and f16 weights, through every instruction
// set the CPU has (cpu_isa.h's levels, forced one after the other with
// set_isa_cap: scalar, avx2, avx512, avx512vnni, avx512bf16) and all of its
// paths (its own kernel up to kDotRowsMaxRows rows; past that, OpenBLAS sgemm
// on tiles widened to f32, or on avx512bf16 for bf16 weights the vdpbf16ps
// GEMM), and the kernel's promise that a row's result does not depend on the
// batch it is in. 16-bit weights are widened exactly, so a bf16/f16 result
// must equal, bit for bit, the f32 kernel's on the widened weights (same
// level), except where bf16 has a kernel of its own: up to kDotRowsMaxRows
// rows on the AVX-512 levels (32 weights per load, split into even and odd
// elements: another order of the same exact products), and the vdpbf16ps GEMM.
//
// Tolerance: an f32 dot product of length k whose sums take at most d
// sequential additions is within about d * 2^-24 * sum |a_i w_i| of the exact
// value. The kernel adds k / 16 products per lane, then 4 tree levels, then
// at most 15 tail products: d <= k / 16 + 19 (38 at k = 300); sgemm's blocking
// is no worse than sequential (d <= k). So |got - ref| <= 2e-5 * sum |a_i w_i|
// (d = 335 at the 2^-24 rate) holds for every case here. bf16's own AVX-512
// kernel adds 2 products per lane per 32 k, the tree, then at most 31 tail
// products: d <= k / 16 + 35 (54 at k = 300).
//
// bf16 weights with Bf16Compute::kVdpbf16ps (the default) on avx512bf16
// multiply bf16 activations by the bf16 weights at every row count: the
// reference for them is the float64 product of the activations rounded to bf16
// (common/float16_rounding.h's rounding, not the kernel's conversion
// instruction) and the weights. The products of two bf16 numbers are exact in
// f32. The GEMM (past kDotRowsMaxRows rows) adds them in order of k, one
// rounding per product plus one for `accumulate`: d <= k + 1 (301 at k =
// 300); the few-row kernel adds one pair per lane per 32 k (two roundings),
// then the 4-level tree: d <= k / 16 + 6 (24 at k = 300). Both are inside the
// same 2e-5 bound, which a path that did not round would miss (the rounding
// moves a product by up to 2^-8 of it: at k = 1 two hundred times the bound).
// The rounding itself is the accuracy cost, also checked here against the
// unrounded float64 product: bf16 keeps 8 significant bits, so rounding to
// nearest moves each a_i by at most half a unit in the last place, 2^-8 |a_i|
// (and 2^-8 of the rounded value), and the sum by at most 2^-8 sum |a_i w_i|
// (plus the 2e-5 of the f32 sums); measured on a model in docs/benchmarks.md. Below avx512bf16 kVdpbf16ps is the exact path: the same
// bits as kExact.
//
// int8 weights (quantization: int8_*): the quantization itself against a
// naive float64 one (exact equality: both round w / s in double), the W8A8
// activation quantization against float64 (equal except within 1e-4 of a
// rounding tie, where f32 a * (127 / max) may round the other way), and
// linear() against a float64 evaluation of the same quantized math:
// weight-only sum_i a_i q_i * s_w (the f32 bound above, with |q_i s_w| for
// |w_i|; past 16 rows the dequantized q s adds one rounding per product,
// inside it); W8A8 (f64(sum_i q_a q_w)) * s_a * s_w from the kernel's own
// quantized activations: the integer sum is exact, then at most three f32
// roundings (the int32 -> f32 conversion and two products) and the
// accumulate addition, so |got - ref| <= 4 * 2^-24 (|ref| + |before|).
// W8A8 must also give the same bits on every level and in every batch.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype_name.h"
#include "common/float16_rounding.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "llama_cpu/buffer.h"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/weight_loader.h"
#include "tests/plugins/models_llama/isa_levels.h"

using pagedllm::llama_cpu::Bf16Compute;
using pagedllm::llama_cpu::Int8Compute;
using pagedllm::llama_cpu::Isa;
using pagedllm::llama_cpu::kDotRowsMaxRows;
using pagedllm::llama_cpu::linear;
using pagedllm::llama_cpu::WeightsRef;
using pagedllm::llama_cpu::testing::available_isas;
using pagedllm::llama_cpu::testing::IsaCapGuard;
using pagedllm::plugins::ThreadPool;

namespace {

// The plugins that link llama_cpu run OpenBLAS single-threaded (their own pool
// splits the work), so the kernels are tested that way too; OpenBLAS's own
// threads would also be invisible to ThreadSanitizer's view of synchronisation.
const bool kBlasSingleThreaded = (pagedllm::llama_cpu::use_single_threaded_blas(), true);

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

// Random weights in `dtype` (f32, or rounded to bf16/f16 bits) and their exact f32 widening; bf16 multiplied
// as `bf16_compute` says.
struct Weights {
  pllm_dtype dtype;
  std::vector<float> wide;
  std::vector<uint16_t> bits;  // bf16/f16 only
  Bf16Compute bf16_compute = Bf16Compute::kVdpbf16ps;
  WeightsRef ref() const {
    if (dtype == PLLM_DTYPE_F32) return WeightsRef{wide.data(), dtype};
    WeightsRef r{bits.data(), dtype};
    r.bf16_compute = bf16_compute;
    return r;
  }
};
Weights random_weights(pllm_dtype dtype, std::size_t count, uint32_t seed,
                       Bf16Compute bf16_compute = Bf16Compute::kVdpbf16ps) {
  Weights w{dtype, random_floats(count, seed), {}, bf16_compute};
  if (dtype == PLLM_DTYPE_F32) return w;
  w.bits.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    w.bits[i] = dtype == PLLM_DTYPE_BF16 ? pagedllm::plugins::f32_to_bf16(w.wide[i])
                                         : pagedllm::plugins::f32_to_f16(w.wide[i]);
    w.wide[i] = dtype == PLLM_DTYPE_BF16 ? pllm::bf16_to_f32(w.bits[i]) : pllm::f16_to_f32(w.bits[i]);
  }
  return w;
}

// Random weights quantized to int8 per row (quantize_row_int8, itself checked below).
struct Int8Weights {
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  Int8Compute compute;
  WeightsRef ref() const { return {q.data(), PLLM_DTYPE_I8, scales.data(), sums.data(), compute}; }
};
Int8Weights random_int8_weights(int64_t n, int64_t k, Int8Compute compute, uint32_t seed) {
  const std::vector<float> w = random_floats(std::size_t(n * k), seed);
  Int8Weights q{std::vector<int8_t>(std::size_t(n * k)), std::vector<float>(std::size_t(n)),
                std::vector<int32_t>(std::size_t(n)), compute};
  for (int64_t j = 0; j < n; ++j) {
    pagedllm::llama_cpu::quantize_row_int8(w.data() + j * k, k, q.q.data() + j * k, q.scales[std::size_t(j)],
                                           q.sums[std::size_t(j)]);
  }
  return q;
}

// Every weight dtype, bf16 both ways.
const std::pair<pllm_dtype, Bf16Compute> kWeightPaths[] = {{PLLM_DTYPE_F32, Bf16Compute::kExact},
                                                           {PLLM_DTYPE_BF16, Bf16Compute::kVdpbf16ps},
                                                           {PLLM_DTYPE_BF16, Bf16Compute::kExact},
                                                           {PLLM_DTYPE_F16, Bf16Compute::kExact}};

// relative: the bound's factor of sum |a_i w_i| (2e-5 above; the long
// products of the many-rows GEMMs' test below state their own).
void check_against_float64(ThreadPool& pool, const Case& c, pllm_dtype dtype, uint32_t seed,
                           Bf16Compute bf16_compute = Bf16Compute::kVdpbf16ps, double relative = 2e-5) {
  const bool vdpbf16ps = bf16_compute == Bf16Compute::kVdpbf16ps;
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " lda " << c.lda << " ldc " << c.ldc << " accumulate "
            << c.accumulate << " threads " << pool.size() << " dtype " << pagedllm::plugins::dtype_name(dtype)
            << (dtype == PLLM_DTYPE_BF16 ? (vdpbf16ps ? " (vdpbf16ps)" : " (exact)") : "") << " isa "
            << pagedllm::llama_cpu::isa_name(pagedllm::llama_cpu::active_isa()));
  const std::vector<float> a = random_floats(std::size_t(c.m * c.lda), seed);
  const Weights w = random_weights(dtype, std::size_t(c.n * c.k), seed + 1, bf16_compute);
  std::vector<float> out = random_floats(std::size_t(c.m * c.ldc), seed + 2);
  const std::vector<float> before = out;
  linear(pool, a.data(), c.lda, c.m, w.ref(), c.n, c.k, out.data(), c.ldc, c.accumulate);
  // vdpbf16ps' activations: rounded to bf16.
  const bool avx512bf16 = pagedllm::llama_cpu::active_isa() == Isa::kAvx512Bf16;
  const bool dp = dtype == PLLM_DTYPE_BF16 && vdpbf16ps && avx512bf16;
  std::vector<float> a_ref = a;
  if (dp) {
    for (float& x : a_ref) x = pllm::bf16_to_f32(pagedllm::plugins::f32_to_bf16(x));
  }
  double worst = 0.0, worst_unrounded = 0.0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = 0.0, magnitude = 0.0, unrounded = 0.0;
      for (int64_t i = 0; i < c.k; ++i) {
        const double wi = w.wide[std::size_t(j * c.k + i)];
        const double product = double(a_ref[std::size_t(r * c.lda + i)]) * wi;
        exact += product;
        magnitude += std::abs(product);
        unrounded += double(a[std::size_t(r * c.lda + i)]) * wi;
      }
      if (c.accumulate) {
        exact += before[std::size_t(r * c.ldc + j)];
        unrounded += before[std::size_t(r * c.ldc + j)];
        magnitude += std::abs(before[std::size_t(r * c.ldc + j)]);
      }
      const double got = out[std::size_t(r * c.ldc + j)];
      worst = std::max(worst, std::abs(got - exact) / (relative * magnitude + 1e-30));
      // (|a_i - round(a_i)| <= 2^-8 |round(a_i)|: magnitude, of the rounded activations, bounds it.)
      worst_unrounded =
          std::max(worst_unrounded, std::abs(got - unrounded) / ((0x1p-8 + relative) * magnitude + 1e-30));
    }
    for (int64_t j = c.n; j < c.ldc; ++j) {  // the padding is left alone
      REQUIRE(std::memcmp(&out[std::size_t(r * c.ldc + j)], &before[std::size_t(r * c.ldc + j)], sizeof(float)) == 0);
    }
  }
  CHECK(worst <= 1.0);
  CHECK(worst_unrounded <= 1.0);
  if (dtype == PLLM_DTYPE_BF16 && vdpbf16ps && !avx512bf16) {
    // Below avx512bf16, kVdpbf16ps is the exact path.
    std::vector<float> exact_out = before;
    const Weights exact_w = random_weights(dtype, std::size_t(c.n * c.k), seed + 1, Bf16Compute::kExact);
    linear(pool, a.data(), c.lda, c.m, exact_w.ref(), c.n, c.k, exact_out.data(), c.ldc, c.accumulate);
    CHECK(std::memcmp(out.data(), exact_out.data(), out.size() * sizeof(float)) == 0);
  }
  const bool bf16_kernel =
      dtype == PLLM_DTYPE_BF16 && pagedllm::llama_cpu::active_isa() >= Isa::kAvx512 && c.m <= kDotRowsMaxRows;
  if (dtype == PLLM_DTYPE_F32 || dp || bf16_kernel) return;
  std::vector<float> f32_out = before;
  linear(pool, a.data(), c.lda, c.m, w.wide.data(), c.n, c.k, f32_out.data(), c.ldc, c.accumulate);
  CHECK(std::memcmp(out.data(), f32_out.data(), out.size() * sizeof(float)) == 0);
}

void check_int8_against_float64(ThreadPool& pool, const Case& c, Int8Compute compute, uint32_t seed) {
  const bool w8a8 = compute == Int8Compute::kW8A8;
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " lda " << c.lda << " ldc " << c.ldc << " accumulate "
            << c.accumulate << " threads " << pool.size() << (w8a8 ? " W8A8" : " weight-only") << " isa "
            << pagedllm::llama_cpu::isa_name(pagedllm::llama_cpu::active_isa()));
  const std::vector<float> a = random_floats(std::size_t(c.m * c.lda), seed);
  const Int8Weights w = random_int8_weights(c.n, c.k, compute, seed + 1);
  std::vector<float> out = random_floats(std::size_t(c.m * c.ldc), seed + 2);
  const std::vector<float> before = out;
  linear(pool, a.data(), c.lda, c.m, w.ref(), c.n, c.k, out.data(), c.ldc, c.accumulate);
  std::vector<uint8_t> qa(std::size_t(c.m * c.k));
  std::vector<float> sa(std::size_t(c.m));
  pagedllm::llama_cpu::quantize_activations_u8(a.data(), c.lda, c.m, c.k, qa.data(), c.k, sa.data());
  double worst = 0.0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      const double sw = w.scales[std::size_t(j)];
      for (int64_t i = 0; i < c.k; ++i) {
        const double wq = w.q[std::size_t(j * c.k + i)];
        const double product =
            w8a8 ? (double(qa[std::size_t(r * c.k + i)]) - 128.0) * wq : double(a[std::size_t(r * c.lda + i)]) * wq;
        exact += product;
        magnitude += std::abs(product);
      }
      exact *= w8a8 ? double(sa[std::size_t(r)]) * sw : sw;
      magnitude = w8a8 ? 4 * 0x1p-24 * std::abs(exact) : 2e-5 * magnitude * sw;
      const double prior = before[std::size_t(r * c.ldc + j)];
      if (c.accumulate) {
        exact += prior;
        magnitude += (w8a8 ? 4 * 0x1p-24 : 2e-5) * std::abs(prior);
      }
      const double err = std::abs(double(out[std::size_t(r * c.ldc + j)]) - exact);
      worst = std::max(worst, err / (magnitude + 1e-30));
    }
    for (int64_t j = c.n; j < c.ldc; ++j) {
      REQUIRE(std::memcmp(&out[std::size_t(r * c.ldc + j)], &before[std::size_t(r * c.ldc + j)], sizeof(float)) == 0);
    }
  }
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("llama_cpu: int8 weight quantization matches a naive float64 one", "[llama_cpu]") {
  // Row 0 has ties: max 127 gives s = 1 exactly, and 0.5, 1.5, -2.5 round to even.
  std::vector<std::vector<float>> rows = {{127.0f, 0.5f, 1.5f, -2.5f, -127.0f, 3.49f},
                                          std::vector<float>(37, 0.0f), random_floats(300, 11),
                                          random_floats(1, 12)};
  for (float& x : rows[2]) x *= 1e-3f;
  for (const std::vector<float>& row : rows) {
    const auto k = int64_t(row.size());
    std::vector<int8_t> q(row.size());
    float scale = -1.0f;
    int32_t sum = -1;
    pagedllm::llama_cpu::quantize_row_int8(row.data(), k, q.data(), scale, sum);
    double amax = 0.0;
    for (float x : row) amax = std::max(amax, std::abs(double(x)));
    const double s = amax / 127.0;
    CHECK(scale == float(s));
    int32_t ref_sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double ref = s == 0.0 ? 0.0 : std::nearbyint(double(row[std::size_t(i)]) / s);
      CHECK(double(q[std::size_t(i)]) == ref);
      ref_sum += int32_t(ref);
    }
    CHECK(sum == ref_sum);
  }
  std::vector<int8_t> q(6);
  float scale = 0.0f;
  int32_t sum = 0;
  pagedllm::llama_cpu::quantize_row_int8(rows[0].data(), 6, q.data(), scale, sum);
  CHECK(q == std::vector<int8_t>{127, 0, 2, -2, -127, 3});
}

TEST_CASE("llama_cpu: W8A8 activation quantization matches float64", "[llama_cpu]") {
  const int64_t m = 5, k = 300, lda = 311, ldq = 320;
  std::vector<float> a = random_floats(std::size_t(m * lda), 21);
  std::fill(a.begin() + 2 * lda, a.begin() + 2 * lda + k, 0.0f);  // an all-zero row
  std::vector<uint8_t> q(std::size_t(m * ldq), 0);
  std::vector<float> scales(std::size_t(m), -1.0f);
  pagedllm::llama_cpu::quantize_activations_u8(a.data(), lda, m, k, q.data(), ldq, scales.data());
  int ties = 0;
  for (int64_t r = 0; r < m; ++r) {
    double amax = 0.0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::abs(double(a[std::size_t(r * lda + i)])));
    CHECK(std::abs(double(scales[std::size_t(r)]) - amax / 127.0) <= 0x1p-24 * amax / 127.0);
    for (int64_t i = 0; i < ldq; ++i) {
      const double x = i < k && amax > 0.0 ? double(a[std::size_t(r * lda + i)]) * 127.0 / amax : 0.0;
      const double ref = std::nearbyint(x) + 128.0;
      const double got = q[std::size_t(r * ldq + i)];
      if (got != ref && std::abs(std::abs(x - std::trunc(x)) - 0.5) < 1e-4) {
        ++ties;
        continue;
      }
      CHECK(got == ref);
    }
  }
  CHECK(ties <= 2);
}

TEST_CASE("llama_cpu: int8 linear() (W8A8 and weight-only) matches float64 on every level", "[llama_cpu]") {
  IsaCapGuard guard;
  ThreadPool one(1), three(3);
  uint32_t seed = 1000;
  for (const Isa isa : available_isas()) {
    pagedllm::llama_cpu::set_isa_cap(isa);
    for (const Int8Compute compute : {Int8Compute::kW8A8, Int8Compute::kWeightOnly}) {
      for (ThreadPool* pool : {&one, &three}) {
        for (const int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(7), kDotRowsMaxRows,
                                kDotRowsMaxRows + 1, int64_t(33)}) {
          for (const int64_t k : {1, 15, 64, 65, 300}) {
            for (const int64_t n : {1, 5, 64, 1000}) {
              check_int8_against_float64(*pool, {m, n, k, k, n, false}, compute, seed++);
              check_int8_against_float64(*pool, {m, n, k, k + 3, n + 5, true}, compute, seed++);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("llama_cpu: W8A8 gives the same bits on every level, alone or in a batch", "[llama_cpu]") {
  IsaCapGuard guard;
  const int64_t n = 1000, k = 300, m = 40;
  const std::vector<float> a = random_floats(std::size_t(m * k), 31);
  const Int8Weights w = random_int8_weights(n, k, Int8Compute::kW8A8, 32);
  ThreadPool one(1), two(2);
  pagedllm::llama_cpu::set_isa_cap(Isa::kScalar);
  std::vector<float> alone(std::size_t(m * n));
  for (int64_t r = 0; r < m; ++r) linear(one, a.data() + r * k, k, 1, w.ref(), n, k, alone.data() + r * n, n, false);
  for (const Isa isa : available_isas()) {
    pagedllm::llama_cpu::set_isa_cap(isa);
    for (const int64_t rows : {int64_t(1), int64_t(4), int64_t(7), int64_t(16), m}) {
      INFO(rows << " rows, " << pagedllm::llama_cpu::isa_name(isa));
      std::vector<float> batch(std::size_t(rows * n));
      linear(two, a.data(), k, rows, w.ref(), n, k, batch.data(), n, false);
      CHECK(std::memcmp(batch.data(), alone.data(), batch.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("llama_cpu: linear() matches a float64 dot product on every path, dtype and instruction set",
          "[llama_cpu]") {
  IsaCapGuard guard;
  ThreadPool one(1), three(3);
  uint32_t seed = 1;
  for (const Isa isa : available_isas()) {
    pagedllm::llama_cpu::set_isa_cap(isa);
    REQUIRE(pagedllm::llama_cpu::active_isa() == isa);
    for (const auto& [dtype, bf16_compute] : kWeightPaths) {
      for (ThreadPool* pool : {&one, &three}) {
        for (const int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(7), int64_t(8),
                                int64_t(13), kDotRowsMaxRows, kDotRowsMaxRows + 1, int64_t(33)}) {
          for (const int64_t k : {1, 15, 16, 17, 32, 47, 256, 300}) {
            for (const int64_t n : {1, 5, 64, 1000}) {
              check_against_float64(*pool, {m, n, k, k, n, false}, dtype, seed++, bf16_compute);
              check_against_float64(*pool, {m, n, k, k + 3, n + 5, true}, dtype, seed++, bf16_compute);
            }
          }
        }
      }
    }
  }
  if (pagedllm::llama_cpu::detected_isa() != Isa::kAvx512Bf16) {
    WARN("this CPU lacks some of the levels: tested up to "
         << pagedllm::llama_cpu::isa_name(pagedllm::llama_cpu::detected_isa()));
  }
}

TEST_CASE("llama_cpu: the many-rows GEMMs match float64 across their tiles and cache blocks", "[llama_cpu]") {
  // Past kDotRowsMaxRows rows: bf16 on vdpbf16ps (avx512bf16) and W8A8 on
  // vpdpbusd (avx512vnni and up), the lanes GEMMs of linear_kernels.inc. The
  // cases cross every edge of their blocking: blocks of 32 rows (17: one
  // block, mostly padding; 33: a block of 32 and one of 16; 49: two of 32),
  // tiles of 12 columns and the remainders, k's last 32-bit word partly past k
  // (bf16: k odd; int8: k % 4 of 1, 2, 3), blocks of columns that fill half of
  // L2 (n = 1000 at k = 301 / 601 spans two on a 1 MiB L2), chunks of rows
  // that fill a quarter of L3 (1100 rows of bf16 k = 4001, 2100 of int8 k =
  // 4003: two chunks on a 32 MiB L3), one thread and two. The bf16 bound: these
  // products are long, so the 2e-5 of the short ones above is replaced by the
  // first-order bound of any order of summing k + 1 terms (the products, the
  // earlier out), (k + 2) 2^-24 sum |a_i w_i| (with the bf16-rounded
  // activations, as there). W8A8: check_int8_against_float64's exact bound.
  IsaCapGuard guard;
  ThreadPool one(1), two(2);
  uint32_t seed = 5000;
  struct Shape {
    int64_t m, n, k;
  };
  const Shape bf16_shapes[] = {{17, 13, 31},   {33, 100, 833}, {49, 25, 1700},
                               {64, 1000, 301}, {130, 37, 300}, {1100, 13, 4001}};
  const Shape w8a8_shapes[] = {{17, 13, 31},    {33, 100, 833}, {49, 25, 1702},
                               {64, 1000, 601}, {150, 7, 4001}, {2100, 5, 4003}};
  for (const Isa isa : available_isas()) {
    if (isa < Isa::kAvx512Vnni) continue;
    pagedllm::llama_cpu::set_isa_cap(isa);
    for (ThreadPool* pool : {&one, &two}) {
      if (isa == Isa::kAvx512Bf16) {
        for (const Shape& s : bf16_shapes) {
          const double relative = double(s.k + 2) * 0x1p-24;
          check_against_float64(*pool, {s.m, s.n, s.k, s.k, s.n, false}, PLLM_DTYPE_BF16, seed++,
                                Bf16Compute::kVdpbf16ps, relative);
          check_against_float64(*pool, {s.m, s.n, s.k, s.k + 5, s.n + 3, true}, PLLM_DTYPE_BF16, seed++,
                                Bf16Compute::kVdpbf16ps, relative);
        }
      }
      for (const Shape& s : w8a8_shapes) {
        check_int8_against_float64(*pool, {s.m, s.n, s.k, s.k, s.n, false}, Int8Compute::kW8A8, seed++);
        check_int8_against_float64(*pool, {s.m, s.n, s.k, s.k + 5, s.n + 3, true}, Int8Compute::kW8A8, seed++);
      }
    }
  }
  if (pagedllm::llama_cpu::detected_isa() != Isa::kAvx512Bf16) {
    WARN("this CPU lacks AVX512-BF16 or VNNI: tested up to "
         << pagedllm::llama_cpu::isa_name(pagedllm::llama_cpu::detected_isa()));
  }
}

TEST_CASE("llama_cpu: a row's linear() result is the same bits alone or in a batch", "[llama_cpu]") {
  // What makes greedy decoding give the same logits for a sequence whether
  // it is decoded alone, in a batch of plain decodes, or verified with its
  // speculative drafts (up to kDotRowsMaxRows rows); on every level and dtype.
  IsaCapGuard guard;
  const int64_t n = 1000, k = 300;
  const std::vector<float> a = random_floats(std::size_t(kDotRowsMaxRows * k), 7);
  ThreadPool one(1), two(2);
  for (const Isa isa : available_isas()) {
    pagedllm::llama_cpu::set_isa_cap(isa);
    for (const auto& [dtype, bf16_compute] : kWeightPaths) {
      const Weights w = random_weights(dtype, std::size_t(n * k), 8, bf16_compute);
      std::vector<float> alone(std::size_t(kDotRowsMaxRows * n));
      for (int64_t r = 0; r < kDotRowsMaxRows; ++r) {
        linear(one, a.data() + r * k, k, 1, w.ref(), n, k, alone.data() + r * n, n, false);
      }
      for (int64_t m = 2; m <= kDotRowsMaxRows; ++m) {
        for (ThreadPool* pool : {&one, &two}) {
          INFO("batch of " << m << " rows, " << pool->size() << " threads, "
                           << pagedllm::plugins::dtype_name(dtype)
                           << (bf16_compute == Bf16Compute::kVdpbf16ps ? " (vdpbf16ps), " : ", ")
                           << pagedllm::llama_cpu::isa_name(isa));
          std::vector<float> batch(std::size_t(m * n));
          linear(*pool, a.data(), k, m, w.ref(), n, k, batch.data(), n, false);
          CHECK(std::memcmp(batch.data(), alone.data(), batch.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("llama_cpu: past kDotRowsMaxRows a row's result is the same bits in any batch", "[llama_cpu]") {
  // The lanes GEMMs (bf16 on vdpbf16ps, W8A8) sum each output in one order
  // whatever rows share the product: a chunk of a prefill gives the same
  // activations whether it is 17 rows or 70, first or last in its block of
  // 32, on one thread or two, and accumulating into out or not.
  IsaCapGuard guard;
  const int64_t n = 300, k = 301, m = 70;
  const std::vector<float> a = random_floats(std::size_t(m * k), 41);
  const std::vector<float> prior = random_floats(std::size_t(m * n), 42);
  const Weights bf16 = random_weights(PLLM_DTYPE_BF16, std::size_t(n * k), 43, Bf16Compute::kVdpbf16ps);
  const Int8Weights int8 = random_int8_weights(n, k, Int8Compute::kW8A8, 44);
  ThreadPool one(1), two(2);
  for (const Isa isa : available_isas()) {
    if (isa < Isa::kAvx512Vnni) continue;
    pagedllm::llama_cpu::set_isa_cap(isa);
    for (const WeightsRef& w : {bf16.ref(), int8.ref()}) {
      if (w.dtype == PLLM_DTYPE_BF16 && isa < Isa::kAvx512Bf16) continue;
      for (const bool accumulate : {false, true}) {
        std::vector<float> whole = prior;
        linear(one, a.data(), k, m, w, n, k, whole.data(), n, accumulate);
        struct Rows {
          int64_t first, count;
        };
        for (const Rows rows : {Rows{0, 17}, Rows{5, 33}, Rows{30, 40}, Rows{53, 17}, Rows{1, 64}}) {
          for (ThreadPool* pool : {&one, &two}) {
            INFO(pagedllm::plugins::dtype_name(w.dtype) << " rows " << rows.first << ".." << rows.first + rows.count - 1
                                                        << " accumulate " << accumulate << ", " << pool->size()
                                                        << " threads, " << pagedllm::llama_cpu::isa_name(isa));
            std::vector<float> part(prior.begin() + rows.first * n, prior.begin() + (rows.first + rows.count) * n);
            linear(*pool, a.data() + rows.first * k, k, rows.count, w, n, k, part.data(), n, accumulate);
            CHECK(std::memcmp(part.data(), whole.data() + rows.first * n, part.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("llama_cpu: PAGEDLLM_CPU_ISA names", "[llama_cpu]") {
  using pagedllm::llama_cpu::parse_isa;
  CHECK(parse_isa("scalar") == Isa::kScalar);
  CHECK(parse_isa("avx2") == Isa::kAvx2);
  CHECK(parse_isa("avx512") == Isa::kAvx512);
  CHECK(parse_isa("avx512vnni") == Isa::kAvx512Vnni);
  CHECK(parse_isa("avx512bf16") == Isa::kAvx512Bf16);
  CHECK_FALSE(parse_isa("avx512f").has_value());
  IsaCapGuard guard;
  pagedllm::llama_cpu::set_isa_cap(Isa::kScalar);
  CHECK(pagedllm::llama_cpu::active_isa() == Isa::kScalar);
  pagedllm::llama_cpu::set_isa_cap(std::nullopt);
  CHECK(pagedllm::llama_cpu::active_isa() ==
        std::min(pagedllm::llama_cpu::detected_isa(), pagedllm::llama_cpu::kDefaultCap));
}

// The forward's scratch: aligned, kept while it is large enough, grown by half again (so that a
// prompt a token longer than any before does not allocate anew), and from 2 MiB a mapping starting
// on a 2 MiB boundary (what a huge page needs), which holds what is written to it at every byte.
// Under ASan (Buffer::kExact) exactly what was reserved instead, on the heap.
TEST_CASE("llama_cpu: Buffer alignment and growth", "[llama_cpu]") {
  using pagedllm::llama_cpu::Buffer;
  Buffer small;
  float* first = small.reserve(1000);
  CHECK(reinterpret_cast<std::uintptr_t>(first) % 64 == 0);
  CHECK(small.reserve(10) == first);
  CHECK(small.reserve(1000) == first);
  float* grown = small.reserve(1001);
  CHECK(reinterpret_cast<std::uintptr_t>(grown) % 64 == 0);
  if (!Buffer::kExact) CHECK(small.reserve(1500) == grown);  // the growth made room for half again

  Buffer large;
  const std::size_t count = Buffer::kHugePageBytes / sizeof(float) * 3 + 5;
  float* data = large.reserve(count);
  CHECK(reinterpret_cast<std::uintptr_t>(data) % (Buffer::kExact ? 64 : Buffer::kHugePageBytes) == 0);
  for (std::size_t i = 0; i < count; ++i) data[i] = float(i % 4099);
  auto* bytes = large.reserve_of<std::uint8_t>(count * sizeof(float));
  CHECK(static_cast<void*>(bytes) == static_cast<void*>(data));
  bool intact = true;
  for (std::size_t i = 0; i < count; ++i) intact = intact && data[i] == float(i % 4099);
  CHECK(intact);
  // Rounded up to whole huge pages: up to 4 of them hold 4 * 2 MiB without growing.
  if (!Buffer::kExact) CHECK(large.reserve(Buffer::kHugePageBytes / sizeof(float) * 4) == data);
}
