#pragma once
// The dense CPU kernels of the Llama forward: linear layers (linear.cpp) on
// f32, bf16 or f16 weights with f32 activations and accumulation,
// parallelised over output columns on the plugin's own thread pool, and
// row-parallel RMSNorm and SwiGLU (cpu_kernels.cpp). Row-major.

#include <algorithm>
#include <cstdint>

#include "common/thread_pool.h"
#include "llama_cpu/weights.h"

namespace pagedllm::llama_cpu {

using plugins::ThreadPool;

// Runs fn(begin, end) over row ranges covering [0, rows) on the pool, in
// about 4 ranges per thread; inline when all rows together cost less than
// kInlineWork element operations (a wake-up of the pool costs more).
template <class Fn>
void parallel_rows(ThreadPool& pool, int64_t rows, int64_t work_per_row, Fn&& fn) {
  constexpr int64_t kInlineWork = 1 << 15;
  if (rows <= 0) return;
  const int64_t chunks = std::min<int64_t>(rows, std::max<int64_t>(1, rows * work_per_row / kInlineWork));
  const int64_t ranges = std::min<int64_t>(chunks, int64_t(pool.size()) * 4);
  if (ranges <= 1) {
    fn(int64_t(0), rows);
    return;
  }
  pool.parallel_for(ranges, [&](int64_t r, int) { fn(rows * r / ranges, rows * (r + 1) / ranges); });
}

// Up to this many rows, linear() runs its own kernel, which streams w once for
// all rows. OpenBLAS's sgemm packs its whole slice of w on every call, which
// made a 4-row product (a speculative step's verification, a batch of 4
// decodes) cost 3 to 5 times a 1-row one; past about 24 rows the packing pays.
// A row's result from that kernel is the same, bit for bit, in any batch of up
// to this many rows (every dtype, both Bf16Compute modes), so a sequence
// decodes the same logits alone or batched.
constexpr int64_t kDotRowsMaxRows = 16;

// out[m, n] = sum_k a[m, k] * w[n, k] (+ out[m, n] when `accumulate`): a
// linear layer y = x W^T on HF's [out_features, in_features] weights, in f32,
// bf16 or f16 (widened exactly; f32 accumulation). Rows of a and out are lda /
// ldc floats apart. The n output columns are split between the pool's
// threads. Up to kDotRowsMaxRows rows each slice runs the kernel above of the
// instruction set active_isa() picks (cpu_isa.h); past that, single-threaded
// OpenBLAS sgemm over column tiles of the same width for every dtype (16-bit
// weights widened to f32 first), so a 16-bit matrix gives the bits of its f32
// widening on any of OpenBLAS's kernels. Except bf16
// weights whose WeightsRef says Bf16Compute::kVdpbf16ps (the default) on
// avx512bf16: the rows of `a` are rounded to bf16 once per call, then
// multiplied on vdpbf16ps (exact products, f32 accumulation) by a few-row
// kernel that streams w once (up to kDotRowsMaxRows rows) or a GEMM with the
// rows in the vector lanes (past that: each output sums its products in order
// of k, so a row's result is also the same bits in any batch of more than
// kDotRowsMaxRows rows; the few-row kernel sums the same products in another
// order).
//
// int8 weights (weights.h), weight-only: the same, the int8 values widened to
// f32 and each output multiplied by its column's scale (past kDotRowsMaxRows:
// tiles dequantized to q * s in f32 for SGEMM). W8A8: the rows of a are
// quantized first (quantize_activations_u8), then out = (f32(sum_i q_a q_w) *
// s_a[row]) * s_w[col] with an exact integer dot product at any row count
// (vpdpbusd on avx512vnni and above, past kDotRowsMaxRows rows on the same
// lanes GEMM as bf16; plain integer loops below avx512vnni, same result); k at
// most kW8A8MaxK.
//
// GGUF blocks (weights.h BlockType): up to kDotRowsMaxRows rows the rows of a
// are quantized per block as llama.cpp does (Q8_0 / Q8_1 / Q8_K, linear.cpp),
// then each output is a sum of integer block dot products times the blocks'
// scales, in f32 (block_kernels.inc, every level; a row's result the same bits
// in any batch of up to kDotRowsMaxRows rows); past that, SGEMM over column
// tiles dequantized to f32. k must be a multiple of the block size.
void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, WeightsRef w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate);
inline constexpr int64_t kW8A8MaxK = 132104;  // k 127 128 < 2^31 (pre-quantized weights reach -128)

// The W8A8 activation quantization, per row r of k floats: s[r] = max |a| / 127
// and q[r, i] = rint(a[r, i] * (127 / max |a|)) + 128 in [1, 255] (f32
// arithmetic, round half to even; an all-zero row: s = 0, q = 128), the row
// padded with 128 (q = 0) from k to ldq bytes.
void quantize_activations_u8(const float* a, int64_t lda, int64_t m, int64_t k, uint8_t* q, int64_t ldq,
                             float* scales);

// The same on f32 weights.
void linear(ThreadPool& pool, const float* a, int64_t lda, int64_t m, const float* w, int64_t n, int64_t k, float* out,
            int64_t ldc, bool accumulate);

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (weight + weight_offset), for `rows` rows of `dim`
// floats (row strides ld_x and ld_out; out may be x). weight_offset 1: Gemma's (1 + w).
void rms_norm(ThreadPool& pool, const float* x, int64_t ld_x, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ld_out, float weight_offset = 0.0f);

// The same over heads: in each of `rows` rows (row_stride floats apart), the
// `heads` heads of head_dim floats from head `first_head` on normalised in
// place, each with the one [head_dim] weight (Qwen3's q_norm / k_norm).
void head_rms_norm(ThreadPool& pool, float* x, int64_t rows, int64_t row_stride, int64_t first_head, int64_t heads,
                   int64_t head_dim, const float* weight, float eps, float weight_offset = 0.0f);

// out[t, i] += bias[i] for `rows` rows of n floats (row stride ld_out).
void add_bias(ThreadPool& pool, float* out, int64_t ld_out, int64_t rows, int64_t n, const float* bias);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]: the SwiGLU of a
// fused [gate | up] projection, `rows` rows of 2 * inter floats.
void swiglu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out);

// The same with GELU's tanh approximation for silu (Gemma's GeGLU):
// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, inter + i].
void gelu_tanh_glu(ThreadPool& pool, const float* gate_up, int64_t rows, int64_t inter, float* out);

// x = tanh(x / cap) * cap over `rows` rows of n floats (Gemma's final_logit_softcapping).
void softcap(ThreadPool& pool, float* x, int64_t rows, int64_t n, float cap);

// Makes OpenBLAS single-threaded: linear() parallelises over its own pool,
// and OpenBLAS threads on top would oversubscribe the cores. Process-wide.
void use_single_threaded_blas();

}  // namespace pagedllm::llama_cpu
