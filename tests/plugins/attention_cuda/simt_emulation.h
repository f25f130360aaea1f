#pragma once
// Runs CUDA kernel source as host code, for checking kernel logic where there
// is no GPU: one std::thread per CUDA thread of a block, blocks one after
// another; __syncthreads is a block barrier, __shfl_xor_sync an exchange
// through a per-warp buffer between two warp barriers. It checks indexing,
// masking, the softmax merges and the partition reduction; it says nothing
// about the hardware's memory model, timing or occupancy.
//
// Include it before the kernel headers: it defines the CUDA keywords the
// kernels use (__global__, __shared__, ...) for the host compiler.

#include <vector_types.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <barrier>
#include <bit>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace simt {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};

inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline float exchange[32][32];  // [warp][lane]

}  // namespace simt

inline thread_local simt::Dim threadIdx, blockIdx;

// The CUDA headers define these for the host compiler as annotations; here
// they become plain C++.
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time, so a function-local static is exactly one block's shared memory.
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
using std::max;
using std::min;

inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline void __syncthreads() { simt::block_barrier->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned /*mask: every lane takes part here*/, float v, int offset) {
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  simt::exchange[warp][lane] = v;
  simt::warp_barriers[warp]->arrive_and_wait();
  const float other = simt::exchange[warp][lane ^ unsigned(offset)];
  simt::warp_barriers[warp]->arrive_and_wait();
  return other;
}

namespace simt {

// Runs `kernel()` as grid.x x grid.y blocks of `threads` concurrent threads
// (threads a multiple of 32, at most 1024).
inline void launch(Dim grid, unsigned threads, const std::function<void()>& kernel) {
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::barrier<> block(threads);
      block_barrier = &block;
      warp_barriers.clear();
      for (unsigned w = 0; w < threads / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
      std::vector<std::jthread> team;
      for (unsigned t = 0; t < threads; ++t) {
        team.emplace_back([&, t] {
          threadIdx = {t, 0, 0};
          blockIdx = {bx, by, 0};
          kernel();
        });
      }
    }
  }
}

// For kernels without barriers or shuffles: the block's threads one after another.
inline void launch_sequential(Dim grid, unsigned threads, const std::function<void()>& kernel) {
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      for (unsigned t = 0; t < threads; ++t) {
        threadIdx = {t, 0, 0};
        blockIdx = {bx, by, 0};
        kernel();
      }
    }
  }
}

}  // namespace simt
