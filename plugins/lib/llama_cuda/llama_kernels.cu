#include "llama_cuda/llama_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_common/cuda_check.h"
#include "cuda_common/dtype_convert.cuh"
#include "cuda_common/launch.cuh"

namespace pagedllm::llama_cuda {
namespace {

using cuda::from_float;
using cuda::to_float;

// N elements moved by one aligned load or store: 16 bytes (one LDG.128) for
// N = 16 / sizeof(T), the width every bandwidth-bound kernel here uses when
// the row length allows it.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
template <class T>
constexpr int kVec16 = 16 / int(sizeof(T));

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;

// Threads for a block that walks `items` per row: a whole number of warps,
// at most 1024, no more than there is work for.
int block_threads(int64_t items) {
  const int64_t warps = std::clamp<int64_t>((items + kWarp - 1) / kWarp, 1, kMaxThreads / kWarp);
  return int(warps * kWarp);
}

// Blocks of 256 threads for a grid-stride loop over `count` items: enough to
// fill any current GPU several times over, never more than there is work for.
constexpr int kStrideThreads = 256;
unsigned stride_blocks(int64_t count) {
  return unsigned(std::clamp<int64_t>((count + kStrideThreads - 1) / kStrideThreads, 1, int64_t(1) << 16));
}

// The sum of v over the block, valid in thread 0 (blockDim.x a multiple of 32).
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kMaxThreads / kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x) / kWarp ? warp_sums[lane] : 0.0f;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// ---- row gather and row add ---------------------------------------------------------

// A row copy in `Word`s (16, 4 or 2 bytes: whatever divides the row, both
// strides and both base addresses).
template <class Word>
__global__ void gather_rows_kernel(const Word* src, int64_t src_stride, const int32_t* index, int64_t words_per_row,
                                   Word* out, int64_t out_stride) {
  const int64_t row = index ? int64_t(index[blockIdx.x]) : int64_t(blockIdx.x);
  const Word* from = src + row * src_stride;
  Word* to = out + int64_t(blockIdx.x) * out_stride;
  for (int64_t i = threadIdx.x; i < words_per_row; i += blockDim.x) to[i] = from[i];
}

template <class Word>
void launch_gather_rows(const void* src, int64_t src_stride_bytes, const int32_t* index, int64_t rows,
                        int64_t row_bytes, void* out, int64_t out_stride_bytes, cudaStream_t stream) {
  constexpr auto word = int64_t(sizeof(Word));
  cuda::launch<gather_rows_kernel<Word>>(unsigned(rows), block_threads(row_bytes / word), 0, stream,
                                         static_cast<const Word*>(src), src_stride_bytes / word, index,
                                         row_bytes / word, static_cast<Word*>(out), out_stride_bytes / word);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

template <class T>
__global__ void add_rows_kernel(const T* a, const T* b, int64_t b_stride, const int32_t* index, int64_t rows,
                                int64_t dim, T* out) {
  const int64_t count = rows * dim;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / dim, i = idx % dim;
    const int64_t s = index ? int64_t(index[r]) : r;
    out[idx] = from_float<T>(to_float(a[s * dim + i]) + to_float(b[s * b_stride + i]));
  }
}

template <class T>
__global__ void add_weighted_rows_kernel(const T* src, int64_t rows, int64_t dim, const int32_t* index,
                                         const float* weights, T* dst) {
  const int64_t count = rows * dim;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / dim, i = idx % dim;
    T* out = dst + int64_t(index[r]) * dim + i;
    *out = from_float<T>(to_float(*out) + to_float(src[idx]) * weights[r]);
  }
}

// ---- residual add + RMSNorm -------------------------------------------------------

template <class T, class TOut, int N>
__global__ void add_rms_norm_kernel(T* residual, const T* delta, const int32_t* row_index, const T* weight, float eps,
                                    float weight_offset, int64_t dim, TOut* out) {
  using V = Vec<T, N>;
  const bool write_back = row_index == nullptr;
  const int64_t src_row = write_back ? int64_t(blockIdx.x) : int64_t(row_index[blockIdx.x]);
  V* res = reinterpret_cast<V*>(residual + src_row * dim);
  const V* del = delta ? reinterpret_cast<const V*>(delta + src_row * dim) : nullptr;
  const int64_t vecs = dim / N;

  // v = residual + delta rounded to T: the stream as the next layer sees it.
  const auto sum_row = [&](int64_t i) {
    V v = res[i];
    if (del) {
      const V d = del[i];
#pragma unroll
      for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + to_float(d.v[k]));
    }
    return v;
  };

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    const V v = sum_row(i);
    if (write_back && del) res[i] = v;
#pragma unroll
    for (int k = 0; k < N; ++k) sum_sq += to_float(v.v[k]) * to_float(v.v[k]);
  }
  __shared__ float inv_rms;
  const float total = block_sum(sum_sq);
  // Correctly rounded sqrt and division (not rsqrtf's 2 ulp): once per row.
  if (threadIdx.x == 0) inv_rms = 1.0f / sqrtf(total / float(dim) + eps);
  __syncthreads();

  const V* w = reinterpret_cast<const V*>(weight);
  auto* o = reinterpret_cast<Vec<TOut, N>*>(out + int64_t(blockIdx.x) * dim);
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    // Written back, residual already holds the sum (this thread wrote element i).
    const V v = write_back ? res[i] : sum_row(i);
    const V wi = w[i];
    Vec<TOut, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      r.v[k] = from_float<TOut>(to_float(v.v[k]) * inv_rms * (to_float(wi.v[k]) + weight_offset));
    }
    o[i] = r;
  }
}

template <class T, class TOut>
void launch_add_rms_norm(void* residual, const void* delta, const int32_t* row_index, const void* weight, float eps,
                         float weight_offset, int64_t rows, int64_t dim, void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto launch = [&]<int N>(int64_t vecs) {
    cuda::launch<add_rms_norm_kernel<T, TOut, N>>(unsigned(rows), block_threads(vecs), 0, stream,
                                                  static_cast<T*>(residual), static_cast<const T*>(delta), row_index,
                                                  static_cast<const T*>(weight), eps, weight_offset, dim,
                                                  static_cast<TOut*>(out));
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  };
  constexpr int N = kVec16<T>;
  if (dim % N == 0) {
    launch.template operator()<N>(dim / N);
  } else {
    launch.template operator()<1>(dim);
  }
}

// One block per (row, head): the head normalised in place.
template <class T>
__global__ void head_rms_norm_kernel(T* data, int64_t row_stride, int64_t first_head, int64_t heads, int64_t head_dim,
                                     const T* weight, float eps, float weight_offset) {
  const int64_t row = int64_t(blockIdx.x) / heads, head = first_head + int64_t(blockIdx.x) % heads;
  T* x = data + row * row_stride + head * head_dim;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) sum_sq += to_float(x[i]) * to_float(x[i]);
  __shared__ float inv_rms;
  const float total = block_sum(sum_sq);
  if (threadIdx.x == 0) inv_rms = 1.0f / sqrtf(total / float(head_dim) + eps);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    x[i] = from_float<T>(to_float(x[i]) * inv_rms * (to_float(weight[i]) + weight_offset));
  }
}

// ---- RoPE -------------------------------------------------------------------------

__global__ void rope_tables_kernel(const int32_t* positions, const double* inv_freq, int64_t rows, int64_t half,
                                   float* cos_out, float* sin_out) {
  const int64_t count = rows * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    double s, c;
    sincos(double(positions[idx / half]) * inv_freq[idx % half], &s, &c);
    cos_out[idx] = float(c);
    sin_out[idx] = float(s);
  }
}

// One block per row; thread j rotates pair (i, i + half) of head j / half.
template <class T>
__global__ void apply_rope_kernel(T* data, int64_t row_stride, int64_t num_heads, int64_t head_dim, const float* cos,
                                  const float* sin) {
  const int64_t row = blockIdx.x, half = head_dim / 2;
  T* x_row = data + row * row_stride;
  const float* c = cos + row * half;
  const float* s = sin + row * half;
  for (int64_t j = threadIdx.x; j < num_heads * half; j += blockDim.x) {
    const int64_t head = j / half, i = j % half;
    T* x = x_row + head * head_dim;
    const float a = to_float(x[i]), b = to_float(x[i + half]);
    x[i] = from_float<T>(a * c[i] - b * s[i]);
    x[i + half] = from_float<T>(b * c[i] + a * s[i]);
  }
}

template <class T>
void launch_apply_rope(void* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim,
                       const float* cos, const float* sin, cudaStream_t stream) {
  if (rows <= 0) return;
  cuda::launch<apply_rope_kernel<T>>(unsigned(rows), block_threads(num_heads * head_dim / 2), 0, stream,
      static_cast<T*>(data), row_stride, num_heads, head_dim, cos, sin);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

// ---- gated activations (SwiGLU, GeGLU-tanh) -----------------------------------------

struct Silu {
  __device__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};
// transformers' gelu_pytorch_tanh, in f32.
struct GeluTanh {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
};

template <class T, int N, class Act>
__global__ void gated_kernel(const T* gate_up, int64_t rows, int64_t inter, T* out) {
  using V = Vec<T, N>;
  const int64_t vecs_per_row = inter / N, count = rows * vecs_per_row;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / vecs_per_row, i = idx % vecs_per_row;
    const T* row_in = gate_up + row * 2 * inter;
    const V g = reinterpret_cast<const V*>(row_in)[i];
    const V u = reinterpret_cast<const V*>(row_in + inter)[i];
    V r;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      r.v[k] = from_float<T>(Act{}(to_float(g.v[k])) * to_float(u.v[k]));
    }
    reinterpret_cast<V*>(out + row * inter)[i] = r;
  }
}

template <class T, class Act>
void launch_gated(const void* gate_up, int64_t rows, int64_t inter, void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  constexpr int N = kVec16<T>;
  const bool vectorised = inter % N == 0;
  const int64_t count = rows * (vectorised ? inter / N : inter);
  if (vectorised) {
    cuda::launch<gated_kernel<T, N, Act>>(stride_blocks(count), kStrideThreads, 0, stream,
                                        static_cast<const T*>(gate_up), rows, inter, static_cast<T*>(out));
  } else {
    cuda::launch<gated_kernel<T, 1, Act>>(stride_blocks(count), kStrideThreads, 0, stream,
                                        static_cast<const T*>(gate_up), rows, inter, static_cast<T*>(out));
  }
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

// ---- scaling -----------------------------------------------------------------------

template <class T>
__global__ void scale_kernel(T* data, int64_t count, float factor) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    data[idx] = from_float<T>(to_float(data[idx]) * factor);
  }
}

__global__ void softcap_kernel(float* data, int64_t count, float cap) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    data[idx] = tanhf(data[idx] / cap) * cap;
  }
}

// ---- conversion -------------------------------------------------------------------

template <class T>
__global__ void convert_kernel(const float* src, int64_t count, T* dst) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    dst[idx] = from_float<T>(src[idx]);
  }
}

template <class T>
void launch_convert(const float* src, int64_t count, void* dst, cudaStream_t stream) {
  if (count <= 0) return;
  cuda::launch<convert_kernel<T>>(stride_blocks(count), kStrideThreads, 0, stream, src, count, static_cast<T*>(dst));
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

// One block per row: the row to -inf, then its `width` values to their ids.
__global__ void scatter_columns_kernel(const float* in, int64_t width, const int32_t* ids, int64_t vocab, float* out) {
  const float* from = in + int64_t(blockIdx.x) * width;
  float* to = out + int64_t(blockIdx.x) * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) to[v] = -INFINITY;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) to[ids[j]] = from[j];
}

}  // namespace

void scatter_columns(const float* in, int64_t rows, int64_t width, const int32_t* ids, int64_t vocab, float* out,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  cuda::launch<scatter_columns_kernel>(unsigned(rows), block_threads(vocab), 0, stream, in, width, ids, vocab, out);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

void gather_rows(pllm_dtype dtype, const void* src, int64_t src_stride, const int32_t* index, int64_t rows,
                 int64_t width, void* out, int64_t out_stride, cudaStream_t stream) {
  if (rows <= 0) return;
  const int64_t element = pllm_dtype_size(dtype);
  const int64_t row_bytes = width * element, src_stride_bytes = src_stride * element,
                out_stride_bytes = out_stride * element;
  const auto alignment = uint64_t(row_bytes) | uint64_t(src_stride_bytes) | uint64_t(out_stride_bytes) |
                         reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(out);
  if (alignment % 16 == 0) {
    launch_gather_rows<uint4>(src, src_stride_bytes, index, rows, row_bytes, out, out_stride_bytes, stream);
  } else if (alignment % 4 == 0) {
    launch_gather_rows<uint32_t>(src, src_stride_bytes, index, rows, row_bytes, out, out_stride_bytes, stream);
  } else {
    launch_gather_rows<uint16_t>(src, src_stride_bytes, index, rows, row_bytes, out, out_stride_bytes, stream);
  }
}

void add_rows(pllm_dtype dtype, const void* a, const void* b, int64_t b_stride, const int32_t* index, int64_t rows,
              int64_t dim, void* out, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  cuda::visit_storage_type(dtype, "llama_cuda: add_rows", [&](auto zero) {
    using T = decltype(zero);
    cuda::launch<add_rows_kernel<T>>(stride_blocks(rows * dim), kStrideThreads, 0, stream, static_cast<const T*>(a),
                                     static_cast<const T*>(b), b_stride, index, rows, dim, static_cast<T*>(out));
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  });
}

void add_weighted_rows(pllm_dtype dtype, const void* src, int64_t rows, int64_t dim, const int32_t* index,
                       const float* weights, void* dst, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  cuda::visit_storage_type(dtype, "llama_cuda: add_weighted_rows", [&](auto zero) {
    using T = decltype(zero);
    cuda::launch<add_weighted_rows_kernel<T>>(stride_blocks(rows * dim), kStrideThreads, 0, stream,
                                              static_cast<const T*>(src), rows, dim, index, weights,
                                              static_cast<T*>(dst));
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  });
}

void add_rms_norm(pllm_dtype dtype, void* residual, const void* delta, const int32_t* row_index, const void* weight,
                  float eps, int64_t rows, int64_t dim, pllm_dtype out_dtype, void* out, cudaStream_t stream,
                  float weight_offset) {
  cuda::visit_storage_type(dtype, "llama_cuda: add_rms_norm", [&](auto zero) {
    using T = decltype(zero);
    if (out_dtype == dtype) {
      launch_add_rms_norm<T, T>(residual, delta, row_index, weight, eps, weight_offset, rows, dim, out, stream);
    } else if (out_dtype == PLLM_DTYPE_F32) {
      launch_add_rms_norm<T, float>(residual, delta, row_index, weight, eps, weight_offset, rows, dim, out, stream);
    } else {
      throw pllm::Error(PLLM_ERROR_INTERNAL, "llama_cuda: add_rms_norm writes its own dtype or F32");
    }
  });
}

void head_rms_norm(pllm_dtype dtype, void* data, int64_t rows, int64_t row_stride, int64_t first_head, int64_t heads,
                   int64_t head_dim, const void* weight, float eps, cudaStream_t stream, float weight_offset) {
  if (rows <= 0 || heads <= 0) return;
  cuda::visit_storage_type(dtype, "llama_cuda: head_rms_norm", [&](auto zero) {
    using T = decltype(zero);
    cuda::launch<head_rms_norm_kernel<T>>(unsigned(rows * heads), block_threads(head_dim), 0, stream,
                                          static_cast<T*>(data), row_stride, first_head, heads, head_dim,
                                          static_cast<const T*>(weight), eps, weight_offset);
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  });
}

void rope_tables(const int32_t* positions, const double* inv_freq, int64_t rows, int64_t half, float* cos, float* sin,
                 cudaStream_t stream) {
  if (rows <= 0) return;
  cuda::launch<rope_tables_kernel>(stride_blocks(rows * half), kStrideThreads, 0, stream, positions, inv_freq, rows,
                                   half, cos, sin);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

void apply_rope(pllm_dtype dtype, void* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin, cudaStream_t stream) {
  cuda::visit_storage_type(dtype, "llama_cuda: apply_rope", [&](auto zero) {
    launch_apply_rope<decltype(zero)>(data, rows, row_stride, num_heads, head_dim, cos, sin, stream);
  });
}

void gated_activation(pllm_dtype dtype, llama::Activation activation, const void* gate_up, int64_t rows,
                      int64_t inter, void* out, cudaStream_t stream) {
  cuda::visit_storage_type(dtype, "llama_cuda: gated_activation", [&](auto zero) {
    using T = decltype(zero);
    switch (activation) {
      case llama::Activation::kSilu: launch_gated<T, Silu>(gate_up, rows, inter, out, stream); return;
      case llama::Activation::kGeluTanh: launch_gated<T, GeluTanh>(gate_up, rows, inter, out, stream); return;
    }
  });
}

void scale(pllm_dtype dtype, void* data, int64_t count, double factor, cudaStream_t stream) {
  if (count <= 0) return;
  cuda::visit_storage_type(dtype, "llama_cuda: scale", [&](auto zero) {
    using T = decltype(zero);
    // The factor rounded to the dtype first, as torch multiplies a tensor by a scalar tensor of its dtype.
    const float rounded = to_float(from_float<T>(static_cast<float>(factor)));
    cuda::launch<scale_kernel<T>>(stride_blocks(count), kStrideThreads, 0, stream, static_cast<T*>(data), count,
                                  rounded);
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  });
}

void softcap(float* data, int64_t count, float cap, cudaStream_t stream) {
  if (count <= 0) return;
  cuda::launch<softcap_kernel>(stride_blocks(count), kStrideThreads, 0, stream, data, count, cap);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

void convert_from_f32(const float* src, int64_t count, pllm_dtype dtype, void* dst, cudaStream_t stream) {
  cuda::visit_storage_type(dtype, "llama_cuda: convert_from_f32",
                           [&](auto zero) { launch_convert<decltype(zero)>(src, count, dst, stream); });
}

}  // namespace pagedllm::llama_cuda
