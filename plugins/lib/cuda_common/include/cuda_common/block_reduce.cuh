#pragma once
// The block-wide reduction the plugins' kernels share:
//
//   const float block_max = cuda::block_reduce(local_max, Max{});
//
// blockDim.x must be a power of two up to 1024; every thread of the block
// passes its value, and every thread gets the result. A tree over shared
// memory in a fixed shape, so the same values give the same result on every
// run; an operator that is not associative (a floating-point sum) still
// depends on how values are spread over the threads.

#include <cstdint>

namespace pagedllm::cuda {

inline constexpr int kMaxBlockThreads = 1024;

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <class T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct Min {
  template <class T>
  __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};
struct Or {
  __device__ int operator()(int a, int b) const { return a | b; }
};

// Scratch every block_reduce of a module shares: 16 bytes per thread.
__device__ inline unsigned char* block_reduce_scratch() {
  __shared__ uint64_t scratch[kMaxBlockThreads * 2];
  return reinterpret_cast<unsigned char*>(scratch);
}

template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  static_assert(sizeof(T) <= 16, "block_reduce's scratch holds 16 bytes per thread");
  T* s = reinterpret_cast<T*>(block_reduce_scratch());
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] = op(s[threadIdx.x], s[threadIdx.x + stride]);
    __syncthreads();
  }
  const T result = s[0];
  __syncthreads();
  return result;
}

}  // namespace pagedllm::cuda
