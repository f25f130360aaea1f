// linear(): the kernels of cpu_isa.h's levels (linear_kernels.inc, compiled
// once per level under its own target), the run-time choice between them, and
// the split of a product over the pool.

#include <cblas.h>
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "pagedllm/sdk/cpp/gguf_types.hpp"
#include "common/float16_rounding.h"
#include "llama_common/gguf_dequantize.h"
#include "llama_cpu/buffer.h"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"

// GCC warns that a 64-byte vector passed by value has another ABI with and
// without AVX-512. The helpers are always inlined into the kernels, so no
// call passes one.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's _mm512_cvtph_ps starts from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagedllm::llama_cpu {
namespace {

// 16-bit weight elements, distinct types so that overloads pick the widening.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
// int8 weights (weight-only: the scales are passed next to them).
struct I8 {
  int8_t q;
};

// A row of activations quantized for GGUF block weights (weights.h
// BlockType), as llama.cpp quantizes them (quantize_row_blocks32 /
// quantize_row_blocks256 below), the same bits on every level:
//   ActBlock32   llama.cpp's Q8_0 / Q8_1, per 32 elements: d = max |x| / 127,
//                q = nearbyint(x * (1 / d)) (0 when d = 0), d kept as the f16
//                llama.cpp stores it; s = f16(d * sum q) (Q8_1's, for Q4_1)
//   ActBlock256  llama.cpp's Q8_K, per 256 elements: with x_max the element
//                of largest magnitude, q = min(127, nearbyint(x * (-127 /
//                x_max))), d = 1 / (-127 / x_max) in f32 (0 and q = 0 for an
//                all-zero block), and the sums of q per 16 elements
// The error this adds to an output is about that of rounding each activation
// to 8 bits (a relative 2^-8 of its block's largest magnitude), which is well
// within the weights' own 4-6 bit quantization (docs/architecture.md).
struct ActBlock32 {
  float d;
  float s;
  int8_t q[32];
};
struct ActBlock256 {
  float d;
  int16_t bsums[16];
  int8_t q[256];
};

// The cache blocking of the lanes GEMMs (linear_kernels.inc): chunks of `rows`
// rows (a multiple of 32), each in blocks of `cols` columns, each over depths
// of `depth` 32-bit words of k.
struct LanesBlocking {
  int64_t rows;
  int64_t cols;
  int64_t depth;
};

// One level's entry points.
struct Kernels {
  void (*dot_rows_f32)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool);
  void (*dot_rows_bf16)(const float*, int64_t, int64_t, const Bf16*, int64_t, int64_t, float*, int64_t, bool);
  void (*dot_rows_f16)(const float*, int64_t, int64_t, const F16*, int64_t, int64_t, float*, int64_t, bool);
  void (*dot_rows_i8)(const float*, int64_t, int64_t, const I8*, const float*, int64_t, int64_t, float*, int64_t,
                      bool);
  void (*dot_rows_w8a8)(const uint8_t*, int64_t, const float*, int64_t, const int8_t*, const float*, const int32_t*,
                        int64_t, int64_t, float*, int64_t, bool);
  void (*widen_bf16)(const Bf16*, int64_t, float*);
  void (*widen_f16)(const F16*, int64_t, float*);
  void (*widen_i8)(const I8*, const float*, int64_t, int64_t, float*);
  // quantize_activations_u8 (cpu_kernels.h): the same bits on every level.
  void (*quantize_rows_u8)(const float*, int64_t, int64_t, int64_t, uint8_t*, int64_t, float*);
  // bf16 weights on vdpbf16ps (null below avx512bf16): the activations
  // rounded to bf16 once per call.
  void (*round_rows_bf16)(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t);
  // The many-rows GEMMs' layout of the activations (null below avx512vnni).
  void (*interleave_rows)(const uint32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t*);
  // Past kDotRowsMaxRows rows of bf16 weights on vdpbf16ps (null below
  // avx512bf16), on the interleaved rounded rows.
  void (*gemm_bf16)(const uint32_t*, int64_t, const Bf16*, int64_t, int64_t, float*, int64_t, bool,
                    const LanesBlocking&);
  // Up to kDotRowsMaxRows rows of bf16 weights on vdpbf16ps, the activations
  // rounded by round_rows_bf16 (null below avx512bf16).
  void (*dot_rows_dp_bf16)(const uint16_t*, int64_t, int64_t, const Bf16*, int64_t, int64_t, float*, int64_t, bool);
  // W8A8 past kDotRowsMaxRows rows on vpdpbusd (null below avx512vnni:
  // dot_rows_w8a8 at any row count), on the interleaved quantized rows.
  void (*gemm_w8a8)(const uint32_t*, const float*, int64_t, const int8_t*, const float*, const int32_t*, int64_t,
                    int64_t, float*, int64_t, bool, const LanesBlocking&);
  // Up to kDotRowsMaxRows rows of GGUF block weights (block_kernels.inc), on
  // activations quantized by quantize_row_blocks32 / quantize_row_blocks256.
  void (*dot_rows_blocks)(BlockType, const void*, int64_t, const std::byte*, int64_t, int64_t, float*, int64_t,
                          bool);
};

namespace isa_scalar {
#include "linear_kernels.inc"
}  // namespace isa_scalar

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define LINEAR_ISA_F16C
namespace isa_avx2 {
#include "linear_kernels.inc"
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define LINEAR_ISA_AVX512
namespace isa_avx512 {
#include "linear_kernels.inc"
}  // namespace isa_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define LINEAR_ISA_VNNI
namespace isa_avx512vnni {
#include "linear_kernels.inc"
}  // namespace isa_avx512vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512bf16,avx512vnni,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define LINEAR_ISA_BF16
namespace isa_avx512bf16 {
#include "linear_kernels.inc"
}  // namespace isa_avx512bf16
#pragma GCC pop_options
#undef LINEAR_ISA_F16C
#undef LINEAR_ISA_AVX512
#undef LINEAR_ISA_VNNI
#undef LINEAR_ISA_BF16

const Kernels& kernels(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return isa_scalar::kKernels;
    case Isa::kAvx2: return isa_avx2::kKernels;
    case Isa::kAvx512: return isa_avx512::kKernels;
    case Isa::kAvx512Vnni: return isa_avx512vnni::kKernels;
    case Isa::kAvx512Bf16: return isa_avx512bf16::kKernels;
  }
  return isa_scalar::kKernels;
}

// One core's L2 and the (shared) L3 in bytes, as the machine reports them:
// cpu0's caches in sysfs (the kernel's reading of CPUID, as lscpu shows it),
// else sysconf, else 1 MiB and 8 MiB (then only the GEMMs' blocking is off,
// never a result). sysfs first: glibc's sysconf reported this project's Zen 4
// VM's 32 MiB L3 as 320 MiB.
struct CacheSizes {
  int64_t l2;
  int64_t l3;
};

int64_t sysfs_cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int found_level = 0;
    std::string type, size;
    if (!(level_file >> found_level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (found_level != level || type == "Instruction" || size.empty()) continue;
    const int64_t unit = size.back() == 'K' ? 1024 : size.back() == 'M' ? 1024 * 1024 : 1;
    return std::atoll(size.c_str()) * unit;
  }
  return 0;
}

const CacheSizes& cache_sizes() {
  static const CacheSizes sizes = [] {
    int64_t l2 = sysfs_cache_bytes(2), l3 = sysfs_cache_bytes(3);
    if (l2 <= 0) l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 <= 0) l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return CacheSizes{l2 > 0 ? l2 : 1024 * 1024, l3 > 0 ? l3 : 8 * 1024 * 1024};
  }();
  return sizes;
}

// The lanes GEMMs' blocking for m rows of `words` 32-bit words of k (weights
// and interleaved activations alike). Columns in blocks that fill half of L2,
// chunks of rows whose activations fill a quarter of L3 (shared, by the other
// threads' slices of the same rows too): each block of weights is read from
// memory once per chunk, each chunk of activations from L3 once per block.
// Where the activations outgrow an eighth of L3 (a prefill chunk of 256 rows
// or more at k = 8192), k is also cut into depths at which ten tiles' columns
// (120) fill half of L2: full-depth blocks there are only 24 columns wide, and
// the activations read 85 times per 2048 columns ran the product at 60-70 % of
// vdpbf16ps's peak at 2048 rows, 77-84 % with depths. Fewer rows keep all of k
// in one depth, which measured 3-4 % faster there (docs/benchmarks.md "Rows in
// the lanes").
LanesBlocking lanes_blocking(int64_t m, int64_t words) {
  constexpr int64_t kBlockRows = 32, kTileCols = 12, kBlockCols = 10 * kTileCols;
  const CacheSizes& caches = cache_sizes();
  const int64_t all = std::max<int64_t>(words, 1);
  const int64_t depth = m * all * 4 > caches.l3 / 8 ? std::clamp<int64_t>(caches.l2 / 2 / (4 * kBlockCols), 16, all)
                                                    : all;
  return {std::max<int64_t>(kBlockRows, caches.l3 / 4 / (4 * depth) / kBlockRows * kBlockRows),
          std::max<int64_t>(kTileCols, caches.l2 / 2 / (4 * depth) / kTileCols * kTileCols), depth};
}

// Past kDotRowsMaxRows rows every product that ends in OpenBLAS multiplies its
// column slice in the same SGEMM calls of at most sgemm_tile_cols(k) columns:
// f32 weights as stored, 16-bit and int8 ones widened into a tile of the
// thread's own (~1 MiB, L2-sized: the widening costs n x k conversions against
// m x n x k multiply-adds). So a 16-bit matrix gives the bits of its f32
// widening whichever SGEMM kernel OpenBLAS picks for the CPU: its AVX2/FMA
// kernels (Haswell, Zen) sum an output's products in an order that depends on
// where the call's columns start and end, which a single call over the slice
// and calls over its tiles would cut differently.
int64_t sgemm_tile_cols(int64_t k) { return std::max<int64_t>(64, ((int64_t(1) << 18) / k + 15) / 16 * 16); }

// out[:, j..j+cols) for each tile, from the f32 [cols, k] rows tile_weights(j, cols) returns.
template <class TileWeights>
void sgemm_tiles(const float* a, int64_t lda, int64_t m, int64_t n, int64_t k, float* out, int64_t ldc,
                 bool accumulate, TileWeights&& tile_weights) {
  const int64_t tile = sgemm_tile_cols(k);
  for (int64_t j = 0; j < n; j += tile) {
    const int64_t cols = std::min(tile, n - j);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(cols), int(k), 1.0f, a, int(lda),
                tile_weights(j, cols), int(k), accumulate ? 1.0f : 0.0f, out + j, int(ldc));
  }
}

// More than kDotRowsMaxRows rows of 16-bit weights: SGEMM over tiles widened to f32.
template <class W>
void gemm_widened(void (*widen)(const W*, int64_t, float*), const float* a, int64_t lda, int64_t m, const W* w,
                  int64_t n, int64_t k, float* out, int64_t ldc, bool accumulate) {
  thread_local Buffer tile_buf;
  float* tile_f32 = tile_buf.reserve(std::size_t(std::min(sgemm_tile_cols(k), n) * k));
  sgemm_tiles(a, lda, m, n, k, out, ldc, accumulate, [&](int64_t j, int64_t cols) {
    widen(w + j * k, cols * k, tile_f32);
    return tile_f32;
  });
}

// More than kDotRowsMaxRows rows of int8 weights (weight-only): SGEMM over
// tiles dequantized to f32.
void gemm_dequantized(const Kernels& kern, const float* a, int64_t lda, int64_t m, WeightsRef w, int64_t n, int64_t k,
                      float* out, int64_t ldc, bool accumulate) {
  thread_local Buffer tile_buf;
  float* tile_f32 = tile_buf.reserve(std::size_t(std::min(sgemm_tile_cols(k), n) * k));
  const auto* q = static_cast<const I8*>(w.data);
  sgemm_tiles(a, lda, m, n, k, out, ldc, accumulate, [&](int64_t j, int64_t cols) {
    kern.widen_i8(q + j * k, w.scales + j, cols, k, tile_f32);
    return tile_f32;
  });
}

// The activations of a W8A8 product, quantized once per linear() call; past
// kDotRowsMaxRows rows (on avx512vnni) also interleaved for gemm_w8a8.
struct QuantizedRows {
  const uint8_t* data;
  int64_t ldq;
  const float* scales;
  const uint32_t* interleaved;
};

// The activations of a product on vdpbf16ps (Bf16Compute::kVdpbf16ps, any
// row count), rounded to bf16 once per linear() call (data null when the
// product does not use it); past kDotRowsMaxRows rows interleaved instead.
struct Bf16Rows {
  const uint16_t* data;
  int64_t ldr;
  const uint32_t* interleaved;
};

// One column slice [n0, n0 + cols) of linear().
void linear_slice(const Kernels& kern, const float* a, int64_t lda, int64_t m, const QuantizedRows& qa,
                  const Bf16Rows& ra, WeightsRef w, int64_t n0, int64_t cols, int64_t k, float* out, int64_t ldc,
                  bool accumulate) {
  const WeightsRef slice = w.rows_from(n0, k);
  const void* ws = slice.data;
  float* o = out + n0;
  const bool few = m <= kDotRowsMaxRows;
  switch (w.dtype) {
    case PLLM_DTYPE_F32:
      if (few) {
        kern.dot_rows_f32(a, lda, m, static_cast<const float*>(ws), cols, k, o, ldc, accumulate);
      } else {
        const auto* wf = static_cast<const float*>(ws);
        sgemm_tiles(a, lda, m, cols, k, o, ldc, accumulate, [&](int64_t j, int64_t) { return wf + j * k; });
      }
      return;
    case PLLM_DTYPE_BF16:
      if (few && ra.data) {
        kern.dot_rows_dp_bf16(ra.data, ra.ldr, m, static_cast<const Bf16*>(ws), cols, k, o, ldc, accumulate);
      } else if (few) {
        kern.dot_rows_bf16(a, lda, m, static_cast<const Bf16*>(ws), cols, k, o, ldc, accumulate);
      } else if (ra.interleaved) {
        kern.gemm_bf16(ra.interleaved, m, static_cast<const Bf16*>(ws), cols, k, o, ldc, accumulate,
                       lanes_blocking(m, (k + 1) / 2));
      } else {
        gemm_widened(kern.widen_bf16, a, lda, m, static_cast<const Bf16*>(ws), cols, k, o, ldc, accumulate);
      }
      return;
    case PLLM_DTYPE_F16:
      if (few) {
        kern.dot_rows_f16(a, lda, m, static_cast<const F16*>(ws), cols, k, o, ldc, accumulate);
      } else {
        gemm_widened(kern.widen_f16, a, lda, m, static_cast<const F16*>(ws), cols, k, o, ldc, accumulate);
      }
      return;
    case PLLM_DTYPE_I8:
      if (w.int8_compute == Int8Compute::kW8A8 && qa.interleaved) {
        kern.gemm_w8a8(qa.interleaved, qa.scales, m, static_cast<const int8_t*>(ws), slice.scales, slice.row_sums,
                       cols, k, o, ldc, accumulate, lanes_blocking(m, (k + 3) / 4));
      } else if (w.int8_compute == Int8Compute::kW8A8) {
        kern.dot_rows_w8a8(qa.data, qa.ldq, qa.scales, m, static_cast<const int8_t*>(ws), slice.scales,
                           slice.row_sums, cols, k, o, ldc, accumulate);
      } else if (few) {
        kern.dot_rows_i8(a, lda, m, static_cast<const I8*>(ws), slice.scales, cols, k, o, ldc, accumulate);
      } else {
        gemm_dequantized(kern, a, lda, m, slice, cols, k, o, ldc, accumulate);
      }
      return;
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
      break;
  }
  throw pllm::Error(PLLM_ERROR_INTERNAL, "llama_cpu: linear() on weights of dtype " + std::to_string(int(w.dtype)));
}

// `m` rows of `words` 32-bit words, ld_words apart, in the lanes GEMMs' layout
// (interleave_rows) in a buffer of the calling thread's, by blocks of rows over
// the pool.
const uint32_t* interleave(ThreadPool& pool, const Kernels& kern, const void* rows, int64_t ld_words, int64_t m,
                           int64_t words) {
  constexpr int64_t kBlockRows = 32;
  thread_local Buffer buffer;
  const int64_t blocks = (m + kBlockRows - 1) / kBlockRows;
  auto* dst = reinterpret_cast<uint32_t*>(buffer.reserve(std::size_t(blocks * kBlockRows * words)));
  const auto* src = static_cast<const uint32_t*>(rows);
  parallel_rows(pool, blocks, kBlockRows * words, [&](int64_t begin, int64_t end) {
    kern.interleave_rows(src, ld_words, m, words, begin, end, dst);
  });
  return dst;
}

float f16_rounded(float x) { return pllm::f16_to_f32(plugins::f32_to_f16(x)); }

// Row `a` of k floats as ActBlock32s (k a multiple of 32).
void quantize_row_blocks32(const float* a, int64_t k, ActBlock32* out) {
  for (int64_t b = 0; b < k / 32; ++b, a += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(a[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].q[i] = int8_t(std::nearbyint(a[i] * id));
      sum += out[b].q[i];
    }
    out[b].d = f16_rounded(d);
    out[b].s = f16_rounded(d * float(sum));
  }
}

// Row `a` of k floats as ActBlock256s (k a multiple of 256).
void quantize_row_blocks256(const float* a, int64_t k, ActBlock256* out) {
  for (int64_t b = 0; b < k / 256; ++b, a += 256) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i) {
      if (std::abs(a[i]) > amax) {
        amax = std::abs(a[i]);
        max = a[i];
      }
    }
    ActBlock256& o = out[b];
    if (amax == 0.0f) {
      o = ActBlock256{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < 256; ++i) o.q[i] = int8_t(std::min(127.0f, std::nearbyint(iscale * a[i])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += o.q[16 * g + i];
      o.bsums[g] = int16_t(sum);
    }
    o.d = 1.0f / iscale;
  }
}

// Bytes of one row of k activations quantized for `type`.
int64_t block_row_bytes(BlockType type, int64_t k) {
  return block_format(type).elems == 32 ? k / 32 * int64_t(sizeof(ActBlock32))
                                        : k / 256 * int64_t(sizeof(ActBlock256));
}

// More than kDotRowsMaxRows rows of GGUF block weights: SGEMM over tiles of
// the slice dequantized to f32 (ggml's dequantization, llama_common/gguf_dequantize.h), f32
// activations. At prefill sizes the f32 SGEMM outruns the integer block
// kernels (which unpack every block once per 4 rows) by about 2x, and the
// dequantization (n x k elements) costs little against its m x n x k FMAs.
void gemm_blocks_dequantized(const float* a, int64_t lda, int64_t m, WeightsRef w, int64_t n, int64_t k, float* out,
                             int64_t ldc, bool accumulate) {
  thread_local Buffer tile_buf;
  float* tile_f32 = tile_buf.reserve(std::size_t(std::min(sgemm_tile_cols(k), n) * k));
  sgemm_tiles(a, lda, m, n, k, out, ldc, accumulate, [&](int64_t j, int64_t cols) {
    llama::dequantize_gguf(block_format(w.blocks).ggml_type, w.rows_from(j, k).data, tile_f32, cols * k);
    return tile_f32;
  });
}

// linear() on GGUF block weights. Up to kDotRowsMaxRows rows: the activations
// quantized once per call, then column slices on the block kernels, each
// weight row read once for all rows (a row's result the same bits in any such
// batch). Past that: one slice per thread on gemm_blocks_dequantized.
void linear_blocks(ThreadPool& pool, const Kernels& kern, const float* a, int64_t lda, int64_t m, WeightsRef w,
                   int64_t n, int64_t k, float* out, int64_t ldc, bool accumulate) {
  const BlockFormat& format = block_format(w.blocks);
  if (k % format.elems != 0) {
    throw pllm::Error(PLLM_ERROR_INTERNAL, std::string("llama_cpu: linear() on ") + format.name +
                                               " blocks of width " + std::to_string(k) + ", not a multiple of " +
                                               std::to_string(format.elems));
  }
  constexpr int64_t kInlineMacs = int64_t(1) << 17;
  const int64_t threads = pool.size();
  const bool few = m <= kDotRowsMaxRows;
  const int64_t target = threads == 1 || m * n * k < kInlineMacs ? 1 : few ? 2 * threads : threads;
  const int64_t slice = std::max<int64_t>(16, ((n + target - 1) / target + 15) / 16 * 16);
  const int64_t slices = (n + slice - 1) / slice;
  if (!few) {
    pool.parallel_for(slices, [&](int64_t s, int) {
      const int64_t n0 = s * slice;
      gemm_blocks_dequantized(a, lda, m, w.rows_from(n0, k), std::min(slice, n - n0), k, out + n0, ldc, accumulate);
    });
    return;
  }
  const int64_t act_bytes = block_row_bytes(w.blocks, k);
  thread_local Buffer quantized;
  std::byte* act = quantized.reserve_of<std::byte>(std::size_t(m * act_bytes));
  for (int64_t r = 0; r < m; ++r) {
    if (format.elems == 32) {
      quantize_row_blocks32(a + r * lda, k, reinterpret_cast<ActBlock32*>(act + r * act_bytes));
    } else {
      quantize_row_blocks256(a + r * lda, k, reinterpret_cast<ActBlock256*>(act + r * act_bytes));
    }
  }
  const int64_t w_row_bytes = k / format.elems * format.bytes;
  const auto* weights = static_cast<const std::byte*>(w.data);
  pool.parallel_for(slices, [&](int64_t s, int) {
    const int64_t n0 = s * slice;
    kern.dot_rows_blocks(w.blocks, act, m, weights + n0 * w_row_bytes, std::min(slice, n - n0), k, out + n0, ldc,
                         accumulate);
  });
}

}  // namespace

void quantize_activations_u8(const float* a, int64_t lda, int64_t m, int64_t k, uint8_t* q, int64_t ldq,
                             float* scales) {
  kernels(active_isa()).quantize_rows_u8(a, lda, m, k, q, ldq, scales);
}

void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, WeightsRef w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const Kernels& kern = kernels(active_isa());
  if (w.blocks != BlockType::kNone) return linear_blocks(pool, kern, a, lda, m, w, n, k, out, ldc, accumulate);
  const bool w8a8 = w.dtype == PLLM_DTYPE_I8 && w.int8_compute == Int8Compute::kW8A8;
  // Past kDotRowsMaxRows rows the lanes GEMMs take the activations interleaved.
  const bool lanes_gemm = m > kDotRowsMaxRows && kern.interleave_rows;
  QuantizedRows qa{nullptr, 0, nullptr, nullptr};
  if (w8a8) {
    if (k > kW8A8MaxK) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "llama_cpu: W8A8 product of width " + std::to_string(k) +
                                                    " (at most " + std::to_string(kW8A8MaxK) + ")");
    }
    thread_local Buffer q, scales;
    const int64_t ldq = (k + 63) / 64 * 64;
    // Past kDotRowsMaxRows rows over the pool's threads (at prefill sizes a few
    // % of the product: serial, it would idle the others; a decode step's rows
    // stay on this thread, a wake-up costs more), through pointers: a
    // thread_local named in the lambda would be the running thread's own.
    uint8_t* q_data = q.reserve_of<uint8_t>(std::size_t(m * ldq));
    float* scale_data = scales.reserve(std::size_t(m));
    parallel_rows(pool, m, m > kDotRowsMaxRows ? 4 * k : 0, [&](int64_t begin, int64_t end) {
      kern.quantize_rows_u8(a + begin * lda, lda, end - begin, k, q_data + begin * ldq, ldq, scale_data + begin);
    });
    qa = {q_data, ldq, scale_data, nullptr};
    if (lanes_gemm) qa.interleaved = interleave(pool, kern, q_data, ldq / 4, m, (k + 3) / 4);
  }
  Bf16Rows ra{nullptr, 0, nullptr};
  if (w.dtype == PLLM_DTYPE_BF16 && w.bf16_compute == Bf16Compute::kVdpbf16ps && kern.round_rows_bf16) {
    thread_local Buffer rounded;
    const int64_t ldr = (k + 1) / 2 * 2;
    uint16_t* rounded_data = rounded.reserve_of<uint16_t>(std::size_t(m * ldr));  // (over the pool past kDotRowsMaxRows rows, a pointer: as above)
    parallel_rows(pool, m, m > kDotRowsMaxRows ? 2 * k : 0, [&](int64_t begin, int64_t end) {
      kern.round_rows_bf16(a + begin * lda, lda, end - begin, k, rounded_data + begin * ldr, ldr);
    });
    ra = {rounded_data, ldr, nullptr};
    if (lanes_gemm) ra.interleaved = interleave(pool, kern, rounded_data, ldr / 2, m, ldr / 2);
  }
  // Column slices, 16-column multiples. Few rows (decode): the GEMM streams w
  // and each slice costs the same wherever it is cut, so two slices per thread
  // balance a thread slowed by a neighbour. Many rows (prefill): every slice
  // re-packs all of `a`, so one wide slice per thread. Tiny products run on
  // the calling thread: waking the pool costs more than they do.
  constexpr int64_t kInlineMacs = int64_t(1) << 17;
  const int64_t threads = pool.size();
  // W8A8 and the vdpbf16ps kernels never re-pack the activations, but past
  // kDotRowsMaxRows (the lanes GEMMs) each slice reads all of them from L3 once
  // per block of its columns and ends in a narrower tile: one slice per thread
  // there (a served prefill of 512 tokens 1.5-2.3 % faster than with two).
  const bool own_gemm = w8a8 || ra.data;
  int64_t target = threads;
  if (threads == 1 || m * n * k < kInlineMacs) {
    target = 1;
  } else if (!lanes_gemm && (m <= kDotRowsMaxRows || own_gemm)) {
    target = 2 * threads;
  }
  int64_t slice = (n + target - 1) / target;
  slice = std::max<int64_t>(64, (slice + 15) / 16 * 16);
  const int64_t slices = (n + slice - 1) / slice;
  pool.parallel_for(slices, [&](int64_t s, int) {
    const int64_t n0 = s * slice;
    linear_slice(kern, a, lda, m, qa, ra, w, n0, std::min(slice, n - n0), k, out, ldc, accumulate);
  });
}

void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate) {
  linear(pool, a, lda, m, WeightsRef{w, PLLM_DTYPE_F32}, n, k, out, ldc, accumulate);
}

void use_single_threaded_blas() { openblas_set_num_threads(1); }

}  // namespace pagedllm::llama_cpu
