#pragma once
// pllm_tensor views of memory a Llama forward owns, on either device.

#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"

namespace pagedllm::llama {

// A row-major `dtype` tensor of `shape` over `data` on `device`.
inline pllm_tensor tensor_view(void* data, pllm_dtype dtype, pllm_device device, const std::vector<int64_t>& shape) {
  pllm_tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[std::size_t(i)];
    t.strides[i] = stride;
    stride *= shape[std::size_t(i)];
  }
  return t;
}

// A [tokens, heads, head_dim] view into rows `row_stride` elements apart: the
// query/key/value/output arguments of an attention backend's run().
inline pllm_tensor heads_view(void* data, pllm_dtype dtype, pllm_device device, int64_t tokens, int64_t heads,
                              int64_t head_dim, int64_t row_stride) {
  pllm_tensor t = tensor_view(data, dtype, device, {tokens, heads, head_dim});
  t.strides[0] = row_stride;
  return t;
}

}  // namespace pagedllm::llama
