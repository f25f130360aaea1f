#pragma once
// Host buffers of f32, f16 or bf16 elements: filled from f32 (rounding to
// nearest even) and read back as f32, plus the tensor view a plugin gets.
// pagedllm-attn-bench's inputs and the attention tests' (tools/common is what
// the tools share, and the tests may use; it depends on nothing in tests/).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "common/float16_rounding.h"

namespace pagedllm::tools {

class TypedBuffer {
 public:
  TypedBuffer() = default;
  TypedBuffer(pllm_dtype dtype, std::size_t count)
      : dtype_(dtype), size_(std::size_t(pllm_dtype_size(dtype))), bytes_(count * size_) {}
  TypedBuffer(pllm_dtype dtype, const std::vector<float>& values) : TypedBuffer(dtype, values.size()) {
    for (std::size_t i = 0; i < values.size(); ++i) set(i, values[i]);
  }

  pllm_dtype dtype() const { return dtype_; }
  std::size_t size() const { return size_ ? bytes_.size() / size_ : 0; }
  std::size_t byte_size() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }

  void set(std::size_t i, float v) {
    if (dtype_ == PLLM_DTYPE_F32) {
      std::memcpy(&bytes_[i * 4], &v, 4);
    } else {
      store16(i, dtype_ == PLLM_DTYPE_F16 ? plugins::f32_to_f16(v) : plugins::f32_to_bf16(v));
    }
  }
  float get(std::size_t i) const {
    float f = 0;
    pllm::to_f32(&bytes_[i * size_], dtype_, &f, 1);
    return f;
  }
  // All elements as f32.
  std::vector<float> to_f32() const {
    std::vector<float> out(size());
    pllm::to_f32(bytes_.data(), dtype_, out.data(), int64_t(out.size()));
    return out;
  }
  void fill(float v) {
    for (std::size_t i = 0; i < size(); ++i) set(i, v);
  }

  // A contiguous [a, b, c] view in host memory.
  pllm_tensor tensor3(int64_t a, int64_t b, int64_t c) {
    pllm_tensor t{};
    t.struct_size = sizeof t;
    t.data = bytes_.data();
    t.dtype = dtype_;
    t.device = {PLLM_DEVICE_CPU, 0};
    t.ndim = 3;
    t.shape[0] = a;
    t.shape[1] = b;
    t.shape[2] = c;
    t.strides[0] = b * c;
    t.strides[1] = c;
    t.strides[2] = 1;
    return t;
  }

 private:
  void store16(std::size_t i, uint16_t h) { std::memcpy(&bytes_[i * 2], &h, 2); }

  pllm_dtype dtype_ = PLLM_DTYPE_F32;
  std::size_t size_ = 4;
  std::vector<std::byte> bytes_;
};

}  // namespace pagedllm::tools
