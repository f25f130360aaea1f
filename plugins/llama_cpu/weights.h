#pragma once
// Weight matrices of the CPU forward in their compute dtype: f32, bf16 or f16
// (16-bit patterns). linear() reads bf16/f16 weights directly, widening them
// exactly to f32 in registers, so a 16-bit model streams half the bytes of
// its f32 widening per token. Norm weights are always f32.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"

namespace pagedllm::llama_cpu {

inline std::size_t weight_dtype_size(pllm_dtype dtype) { return dtype == PLLM_DTYPE_F32 ? 4 : 2; }

// A row-major [n, k] weight matrix (or any run of rows of one): its first
// element and dtype (F32, BF16 or F16).
struct WeightsRef {
  const void* data = nullptr;
  pllm_dtype dtype = PLLM_DTYPE_F32;

  // The matrix from row `row` of width `k` on.
  WeightsRef rows_from(int64_t row, int64_t k) const {
    return {static_cast<const std::byte*>(data) + std::size_t(row * k) * weight_dtype_size(dtype), dtype};
  }
  // Row `row` (width k) widened to f32 into dst (exact).
  void row_to_f32(int64_t row, int64_t k, float* dst) const {
    pllm::to_f32(rows_from(row, k).data, dtype, dst, k);
  }
};

// Owns one weight matrix (or vector): `count` elements of `dtype`, 64-byte
// aligned. The loader sizes it (resize) in the dtype set beforehand.
class WeightStorage {
 public:
  explicit WeightStorage(pllm_dtype dtype = PLLM_DTYPE_F32) : dtype_(dtype) {}

  pllm_dtype dtype() const { return dtype_; }
  // Only before resize(): the dtype the loader converts into.
  void set_dtype(pllm_dtype dtype) { dtype_ = dtype; }
  void resize(std::size_t count) {
    data_.reset(static_cast<std::byte*>(::operator new[](count * weight_dtype_size(dtype_), std::align_val_t(64))));
    count_ = count;
  }
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::size_t bytes() const { return count_ * weight_dtype_size(dtype_); }

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  WeightsRef ref() const { return {data_.get(), dtype_}; }
  // The f32 contents (norm weights); PLLM_DTYPE_F32 storage only.
  const float* f32() const { return reinterpret_cast<const float*>(data_.get()); }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  pllm_dtype dtype_;
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t count_ = 0;
};

}  // namespace pagedllm::llama_cpu
