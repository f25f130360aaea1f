#pragma once
// Device and pinned host memory for the CUDA Llama code (models_llama's
// forward, spec_eagle's draft head): one RAII allocation with an error that
// says what needed how much, and a carver that lays several arrays out in
// one allocation.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagedllm::llama_cuda {

// "12 MiB", rounded up: sizes in messages and log lines.
std::string mib(uint64_t bytes);
// "cuda:0".
std::string device_name(int device);

// One allocation of device memory (cudaMalloc) or of page-locked host memory
// (cudaHostAlloc: what makes cudaMemcpyAsync asynchronous), freed with the
// object. Failure is a pllm::Error (PLLM_ERROR_OUT_OF_MEMORY when memory ran
// out) prefixed with `who`, saying what needed how many bytes and, for the
// device, what it has free.
class CudaMemory {
 public:
  enum class Kind { kDevice, kPinnedHost };
  explicit CudaMemory(Kind kind) : kind_(kind) {}
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  ~CudaMemory() { release(); }

  void allocate(std::size_t bytes, int device, std::string_view who, const std::string& what);
  void release();
  // Exchanges the allocations (of the same kind): how a buffer grows keeping its contents.
  void swap(CudaMemory& other) noexcept;
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Kind kind_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Hands out 256-byte aligned ranges of one allocation. Run once with no base
// to size the allocation, then again over it: one function states the layout.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <class T = std::byte>
  T* take(int64_t count, int64_t element_bytes = int64_t(sizeof(T))) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += std::size_t(count * element_bytes);
    return p;
  }
  std::size_t bytes() const { return offset_; }

 private:
  static constexpr std::size_t kAlign = 256;
  std::byte* base_;
  std::size_t offset_ = 0;
};

}  // namespace pagedllm::llama_cuda
