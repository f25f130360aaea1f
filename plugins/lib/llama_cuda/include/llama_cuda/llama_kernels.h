#pragma once
// The element-wise and row-wise CUDA kernels of the Llama forward (the GEMMs
// are cuBLAS, attention is the backend's). Every kernel computes in f32
// whatever the storage dtype `dtype` (F32, F16 or BF16) of its activations,
// indexes with int64, and is enqueued on `stream` without synchronising.
// Launch failures (a bad configuration) throw pllm::Error at the call.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::llama_cuda {

// out[r * out_stride + i] = src[s * src_stride + i] for i < width, s = index ?
// index[r] : r, over `rows` rows: the embedding gather (src = the embedding,
// index = the token ids), and any copy of rows into or out of a wider matrix.
void gather_rows(pllm_dtype dtype, const void* src, int64_t src_stride, const int32_t* index, int64_t rows,
                 int64_t width, void* out, int64_t out_stride, cudaStream_t stream);

// out[r * dim + i] = a[s * dim + i] + b[s * b_stride + i], rounded to dtype,
// s = index ? index[r] : r, over `rows` rows of `dim` elements. b_stride 0
// adds one row (a bias) to every row; `out` may be `a` when index is null.
void add_rows(pllm_dtype dtype, const void* a, const void* b, int64_t b_stride, const int32_t* index, int64_t rows,
              int64_t dim, void* out, cudaStream_t stream);

// dst[index[r] * dim + i] += weights[r] * src[r * dim + i] (in f32, rounded to
// dtype) for `rows` rows of `dim` elements, the index never repeating within a
// call: a mixture-of-experts layer's expert outputs into the layer's sum.
void add_weighted_rows(pllm_dtype dtype, const void* src, int64_t rows, int64_t dim, const int32_t* index,
                       const float* weights, void* dst, cudaStream_t stream);

// The residual add fused with RMSNorm. For each of `rows` output rows r, with
// source row s = row_index ? row_index[r] : r:
//   v      = residual[s] + delta[s]   (delta may be null), rounded to dtype
//   out[r] = v / sqrt(mean(v^2) + eps) * (weight + weight_offset)   (1: Gemma's (1 + w))
// Without row_index, v is also written back to residual[s] (the stream moves
// on); with it, residual is only read (rows may repeat), which is how the
// final norm gathers the logits / hidden rows. `out` is `out_dtype`: dtype, or
// F32 for rows handed to the host.
void add_rms_norm(pllm_dtype dtype, void* residual, const void* delta, const int32_t* row_index, const void* weight,
                  float eps, int64_t rows, int64_t dim, pllm_dtype out_dtype, void* out, cudaStream_t stream,
                  float weight_offset = 0.0f);

// In each of `rows` rows (row_stride elements apart), the `heads` heads of
// head_dim elements from head `first_head` on normalised in place:
// x / sqrt(mean(x^2) + eps) * (weight + weight_offset), one [head_dim] weight for every head
// (Qwen3's and Gemma 3's q_norm / k_norm).
void head_rms_norm(pllm_dtype dtype, void* data, int64_t rows, int64_t row_stride, int64_t first_head, int64_t heads,
                   int64_t head_dim, const void* weight, float eps, cudaStream_t stream, float weight_offset = 0.0f);

// cos[t * half + i], sin[...] of positions[t] * inv_freq[i] (the angle in
// f64, as the CPU forward computes it: f32 would lose ~1e-3 rad at position
// 10^5), for `rows` rows.
void rope_tables(const int32_t* positions, const double* inv_freq, int64_t rows, int64_t half, float* cos, float* sin,
                 cudaStream_t stream);

// Rotates the first `num_heads` heads of `head_dim` elements of each of
// `rows` rows (row_stride elements apart) in place: (x_i, x_{i+d/2}) by row
// t's angle i, HF's rotate_half convention.
void apply_rope(pllm_dtype dtype, void* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin, cudaStream_t stream);

// out[t, i] = act(gate_up[t, i]) * gate_up[t, inter + i] over `rows` rows (act: silu, or GELU's tanh
// approximation), in f32 rounded to dtype.
void gated_activation(pllm_dtype dtype, llama::Activation activation, const void* gate_up, int64_t rows,
                      int64_t inter, void* out, cudaStream_t stream);

// data[i] *= factor for `count` elements, the factor first rounded to dtype (Gemma's embedding scale).
void scale(pllm_dtype dtype, void* data, int64_t count, double factor, cudaStream_t stream);

// data[i] = tanh(data[i] / cap) * cap for `count` f32 elements (Gemma's final_logit_softcapping).
void softcap(float* data, int64_t count, float cap, cudaStream_t stream);

// dst[i] = src[i] converted to `dtype`, for `count` elements (weight upload).
void convert_from_f32(const float* src, int64_t count, pllm_dtype dtype, void* dst, cudaStream_t stream);

// Rows of a reduced vocabulary's f32 logits spread into full rows on the
// device (spec_eagle's draft vocabulary): out[r, ids[j]] = in[r, j] for j <
// width, every other entry of out's `vocab`-wide rows -inf.
void scatter_columns(const float* in, int64_t rows, int64_t width, const int32_t* ids, int64_t vocab, float* out,
                     cudaStream_t stream);

}  // namespace pagedllm::llama_cuda
