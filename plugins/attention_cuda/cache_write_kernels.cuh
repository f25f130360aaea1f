#pragma once
// Writing the new tokens' K/V into the paged cache by slot mapping (launched by
// cache_write.cu; also compiled as host code by
// tests/plugins/attention_cuda/kernel_emulation_test.cpp).

#include <cstdint>

#include "dtype_traits.cuh"
#include "kernels.h"

namespace pagedllm::attention_cuda::device {

constexpr int kWriteThreads = 256;

// grid.x = token, grid.y = 0 for K, 1 for V. One CTA copies one token's
// num_kv_heads x head_dim row: consecutive threads take consecutive elements,
// so both the (strided) source and the cache tile side are read and written
// in unit-stride runs of head_dim elements.
template <class T>
__global__ void __launch_bounds__(kWriteThreads)
    write_kv_kernel(LayerCache cache, const int64_t* __restrict__ slot_mapping, DeviceRows key, DeviceRows value) {
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;  // -1: this row's K/V must not be written
  const bool is_value = blockIdx.y == 1;
  const DeviceRows& src_rows = is_value ? value : key;
  const T* src = static_cast<const T*>(src_rows.data) + int64_t(blockIdx.x) * src_rows.token_stride;
  T* dst_pool = static_cast<T*>(is_value ? cache.values : cache.keys);
  const int64_t block = slot / cache.block_size;
  const int64_t offset = slot % cache.block_size;
  const int32_t row_elems = cache.num_kv_heads * cache.head_dim;
  for (int32_t i = threadIdx.x; i < row_elems; i += kWriteThreads) {
    const int32_t head = i / cache.head_dim;
    const int32_t d = i % cache.head_dim;
    // [block, kv_head, offset, d]; int64 throughout: the pool can exceed 2^31 elements.
    const int64_t dst = ((block * cache.num_kv_heads + head) * cache.block_size + offset) * cache.head_dim + d;
    dst_pool[dst] = src[head * src_rows.head_stride + d];
  }
}

}  // namespace pagedllm::attention_cuda::device
