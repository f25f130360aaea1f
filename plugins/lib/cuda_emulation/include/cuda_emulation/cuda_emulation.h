#pragma once
// CUDA device code as host C++: included first (-include) by every .cu file
// the emulated build compiles with the host compiler. It turns the CUDA
// keywords into plain C++, gives threadIdx & co and the device intrinsics
// the kernels use their emulated meaning (simt.h), and leaves the types
// (dim3, float4, __half, __nv_bfloat16) to the toolkit's own headers, which
// support host compilers.
//
// Static __shared__ variables become `static thread_local`: kernels run only
// on the emulator's device thread, so each has one instance there, which the
// emulator refills with the NaN pattern before every block. Dynamic shared
// memory is pagedllm::cuda::dynamic_shared<T>() (launch.cuh), not `extern
// __shared__`.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "cuda_emulation/simt.h"

#define PAGEDLLM_CUDA_EMULATION 1

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __shared__
#undef __constant__
#undef __align__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __constant__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

// The coordinates of the thread the scheduler is running.
#define threadIdx (::pagedllm::cuda::emulation::coordinates.thread_idx)
#define blockIdx (::pagedllm::cuda::emulation::coordinates.block_idx)
#define blockDim (::pagedllm::cuda::emulation::coordinates.block_dim)
#define gridDim (::pagedllm::cuda::emulation::coordinates.grid_dim)
constexpr int warpSize = 32;

// Device code calls min/max unqualified (CUDA's overloads).
using std::max;
using std::min;

// ---- barriers and warp intrinsics ---------------------------------------------------

inline void __syncthreads(std::source_location site = std::source_location::current()) {
  ::pagedllm::cuda::emulation::sync_threads(site);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location site = std::source_location::current()) {
  (void)::pagedllm::cuda::emulation::warp_op(::pagedllm::cuda::emulation::WarpOp::kSyncWarp, mask, 0, 0, 32, site);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace pagedllm::cuda::emulation {

template <class T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, std::source_location site) {
  return from_bits<T>(warp_op(op, mask, to_bits(v), arg, width, site));
}

}  // namespace pagedllm::cuda::emulation

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32,
              std::source_location site = std::source_location::current()) {
  return ::pagedllm::cuda::emulation::shuffle(::pagedllm::cuda::emulation::WarpOp::kShflIdx, mask, v, src_lane, width,
                                              site);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 std::source_location site = std::source_location::current()) {
  return ::pagedllm::cuda::emulation::shuffle(::pagedllm::cuda::emulation::WarpOp::kShflUp, mask, v, int(delta), width,
                                              site);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                   std::source_location site = std::source_location::current()) {
  return ::pagedllm::cuda::emulation::shuffle(::pagedllm::cuda::emulation::WarpOp::kShflDown, mask, v, int(delta),
                                              width, site);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  std::source_location site = std::source_location::current()) {
  return ::pagedllm::cuda::emulation::shuffle(::pagedllm::cuda::emulation::WarpOp::kShflXor, mask, v, lane_mask, width,
                                              site);
}
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location site = std::source_location::current()) {
  return unsigned(::pagedllm::cuda::emulation::warp_op(::pagedllm::cuda::emulation::WarpOp::kBallot, mask,
                                                       predicate != 0, 0, 32, site));
}
inline int __any_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current()) {
  return int(::pagedllm::cuda::emulation::warp_op(::pagedllm::cuda::emulation::WarpOp::kAny, mask, predicate != 0, 0,
                                                  32, site));
}
inline int __all_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current()) {
  return int(::pagedllm::cuda::emulation::warp_op(::pagedllm::cuda::emulation::WarpOp::kAll, mask, predicate != 0, 0,
                                                  32, site));
}

// ---- atomics: kernels run one thread at a time between switch points, so a
// read-modify-write is atomic as written --------------------------------------------

namespace pagedllm::cuda::emulation {
// Writes update(old) to *address and returns old: the shape of every CUDA atomic.
template <class T, class Update>
T atomic_update(T* address, Update update) {
  const T old = *address;
  *address = update(old);
  return old;
}
}  // namespace pagedllm::cuda::emulation
template <class T>
T atomicAdd(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return T(old + v); });
}
template <class T>
T atomicSub(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return T(old - v); });
}
template <class T>
T atomicExch(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T) { return v; });
}
template <class T>
T atomicMax(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return std::max(old, v); });
}
template <class T>
T atomicMin(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return std::min(old, v); });
}
template <class T>
T atomicCAS(T* address, T compare, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return old == compare ? v : old; });
}
template <class T>
T atomicAnd(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return T(old & v); });
}
template <class T>
T atomicOr(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return T(old | v); });
}
template <class T>
T atomicXor(T* address, T v) {
  return ::pagedllm::cuda::emulation::atomic_update(address, [&](T old) { return T(old ^ v); });
}

// ---- the device math the kernels use beyond <cmath> ------------------------------------

inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
