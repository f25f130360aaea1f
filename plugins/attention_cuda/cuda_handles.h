#pragma once
// Owning handles for the CUDA objects the plugin keeps: a non-blocking
// stream, a timing-free event, a pinned host buffer and a device buffer that
// grows in stream order. Destruction never throws (errors there cannot be
// reported); the owner synchronises first.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <algorithm>

#include "cuda_common/cuda_check.h"

namespace pagedllm::attention_cuda {

class Stream {
 public:
  Stream() { PAGEDLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { PAGEDLLM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { (void)cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory: the source of truly asynchronous host-to-device copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const { return data_; }
  // Makes room for `bytes`, growing geometrically; the old contents are lost.
  // The caller guarantees no copy still reads the old buffer (cudaFreeHost
  // may synchronise the device, which geometric growth makes rare).
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    const std::size_t capacity = std::max(bytes, 2 * capacity_);
    release();
    void* p = nullptr;
    PAGEDLLM_CUDA_CHECK(cudaHostAlloc(&p, capacity, cudaHostAllocDefault));
    data_ = static_cast<std::byte*>(p);
    capacity_ = capacity;
  }

 private:
  void release() {
    if (data_) (void)cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// Device memory that grows in stream order (cudaFreeAsync + cudaMallocAsync
// on `stream`), so growing never blocks the host: the old buffer is released
// after everything already queued on `stream`, and the caller orders other
// streams that used it before `stream` (an event wait) first.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return data_; }
  void reserve(std::size_t bytes, cudaStream_t stream) {
    if (bytes <= capacity_) return;
    const std::size_t capacity = std::max(bytes, 2 * capacity_);
    if (data_) PAGEDLLM_CUDA_CHECK(cudaFreeAsync(data_, stream));
    data_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    PAGEDLLM_CUDA_CHECK(cudaMallocAsync(&p, capacity, stream));
    data_ = static_cast<std::byte*>(p);
    capacity_ = capacity;
  }

 private:
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace pagedllm::attention_cuda
