// A benchmark, not a test, of llama_cpu's linear() on one thread.
//
//   build/bin/llama_cpu_linear_bench [dtypes]   f32 vs bf16 vs f16 weights on a
//       1B model's shapes (hidden 2048, intermediate 8192) at decode (1 row) and
//       prefill (4 to 256 rows): time, weight streaming GB/s, GFLOP/s and the
//       ratio to f32, per instruction set level the CPU has (cpu_isa.h)
//   build/bin/llama_cpu_linear_bench int8       int8 weights, W8A8 (vpdpbusd) and
//       weight-only, against bf16 on the same shapes, at the best level the
//       CPU has (W8A8 also at avx512, without VNNI), then all three at avx2
//       (W8A8 on vpmaddubsw), each against bf16 of its own level
//   build/bin/llama_cpu_linear_bench gemm       many rows (16 to 512) of bf16
//       weights: the vdpbf16ps GEMM (avx512bf16, activations rounded to bf16)
//       against the exact path (avx512vnni: OpenBLAS SGEMM on tiles widened
//       to f32) and f32 weights' SGEMM, GFLOP/s and the fraction of the
//       peak of vdpbf16ps and of the f32 FMA measured on this core (a loop of
//       independent instructions, no memory)
//   build/bin/llama_cpu_linear_bench rows       few rows (1 to 16: batched decode)
//       of bf16 weights on the peers model's shapes, both Bf16Compute modes
//       at the best level: vdpbf16ps (activations rounded to bf16) against
//       the exact path (widened to f32, f32 FMA), alternated call by call;
//       GB/s, GFLOP/s, the fraction of vdpbf16ps's measured peak and the time
//       against the same mode's one-row time (1.0: the rows cost no more than
//       streaming the weights once)
//   build/bin/llama_cpu_linear_bench blocks [threads]   GGUF blocks (every held
//       type: Q8_0 ... IQ4_XS) against f16 weights on the 1B shapes at 1 to
//       64 rows, per level up to avx512vnni: time, weight GB/s, ratio to f16
//   build/bin/llama_cpu_linear_bench blocking [threads]   the many-rows GEMMs
//       (32 to 2048 rows) on the peers' shapes (K x N = 2048 x 2048, 2048 x
//       8192, 8192 x 2048) on `threads` threads (default 2): bf16 on vdpbf16ps,
//       int8 W8A8 on vpdpbusd and f16 (SGEMM on widened tiles), GFLOP/s (GOP/s
//       for int8) and the fraction of the peak of the instruction each uses:
//       the single-core peak measured as `gemm` does, times the threads; and
//       per busy core (2 m n k / the process's CPU time: what a core does while
//       it runs the product, which other processes on a loaded machine do not
//       change, against the single-core peak)
//   build/bin/llama_cpu_linear_bench step [threads]   a decode step's products
//       on the peers model (4 of Llama-3.2-1B's layers: qkv, o, gate_up, down
//       each, then lm_head; 617 MB of bf16, far past L3, so every step streams
//       its weights from memory as serving does) at 1 to 32 rows, bf16 on
//       vdpbf16ps and int8 W8A8, on `threads` threads (default 2): ms per step,
//       weight GB/s, and the time against one row and against the memory
//       floor (reading the same bytes with the same threads, measured in the
//       same run)
//   build/bin/llama_cpu_linear_bench blas       linear() against the OpenBLAS call
//       it made before it had its own kernel for few rows (sgemv for one row,
//       sgemm otherwise), embedded model and 1B shapes, 1 to 32 rows
//
// Each time is the best of several calls (40, fewer for the long ones; this
// machine is shared: the minimum is the least disturbed), and the ratios are
// measured in the same run.

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cstring>
#include <ctime>
#include <string>

#include "common/float16_rounding.h"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/weight_loader.h"

namespace {

template <class Fn>
double best_of_us(int calls, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

template <class Fn>
double best_of_40_us(Fn&& fn) {
  return best_of_us(40, fn);
}

using pagedllm::llama_cpu::Isa;
using pagedllm::llama_cpu::WeightsRef;

// Random [n x k] weights (normal, scale 0.02) in every dtype the benches compare: bf16 and f16 rounded from
// the same f32 values, and int8 quantized from them per row.
struct BenchWeights {
  std::vector<uint16_t> bf16, f16;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  WeightsRef int8(pagedllm::llama_cpu::Int8Compute compute) const {
    return {q.data(), PLLM_DTYPE_I8, scales.data(), sums.data(), compute};
  }
};
BenchWeights random_bench_weights(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  const auto count = std::size_t(n * k);
  std::vector<float> w32(count);
  BenchWeights w{std::vector<uint16_t>(count), std::vector<uint16_t>(count), std::vector<int8_t>(count),
                 std::vector<float>(std::size_t(n)), std::vector<int32_t>(std::size_t(n))};
  for (std::size_t i = 0; i < count; ++i) {
    w32[i] = normal(rng) * 0.02f;
    w.bf16[i] = pagedllm::plugins::f32_to_bf16(w32[i]);
    w.f16[i] = pagedllm::plugins::f32_to_f16(w32[i]);
  }
  for (int64_t j = 0; j < n; ++j) {
    pagedllm::llama_cpu::quantize_row_int8(w32.data() + j * k, k, w.q.data() + j * k, w.scales[std::size_t(j)],
                                           w.sums[std::size_t(j)]);
  }
  return w;
}

int int8_bench() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(1);
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"1B gate_up", 16384, 2048}, {"1B down", 2048, 8192}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  using pagedllm::llama_cpu::Int8Compute;
  const Isa best = pagedllm::llama_cpu::detected_isa();
  std::printf("linear() on bf16 and int8 weights, one thread, best of up to 40 calls (%s CPU)\n",
              pagedllm::llama_cpu::isa_name(best));
  std::printf("GB/s: weight bytes per call / time; GOP/s: 2 rows n k / time; x bf16: bf16 time / this time\n");
  std::printf("%-11s %4s %-10s %-16s %10s %7s %8s %7s\n", "shape", "rows", "isa", "weights", "us", "GB/s", "GOP/s",
              "x bf16");
  for (const Shape& s : shapes) {
    const auto count = std::size_t(s.n * s.k);
    const BenchWeights w = random_bench_weights(s.n, s.k, rng);
    std::vector<float> a(std::size_t(256 * s.k)), out(std::size_t(256 * s.n));
    for (float& x : a) x = normal(rng);
    struct Variant {
      const char* name;
      WeightsRef w;
      Isa isa;
      double bytes_per_weight;
    };
    const Variant variants[] = {
        {"bf16", {w.bf16.data(), PLLM_DTYPE_BF16}, std::min(best, Isa::kAvx512), 2.0},
        {"int8 W8A8", w.int8(Int8Compute::kW8A8), best, 1.0},
        {"int8 W8A8", w.int8(Int8Compute::kW8A8), std::min(best, Isa::kAvx512), 1.0},
        {"int8 weight-only", w.int8(Int8Compute::kWeightOnly), std::min(best, Isa::kAvx512), 1.0},
        // AVX2 (no VNNI: W8A8 on vpmaddubsw), against bf16 on the same level.
        {"bf16", {w.bf16.data(), PLLM_DTYPE_BF16}, Isa::kAvx2, 2.0},
        {"int8 W8A8", w.int8(Int8Compute::kW8A8), Isa::kAvx2, 1.0},
        {"int8 weight-only", w.int8(Int8Compute::kWeightOnly), Isa::kAvx2, 1.0},
    };
    for (const int64_t m : {1, 4, 16, 64, 256}) {
      double bf16_us = 0.0;
      for (const Variant& v : variants) {
        if (&v == &variants[2] && v.isa == variants[1].isa) continue;
        if (v.isa > best) continue;
        pagedllm::llama_cpu::set_isa_cap(v.isa);
        const double flops = 2.0 * double(m) * double(s.n) * double(s.k);
        const int calls = int(std::clamp(5e9 / flops, 2.0, 40.0));
        const double us = best_of_us(calls, [&] {
          pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, v.w, s.n, s.k, out.data(), s.n, false);
        });
        if (v.w.dtype == PLLM_DTYPE_BF16) bf16_us = us;
        std::printf("%-11s %4lld %-10s %-16s %10.1f %7.2f %8.2f %6.2fx\n", s.name, static_cast<long long>(m),
                    pagedllm::llama_cpu::isa_name(v.isa), v.name, us, double(count) * v.bytes_per_weight / us / 1e3,
                    flops / us / 1e3, bf16_us / us);
      }
    }
  }
  pagedllm::llama_cpu::set_isa_cap(std::nullopt);
  return 0;
}

// GGUF blocks (random quant bytes, f16 scales of a plausible size) against f16 weights of the same shape.
int blocks_bench(int threads) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(threads);
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"1B gate_up", 16384, 2048}, {"1B down", 2048, 8192}};
  using pagedllm::llama_cpu::BlockType;
  const BlockType types[] = {BlockType::kQ8_0, BlockType::kQ4_0,  BlockType::kQ4_1, BlockType::kQ5_0,
                             BlockType::kQ5_1, BlockType::kIQ4_NL, BlockType::kQ2_K, BlockType::kQ3_K,
                             BlockType::kQ4_K, BlockType::kQ5_K,  BlockType::kQ6_K, BlockType::kIQ4_XS};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255);
  std::printf("linear() on GGUF blocks against f16 weights, %d thread(s), best of up to 40 calls\n", threads);
  std::printf("GB/s: weight bytes per call / time; x f16: f16 time / this time (same level)\n");
  std::printf("%-11s %4s %-10s %-6s %10s %7s %7s\n", "shape", "rows", "isa", "type", "us", "GB/s", "x f16");
  for (const Shape& s : shapes) {
    const auto count = std::size_t(s.n * s.k);
    std::vector<uint16_t> f16(count);
    for (uint16_t& h : f16) h = pagedllm::plugins::f32_to_f16(normal(rng) * 0.02f);
    std::vector<std::vector<uint8_t>> blocks;
    for (const BlockType t : types) {
      const pagedllm::llama_cpu::BlockFormat& f = pagedllm::llama_cpu::block_format(t);
      std::vector<uint8_t> data(count / std::size_t(f.elems) * std::size_t(f.bytes));
      for (uint8_t& b : data) b = uint8_t(byte(rng));
      // The f16 scale's byte offset, and the min's (-1: none).
      const int scale_at = t == BlockType::kQ6_K ? 208 : t == BlockType::kQ3_K ? 108 : t == BlockType::kQ2_K ? 80 : 0;
      const int min_at = t == BlockType::kQ2_K ? 82
                         : t == BlockType::kQ4_1 || t == BlockType::kQ5_1 || t == BlockType::kQ4_K ||
                                   t == BlockType::kQ5_K
                             ? 2
                             : -1;
      for (std::size_t b = 0; b < data.size(); b += std::size_t(f.bytes)) {
        const uint16_t d = pagedllm::plugins::f32_to_f16(0.001f);
        std::memcpy(&data[b + std::size_t(scale_at)], &d, 2);
        if (min_at >= 0) std::memcpy(&data[b + std::size_t(min_at)], &d, 2);
      }
      blocks.push_back(std::move(data));
    }
    std::vector<float> a(std::size_t(64 * s.k)), out(std::size_t(64 * s.n));
    for (float& x : a) x = normal(rng);
    for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
      if (isa > pagedllm::llama_cpu::detected_isa()) continue;
      pagedllm::llama_cpu::set_isa_cap(isa);
      for (const int64_t m : {1, 4, 16, 64}) {
        const int calls = int(std::clamp(2e9 / (2.0 * double(m) * double(count)), 2.0, 40.0));
        const double f16_us = best_of_us(calls, [&] {
          pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, WeightsRef{f16.data(), PLLM_DTYPE_F16}, s.n, s.k,
                                      out.data(), s.n, false);
        });
        std::printf("%-11s %4lld %-10s %-6s %10.1f %7.2f %6.2fx\n", s.name, static_cast<long long>(m),
                    pagedllm::llama_cpu::isa_name(isa), "f16", f16_us, double(count) * 2.0 / f16_us / 1e3, 1.0);
        for (std::size_t t = 0; t < std::size(types); ++t) {
          WeightsRef w{blocks[t].data(), PLLM_DTYPE_F32};
          w.blocks = types[t];
          const double us = best_of_us(calls, [&] {
            pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, w, s.n, s.k, out.data(), s.n, false);
          });
          std::printf("%-11s %4lld %-10s %-6s %10.1f %7.2f %6.2fx\n", s.name, static_cast<long long>(m),
                      pagedllm::llama_cpu::isa_name(isa), pagedllm::llama_cpu::block_format(types[t]).name, us,
                      double(blocks[t].size()) / us / 1e3, f16_us / us);
        }
      }
    }
  }
  pagedllm::llama_cpu::set_isa_cap(std::nullopt);
  return 0;
}

int dtypes_bench() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(1);
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"1B gate_up", 16384, 2048}, {"1B down", 2048, 8192}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::printf("linear() on f32, bf16 and f16 weights, one thread, best of up to 40 calls (%s CPU)\n",
              pagedllm::llama_cpu::isa_name(pagedllm::llama_cpu::detected_isa()));
  std::printf("GB/s: weight bytes per call / time; GFLOP/s: 2 rows n k / time; x f32: f32 time / this time\n");
  std::printf("%-11s %4s %-10s %5s %10s %7s %8s %7s\n", "shape", "rows", "isa", "dtype", "us", "GB/s", "GFLOP/s",
              "x f32");
  for (const Shape& s : shapes) {
    const auto count = std::size_t(s.n * s.k);
    std::vector<float> w32(count), a(std::size_t(256 * s.k)), out(std::size_t(256 * s.n));
    std::vector<uint16_t> wbf16(count), wf16(count);
    for (std::size_t i = 0; i < count; ++i) {
      w32[i] = normal(rng) * 0.02f;
      wbf16[i] = pagedllm::plugins::f32_to_bf16(w32[i]);
      wf16[i] = pagedllm::plugins::f32_to_f16(w32[i]);
    }
    for (float& x : a) x = normal(rng);
    for (const int64_t m : {1, 4, 16, 64, 256}) {
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
        if (isa > pagedllm::llama_cpu::detected_isa()) continue;
        // The scalar level only at decode (its f16 widening is one element at
        // a time); past kDotRowsMaxRows the level only widens the SGEMM's
        // tiles, so only the best one.
        if (isa == Isa::kScalar && m > 1) continue;
        if (m > pagedllm::llama_cpu::kDotRowsMaxRows && isa != pagedllm::llama_cpu::detected_isa()) continue;
        pagedllm::llama_cpu::set_isa_cap(isa);
        double f32_us = 0.0;
        for (const pllm_dtype dtype : {PLLM_DTYPE_F32, PLLM_DTYPE_BF16, PLLM_DTYPE_F16}) {
          const WeightsRef w = dtype == PLLM_DTYPE_F32    ? WeightsRef{w32.data(), dtype}
                               : dtype == PLLM_DTYPE_BF16 ? WeightsRef{wbf16.data(), dtype}
                                                          : WeightsRef{wf16.data(), dtype};
          const double flops = 2.0 * double(m) * double(s.n) * double(s.k);
          const int calls = int(std::clamp(5e9 / flops, 2.0, 40.0));
          const double us = best_of_us(calls, [&] {
            pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, w, s.n, s.k, out.data(), s.n, false);
          });
          if (dtype == PLLM_DTYPE_F32) f32_us = us;
          const double bytes = double(count) * (dtype == PLLM_DTYPE_F32 ? 4.0 : 2.0);
          std::printf("%-11s %4lld %-10s %5s %10.1f %7.2f %8.2f %6.2fx\n", s.name, static_cast<long long>(m),
                      pagedllm::llama_cpu::isa_name(isa),
                      dtype == PLLM_DTYPE_F32 ? "f32" : dtype == PLLM_DTYPE_BF16 ? "bf16" : "f16", us,
                      bytes / us / 1e3, flops / us / 1e3, f32_us / us);
        }
      }
    }
  }
  pagedllm::llama_cpu::set_isa_cap(std::nullopt);
  return 0;
}

// (-Wpsabi: the AVX-512 vectors below never cross a call between code built
// with and without AVX-512; everything is inlined in the target region.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16,avx512vnni")
// The peak of one instruction on this core: GFLOP/s of a loop over 16
// independent register accumulators (no memory traffic), the best of 100
// short runs (the least disturbed). vdpbf16ps does 16 lanes x 2 products x 2
// flops, the f32 FMA 16 x 2. (Sixteen named variables: an array of them went
// through the stack in every iteration.)
#define PEAK_ACCUMULATORS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define PEAK_LOOP(flops_per_instruction, op)                                                                    \
  [&] {                                                                                                         \
    constexpr int64_t kIterations = 100'000;                                                                    \
    double best = 0.0;                                                                                          \
    for (int round = 0; round < 100; ++round) {                                                                 \
      PEAK_ACCUMULATORS(PEAK_DECLARE)                                                                           \
      const auto start = std::chrono::steady_clock::now();                                                      \
      for (int64_t i = 0; i < kIterations; ++i) {                                                               \
        PEAK_ACCUMULATORS(op)                                                                                   \
        asm volatile("" : "+v"(acc0), "+v"(acc1), "+v"(acc2), "+v"(acc3), "+v"(acc4), "+v"(acc5), "+v"(acc6),   \
                          "+v"(acc7));                                                                          \
        asm volatile("" : "+v"(acc8), "+v"(acc9), "+v"(acc10), "+v"(acc11), "+v"(acc12), "+v"(acc13),           \
                          "+v"(acc14), "+v"(acc15));                                                            \
      }                                                                                                         \
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();         \
      best = std::max(best, (flops_per_instruction) * 16.0 * double(kIterations) / s / 1e9);                    \
    }                                                                                                           \
    return best;                                                                                                \
  }()
#define PEAK_DECLARE(i) __m512 acc##i = _mm512_setzero_ps();
#define PEAK_DPBF16(i) acc##i = _mm512_dpbf16_ps(acc##i, x, x);
#define PEAK_FMA(i) acc##i = _mm512_fmadd_ps(x, x, acc##i);
#define PEAK_DPBUSD(i) acc##i = _mm512_castsi512_ps(_mm512_dpbusd_epi32(_mm512_castps_si512(acc##i), x, x));

double peak_dpbf16_gflops() {
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));  // bf16 pairs of 1.0
  return PEAK_LOOP(64.0, PEAK_DPBF16);
}
// vpdpbusd: 16 lanes x 4 byte products x 2 ops.
double peak_dpbusd_gops() {
  const __m512i x = _mm512_set1_epi8(1);
  return PEAK_LOOP(128.0, PEAK_DPBUSD);
}
double peak_fma_gflops() {
  const __m512 x = _mm512_set1_ps(1.0f);
  return PEAK_LOOP(32.0, PEAK_FMA);
}
#undef PEAK_ACCUMULATORS
#undef PEAK_LOOP
#undef PEAK_DECLARE
#undef PEAK_DPBF16
#undef PEAK_FMA
#undef PEAK_DPBUSD
#pragma GCC pop_options
#pragma GCC diagnostic pop

int gemm_bench() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(1);
  const Isa best = pagedllm::llama_cpu::detected_isa();
  if (best < Isa::kAvx512Bf16) {
    std::printf("this CPU has no AVX512-BF16 (best level %s): nothing to compare\n",
                pagedllm::llama_cpu::isa_name(best));
    return 0;
  }
  const double dp_peak = peak_dpbf16_gflops(), fma_peak = peak_fma_gflops();
  std::printf("peak on one core, measured: vdpbf16ps %.1f GFLOP/s, f32 FMA (zmm) %.1f GFLOP/s\n", dp_peak, fma_peak);
  std::printf("linear() past %lld rows, one thread, best of 2 to 10 calls; GFLOP/s = 2 m n k / time;\n",
              static_cast<long long>(pagedllm::llama_cpu::kDotRowsMaxRows));
  std::printf("%% peak: of vdpbf16ps for dp, of the f32 FMA for SGEMM; x old: bf16's widened SGEMM time / this time\n");
  std::printf("%-10s %4s %-5s %-22s %10s %8s %7s %7s\n", "shape", "rows", "dtype", "path", "us", "GFLOP/s", "% peak",
              "x old");
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"1B qkv", 3072, 2048}, {"1B down", 2048, 8192}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const Shape& s : shapes) {
    const auto count = std::size_t(s.n * s.k);
    std::vector<float> w32(count), a(std::size_t(512 * s.k)), out(std::size_t(512 * s.n));
    std::vector<uint16_t> wbf16(count);
    for (std::size_t i = 0; i < count; ++i) {
      w32[i] = normal(rng) * 0.02f;
      wbf16[i] = pagedllm::plugins::f32_to_bf16(w32[i]);
    }
    for (float& x : a) x = normal(rng);
    for (const int64_t m : {16, 32, 64, 128, 256, 512}) {
      const double flops = 2.0 * double(m) * double(s.n) * double(s.k);
      const int calls = int(std::clamp(3e9 / flops, 2.0, 10.0));
      struct Path {
        const char* dtype;
        const char* name;
        WeightsRef w;
        Isa isa;
      };
      const Path paths[] = {
          {"f32", "SGEMM", {w32.data(), PLLM_DTYPE_F32}, Isa::kAvx512Vnni},
          {"bf16", "widened + SGEMM (old)", {wbf16.data(), PLLM_DTYPE_BF16}, Isa::kAvx512Vnni},
          {"bf16", "vdpbf16ps", {wbf16.data(), PLLM_DTYPE_BF16}, Isa::kAvx512Bf16},
      };
      double old_us = 0.0;
      for (const Path& path : paths) {
        pagedllm::llama_cpu::set_isa_cap(path.isa);
        const double us = best_of_us(calls, [&] {
          pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, path.w, s.n, s.k, out.data(), s.n, false);
        });
        const bool dp = path.isa == Isa::kAvx512Bf16 && m > pagedllm::llama_cpu::kDotRowsMaxRows;
        if (!dp) old_us = us;
        const double gflops = flops / us / 1e3;
        std::printf("%-10s %4lld %-5s %-22s %10.1f %8.2f %6.1f%% %6.2fx\n", s.name, static_cast<long long>(m),
                    path.dtype, path.name, us, gflops, 100.0 * gflops / (dp ? dp_peak : fma_peak), old_us / us);
      }
    }
  }
  pagedllm::llama_cpu::set_isa_cap(std::nullopt);
  return 0;
}

int rows_bench() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::plugins::ThreadPool pool(1);
  const Isa best = pagedllm::llama_cpu::detected_isa();
  using pagedllm::llama_cpu::Bf16Compute;
  const double dp_peak = best >= Isa::kAvx512Bf16 ? peak_dpbf16_gflops() : 0.0;
  std::printf("bf16 weights, 1 to 16 rows, one thread, %s level; best of 5 to 40 calls, the two modes alternated\n",
              pagedllm::llama_cpu::isa_name(best));
  std::printf("peak of vdpbf16ps on one core, measured: %.1f GFLOP/s; GB/s: weight bytes / time; x exact: the exact\n"
              "path's time / this time; x 1 row: this time / the same mode's 1-row time\n",
              dp_peak);
  std::printf("%-14s %4s %-9s %10s %7s %8s %7s %7s %8s\n", "shape [n x k]", "rows", "mode", "us", "GB/s", "GFLOP/s",
              "% peak", "x exact", "x 1 row");
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  // The peers model's (Llama-3.2-1B's) products: o_proj, down_proj, and one of gate/up.
  const Shape shapes[] = {{"2048 x 2048", 2048, 2048}, {"2048 x 8192", 2048, 8192}, {"8192 x 2048", 8192, 2048}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const Shape& s : shapes) {
    const auto count = std::size_t(s.n * s.k);
    std::vector<float> a(std::size_t(16 * s.k)), out(std::size_t(16 * s.n));
    std::vector<uint16_t> wbf16(count);
    for (uint16_t& w : wbf16) w = pagedllm::plugins::f32_to_bf16(normal(rng) * 0.02f);
    for (float& x : a) x = normal(rng);
    WeightsRef modes[2] = {{wbf16.data(), PLLM_DTYPE_BF16}, {wbf16.data(), PLLM_DTYPE_BF16}};
    modes[0].bf16_compute = Bf16Compute::kExact;
    modes[1].bf16_compute = Bf16Compute::kVdpbf16ps;
    double one_row_us[2] = {0.0, 0.0};
    for (const int64_t m : {1, 2, 4, 8, 16}) {
      const double flops = 2.0 * double(m) * double(s.n) * double(s.k);
      const int calls = int(std::clamp(5e9 / flops, 5.0, 40.0));
      double us[2] = {1e30, 1e30};
      for (int call = 0; call <= calls; ++call) {
        for (int mode = 0; mode < 2; ++mode) {
          const auto start = std::chrono::steady_clock::now();
          pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, modes[mode], s.n, s.k, out.data(), s.n, false);
          const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
          if (call > 0) us[mode] = std::min(us[mode], t);  // (call 0 warms up)
        }
      }
      for (int mode = 0; mode < 2; ++mode) {
        if (m == 1) one_row_us[mode] = us[mode];
        const double gflops = flops / us[mode] / 1e3;
        std::printf("%-14s %4lld %-9s %10.1f %7.2f %8.2f %6.1f%% %6.2fx %7.2fx\n", s.name, static_cast<long long>(m),
                    mode == 0 ? "exact" : "vdpbf16ps", us[mode], double(count) * 2.0 / us[mode] / 1e3, gflops,
                    dp_peak > 0.0 ? 100.0 * gflops / dp_peak : 0.0, us[0] / us[mode], us[mode] / one_row_us[mode]);
      }
    }
  }
  return 0;
}

// The best wall and process CPU times of `calls` calls (after one to warm up), in microseconds.
struct WallAndCpu {
  double wall_us, cpu_us;
};
template <class Fn>
WallAndCpu best_wall_and_cpu_us(int calls, Fn&& fn) {
  const auto cpu_now_us = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
  };
  fn();
  WallAndCpu best{1e30, 1e30};
  for (int i = 0; i < calls; ++i) {
    const double cpu_start = cpu_now_us();
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto wall = std::chrono::steady_clock::now() - start;
    best.wall_us = std::min(best.wall_us, std::chrono::duration<double, std::micro>(wall).count());
    best.cpu_us = std::min(best.cpu_us, cpu_now_us() - cpu_start);
  }
  return best;
}

int blocking_bench(int threads) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(threads);
  const Isa best = pagedllm::llama_cpu::detected_isa();
  if (best < Isa::kAvx512Bf16) {
    std::printf("this CPU has no AVX512-BF16 (best level %s): nothing to measure\n",
                pagedllm::llama_cpu::isa_name(best));
    return 0;
  }
  const double dp_peak = peak_dpbf16_gflops(), busd_peak = peak_dpbusd_gops(), fma_peak = peak_fma_gflops();
  std::printf("peak on one core, measured: vdpbf16ps %.1f GFLOP/s, vpdpbusd %.1f GOP/s, f32 FMA (zmm) %.1f GFLOP/s\n",
              dp_peak, busd_peak, fma_peak);
  std::printf("linear() on %d threads, best of 2 to 6 calls; GFLOP/s = 2 m n k / wall time, %% peak: of the "
              "instruction's peak x %d threads;\n",
              threads, threads);
  std::printf("per core: 2 m n k / process CPU time, %% peak: of the single-core peak\n");
  std::printf("%-11s %5s %-5s %-16s %11s %8s %7s %9s %7s\n", "K x N", "rows", "dtype", "path", "wall us", "GFLOP/s",
              "% peak", "per core", "% peak");
  struct Shape {
    int64_t k, n;
  };
  const Shape shapes[] = {{2048, 2048}, {2048, 8192}, {8192, 2048}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  constexpr int64_t kMaxRows = 2048;
  for (const Shape& s : shapes) {
    const BenchWeights w = random_bench_weights(s.n, s.k, rng);
    std::vector<float> a(std::size_t(kMaxRows * s.k)), out(std::size_t(kMaxRows * s.n));
    for (float& x : a) x = normal(rng);
    struct Path {
      const char* dtype;
      const char* name;
      WeightsRef w;
      double peak;
    };
    const Path paths[] = {
        {"bf16", "vdpbf16ps", {w.bf16.data(), PLLM_DTYPE_BF16}, dp_peak},
        {"int8", "W8A8 vpdpbusd", w.int8(pagedllm::llama_cpu::Int8Compute::kW8A8), busd_peak},
        {"f16", "widened + SGEMM", {w.f16.data(), PLLM_DTYPE_F16}, fma_peak},
    };
    char shape_name[48];
    std::snprintf(shape_name, sizeof shape_name, "%lldx%lld", static_cast<long long>(s.k),
                  static_cast<long long>(s.n));
    for (const int64_t m : {32, 128, 512, 2048}) {
      const double flops = 2.0 * double(m) * double(s.n) * double(s.k);
      const int calls = int(std::clamp(4e10 / flops, 2.0, 6.0));
      for (const Path& path : paths) {
        const WallAndCpu t = best_wall_and_cpu_us(calls, [&] {
          pagedllm::llama_cpu::linear(pool, a.data(), s.k, m, path.w, s.n, s.k, out.data(), s.n, false);
        });
        const double gflops = flops / t.wall_us / 1e3, per_core = flops / t.cpu_us / 1e3;
        std::printf("%-11s %5lld %-5s %-16s %11.1f %8.2f %6.1f%% %9.2f %6.1f%%\n", shape_name,
                    static_cast<long long>(m), path.dtype, path.name, t.wall_us, gflops,
                    100.0 * gflops / (path.peak * threads), per_core, 100.0 * per_core / path.peak);
      }
    }
  }
  return 0;
}

int blas_bench() {
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

}  // namespace

// The peers model's decode step (step_bench): every linear() of 4 Llama-3.2-1B
// layers and the lm_head, weights filled with cheap pseudo-random small values
// (timing does not depend on them; the normal generator would take a minute for
// 300M weights).
struct StepMatrix {
  int64_t n, k;
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};
std::vector<StepMatrix> step_matrices() {
  std::vector<StepMatrix> ms;
  const int64_t h = 2048, inter = 8192, qkv = 2048 + 2 * 512, vocab = 32000;
  for (int layer = 0; layer < 4; ++layer) {
    for (const auto& [n, k] : {std::pair{qkv, h}, std::pair{h, h}, std::pair{2 * inter, h}, std::pair{h, inter}}) {
      ms.push_back({n, k, {}, {}, {}, {}});
    }
  }
  ms.push_back({vocab, h, {}, {}, {}, {}});
  uint64_t state = 1;
  for (StepMatrix& m : ms) {
    const auto count = std::size_t(m.n * m.k);
    m.bf16.resize(count);
    m.q.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const auto bits = uint32_t(state >> 33);
      m.bf16[i] = uint16_t(0x3c00u | (bits & 0x807fu));  // |w| in [2^-7, 2^-6)
      m.q[i] = int8_t(bits >> 16);
    }
    m.scales.assign(std::size_t(m.n), 1e-3f);
    m.sums.assign(std::size_t(m.n), 0);
    for (int64_t j = 0; j < m.n; ++j) {
      for (int64_t i = 0; i < m.k; ++i) m.sums[std::size_t(j)] += m.q[std::size_t(j * m.k + i)];
    }
  }
  return ms;
}

int step_bench(int threads) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pagedllm::llama_cpu::use_single_threaded_blas();
  pagedllm::plugins::ThreadPool pool(threads);
  const Isa best = pagedllm::llama_cpu::detected_isa();
  std::printf("a decode step's linear() calls on the peers model (4 layers + lm_head), %d threads, %s level\n", threads,
              pagedllm::llama_cpu::isa_name(best));
  const std::vector<StepMatrix> ms = step_matrices();
  double bf16_bytes = 0, int8_bytes = 0;
  int64_t widest = 0;
  for (const StepMatrix& m : ms) {
    bf16_bytes += double(m.bf16.size()) * 2;
    int8_bytes += double(m.q.size());
    widest = std::max({widest, m.n, m.k});
  }
  // The memory floor: the same bytes read by the same threads (summed as 64-bit words), best of 5.
  const auto read_ms = [&](bool int8) {
    double best_ms = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (const StepMatrix& m : ms) {
        const auto* base = int8 ? static_cast<const void*>(m.q.data()) : static_cast<const void*>(m.bf16.data());
        const int64_t bytes = int64_t(int8 ? m.q.size() : m.bf16.size() * 2);
        const int64_t parts = 4 * threads;
        pool.parallel_for(parts, [&](int64_t part, int) {
          const auto* words = static_cast<const uint64_t*>(base);
          const int64_t begin = bytes * part / parts / 8, end = bytes * (part + 1) / parts / 8;
          uint64_t sum[4] = {};
          for (int64_t i = begin; i + 4 <= end; i += 4) {
            for (int l = 0; l < 4; ++l) sum[l] += words[i + l];
          }
          volatile uint64_t sink = sum[0] + sum[1] + sum[2] + sum[3];
          (void)sink;
        });
      }
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return best_ms;
  };
  std::vector<float> a(std::size_t(32 * widest)), out(std::size_t(32 * widest));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 17) - 8) * 0.125f;
  std::printf("%-6s %4s %9s %7s %8s %9s\n", "dtype", "rows", "ms/step", "GB/s", "x 1 row", "x memory");
  for (const bool int8 : {false, true}) {
    if (int8 && best < Isa::kAvx512Vnni) continue;
    const double floor_ms = read_ms(int8);
    std::printf("%-6s %4s %9.2f %7.2f %8s %9s   (reading the weights once)\n", int8 ? "int8" : "bf16", "-", floor_ms,
                (int8 ? int8_bytes : bf16_bytes) / floor_ms / 1e6, "", "1.00x");
    double one_row_ms = 0;
    for (const int64_t rows : {1, 2, 4, 8, 16, 32}) {
      double best_ms = 1e30;
      for (int rep = 0; rep < 4; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        for (const StepMatrix& m : ms) {
          const WeightsRef w = int8 ? WeightsRef{m.q.data(), PLLM_DTYPE_I8, m.scales.data(), m.sums.data(),
                                                 pagedllm::llama_cpu::Int8Compute::kW8A8}
                                    : WeightsRef{m.bf16.data(), PLLM_DTYPE_BF16};
          pagedllm::llama_cpu::linear(pool, a.data(), m.k, rows, w, m.n, m.k, out.data(), m.n, false);
        }
        if (rep > 0) {
          best_ms = std::min(best_ms,
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
      }
      if (rows == 1) one_row_ms = best_ms;
      std::printf("%-6s %4lld %9.2f %7.2f %7.2fx %8.2fx\n", int8 ? "int8" : "bf16", static_cast<long long>(rows), best_ms,
                  (int8 ? int8_bytes : bf16_bytes) / best_ms / 1e6, best_ms / one_row_ms, best_ms / floor_ms);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "dtypes";
  if (mode == "dtypes") return dtypes_bench();
  if (mode == "blas") return blas_bench();
  if (mode == "int8") return int8_bench();
  if (mode == "gemm") return gemm_bench();
  if (mode == "rows") return rows_bench();
  if (mode == "blocking") return blocking_bench(argc > 2 ? std::max(1, std::atoi(argv[2])) : 2);
  if (mode == "step") return step_bench(argc > 2 ? std::max(1, std::atoi(argv[2])) : 2);
  if (mode == "blocks") return blocks_bench(argc > 2 ? std::max(1, std::atoi(argv[2])) : 1);
  std::fprintf(stderr,
               "usage: llama_cpu_linear_bench [dtypes|int8|gemm|rows|blocking [threads]|step [threads]|blas|"
               "blocks [threads]]\n");
  return 2;
}
