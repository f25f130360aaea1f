// The CUDA side of pagedllm-attn-bench (built when PAGEDLLM_HAVE_CUDA): stages
// each step's Q/K/V on the device, hands run() a stream of its own, times
// run() with events on that stream, and measures the device's copy bandwidth.

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "tools/attn_bench/ab_backend.h"
#include "tools/attn_bench/device_side.h"
#include "tools/common/layer_tensors.h"

namespace pagedllm::attn_bench {
namespace {

class CudaSide : public DeviceSide {
 public:
  CudaSide(const pllm_device& device, std::string side) : device_(device), side_(std::move(side)) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw BenchError(fmt::format("--device-{} {}: no usable CUDA device: {} ({})", side_, device_label(device_),
                                   cudaGetErrorName(status), cudaGetErrorString(status)));
    }
    if (device_.index >= count) {
      throw BenchError(fmt::format("--device-{} {}: no such device (this machine has {} CUDA device{})", side_,
                                   device_label(device_), count, count == 1 ? "" : "s"));
    }
    check(cudaSetDevice(device_.index), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_.index), "cudaGetDeviceProperties");
    name_ = prop.name;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaSide() override {
    (void)cudaSetDevice(device_.index);
    (void)cudaStreamSynchronize(stream_);
    release();
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
    (void)cudaStreamDestroy(stream_);
  }
  CudaSide(const CudaSide&) = delete;
  CudaSide& operator=(const CudaSide&) = delete;

  pllm_device device() const override { return device_; }
  std::string description() const override { return fmt::format("{} ({})", device_label(device_), name_); }

  pllm_attention_layer_args stage(StepInputs& in, const CaseSpec& c, float scale) override {
    check(cudaSetDevice(device_.index), "cudaSetDevice");
    synchronize();  // the previous step's buffers are about to be freed
    release();
    const int64_t tokens = in.batch.num_tokens();
    tensors_.query = upload(in.query, in.query.tensor3(tokens, c.num_heads(), c.head_dim));
    tensors_.key = upload(in.key, in.key.tensor3(tokens, c.num_kv_heads, c.head_dim));
    tensors_.value = upload(in.value, in.value.tensor3(tokens, c.num_kv_heads, c.head_dim));
    output_host_ = TypedBuffer(c.dtype, in.query.size());
    tensors_.output = output_host_.tensor3(tokens, c.num_heads(), c.head_dim);
    tensors_.output.data = allocate(output_host_.byte_size());
    tensors_.output.device = device_;
    // All-ones bytes are a NaN in f32, f16 and bf16 alike.
    check(cudaMemsetAsync(tensors_.output.data, 0xff, output_host_.byte_size(), stream_), "cudaMemsetAsync");
    output_device_ = tensors_.output.data;
    tensors_.scale = scale;
    tensors_.stream = stream_;
    return tensors_.args();
  }

  std::vector<float> output() override {
    check(cudaMemcpyAsync(output_host_.data(), output_device_, output_host_.byte_size(), cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync (output)");
    synchronize();
    return output_host_.to_f32();
  }

  double time_run(const std::function<void()>& run) override {
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    run();
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return double(ms) * 1e-3;
  }

  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  // One 1 GiB buffer copied to another (at most a quarter of the free memory
  // each: a small device, or the CUDA emulator's), best of 5 after a warm-up copy.
  double copy_bandwidth_gbs() override {
    if (copy_bandwidth_ > 0) return copy_bandwidth_;
    std::size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const std::size_t kBytes = std::min(std::size_t(1) << 30, free_bytes / 4 / 256 * 256);
    void* src = nullptr;
    void* dst = nullptr;
    check(cudaMalloc(&src, kBytes), "cudaMalloc (copy bandwidth source)");
    if (cudaMalloc(&dst, kBytes) != cudaSuccess) {
      (void)cudaFree(src);
      check(cudaErrorMemoryAllocation, "cudaMalloc (copy bandwidth destination)");
    }
    double best = 0;
    for (int i = 0; i < 6; ++i) {
      const double seconds = time_run([&] {
        check(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (copy bandwidth)");
      });
      if (i > 0 && seconds > 0) best = std::max(best, 2.0 * double(kBytes) / seconds / 1e9);
    }
    (void)cudaFree(src);
    (void)cudaFree(dst);
    copy_bandwidth_ = best;
    return best;
  }

 private:
  void check(cudaError_t status, const char* what) const {
    if (status == cudaSuccess) return;
    (void)cudaGetLastError();
    throw BenchError(fmt::format("--device-{} {}: {} failed: {} ({})", side_, device_label(device_), what,
                                 cudaGetErrorName(status), cudaGetErrorString(status)));
  }
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    if (bytes == 0) return p;
    check(cudaMalloc(&p, bytes), "cudaMalloc (step inputs)");
    buffers_.push_back(p);
    return p;
  }
  pllm_tensor upload(TypedBuffer& host, pllm_tensor view) {
    view.data = allocate(host.byte_size());
    view.device = device_;
    if (host.byte_size() > 0) {
      check(cudaMemcpyAsync(view.data, host.data(), host.byte_size(), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (step inputs)");
    }
    return view;
  }
  void release() {
    for (void* p : buffers_) (void)cudaFree(p);
    buffers_.clear();
    output_device_ = nullptr;
  }

  pllm_device device_;
  std::string side_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<void*> buffers_;
  TypedBuffer output_host_;
  void* output_device_ = nullptr;
  tools::LayerTensors tensors_;
  double copy_bandwidth_ = 0;
};

}  // namespace

std::unique_ptr<DeviceSide> make_cuda_side(const pllm_device& device, const std::string& side) {
  return std::make_unique<CudaSide>(device, side);
}

}  // namespace pagedllm::attn_bench
