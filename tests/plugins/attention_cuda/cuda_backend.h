#pragma once
// attention_cuda behind the same calls as the attention_cpu test Backend, so
// the shared Scenario (tests/plugins/attention_cpu/paged_scenario.h) drives
// both: run() stages the host Q/K/V/output on the device, runs the layer on a
// non-blocking stream of its own (the plugin must order its metadata upload
// and block copies against it), synchronises and copies the output back.
// With defer_synchronisation(true), run() only enqueues (inputs staged, layer
// run, no copy back, no synchronisation, nothing freed), as an engine keeps
// the device busy: the next plan, swap or copy is then ordered against the
// kernels by the plugin's events alone, which the emulator's ordering check
// verifies. Switching back synchronises and frees what was staged.

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/plugins/attention_cpu/attention_harness.h"

namespace attention_test {

#define TEST_CUDA_CHECK(call)                                                       \
  do {                                                                              \
    const cudaError_t test_cuda_status_ = (call);                                   \
    if (test_cuda_status_ != cudaSuccess) FAIL(#call << ": " << cudaGetErrorString(test_cuda_status_)); \
  } while (0)

// A contiguous device copy of a host tensor.
class DeviceTensor {
 public:
  DeviceTensor(const pllm_tensor& host, cudaStream_t stream) : host_(host), device_(host) {
    bytes_ = std::size_t(pllm_dtype_size(host.dtype));
    for (int32_t d = 0; d < host.ndim; ++d) bytes_ *= std::size_t(host.shape[d]);
    if (bytes_ > 0) {
      TEST_CUDA_CHECK(cudaMalloc(&data_, bytes_));
      TEST_CUDA_CHECK(cudaMemcpyAsync(data_, host.data, bytes_, cudaMemcpyHostToDevice, stream));
    }
    device_.data = data_;
    device_.device = {PLLM_DEVICE_CUDA, 0};
  }
  ~DeviceTensor() { (void)cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // The device copy's descriptor, valid as long as this object.
  const pllm_tensor* tensor() const { return &device_; }
  void copy_back(cudaStream_t stream) const {
    if (bytes_ > 0) TEST_CUDA_CHECK(cudaMemcpyAsync(host_.data, data_, bytes_, cudaMemcpyDeviceToHost, stream));
  }

 private:
  pllm_tensor host_;
  pllm_tensor device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class CudaBackend {
 public:
  explicit CudaBackend(const std::string& options_json)
      : backend_(options_json, pllm_device{PLLM_DEVICE_CUDA, 0}, "attention_cuda") {
    TEST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaBackend() {
    (void)cudaStreamSynchronize(stream_);
    deferred_.clear();
    (void)cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) { return backend_.bytes_per_block(spec); }
  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, int64_t host_blocks) {
    backend_.allocate_cache(spec, device_blocks, host_blocks);
  }
  void plan(const pllm_batch& batch) { backend_.plan(batch); }
  void copy_blocks(const std::vector<pllm_block_copy>& pairs) { backend_.copy_blocks(pairs); }
  void swap_out(const std::vector<pllm_block_copy>& pairs) { backend_.swap_out(pairs); }
  void swap_in(const std::vector<pllm_block_copy>& pairs) { backend_.swap_in(pairs); }
  pllm_device_memory memory_info() { return backend_.memory_info(); }
  // The C table's calls with host-side arguments as given (no staging): for
  // checks the plugin makes before it touches the tensors' memory.
  Backend& raw() { return backend_; }

  void defer_synchronisation(bool defer) {
    if (!defer) {
      TEST_CUDA_CHECK(cudaStreamSynchronize(stream_));
      deferred_.clear();  // cudaFree: after the synchronisation, not in the middle of deferred work
    }
    defer_ = defer;
  }

  void run(int32_t layer, const pllm_attention_layer_args& host_args) {
    // cudaFree synchronises the device, so deferred runs keep their buffers until the end.
    auto q = std::make_unique<DeviceTensor>(*host_args.query, stream_);
    auto k = std::make_unique<DeviceTensor>(*host_args.key, stream_);
    auto v = std::make_unique<DeviceTensor>(*host_args.value, stream_);
    auto out = std::make_unique<DeviceTensor>(*host_args.output, stream_);
    pllm_attention_layer_args args = host_args;
    args.query = q->tensor();
    args.key = k->tensor();
    args.value = v->tensor();
    args.output = out->tensor();
    args.stream = stream_;
    backend_.run(layer, args);
    if (defer_) {
      for (auto* t : {&q, &k, &v, &out}) deferred_.push_back(std::move(*t));
      return;
    }
    out->copy_back(stream_);
    TEST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  Backend backend_;
  cudaStream_t stream_ = nullptr;
  bool defer_ = false;
  std::vector<std::unique_ptr<DeviceTensor>> deferred_;
};

}  // namespace attention_test
