#pragma once
// Host f32 memory of the CPU forward passes: grow-only scratch buffers and
// pllm_tensor views of host arrays.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "pagedllm/sdk.h"
#include "llama_common/tensor_view.h"

namespace pagedllm::llama_cpu {

// A 64-byte aligned f32 buffer that only grows: forward scratch is reused
// across steps, so a steady-state step allocates nothing.
class Buffer {
 public:
  float* reserve(std::size_t count) {
    if (count > capacity_) {
      data_.reset();
      data_.reset(static_cast<float*>(::operator new[](count * sizeof(float), std::align_val_t(64))));
      capacity_ = count;
    }
    return data_.get();
  }
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t capacity_ = 0;
};

// A row-major f32 CPU tensor of `shape` over `data`.
inline pllm_tensor host_tensor(float* data, const std::vector<int64_t>& shape) {
  return llama::tensor_view(data, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, shape);
}

// A [tokens, heads, head_dim] f32 CPU view into rows `row_stride` floats apart.
inline pllm_tensor heads_view(float* data, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride) {
  return llama::heads_view(data, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, tokens, heads, head_dim, row_stride);
}

}  // namespace pagedllm::llama_cpu
