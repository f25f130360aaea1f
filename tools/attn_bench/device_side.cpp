#include "tools/attn_bench/device_side.h"

#include <charconv>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "tools/attn_bench/ab_backend.h"
#include "tools/common/layer_tensors.h"

namespace pagedllm::attn_bench {

pllm_device parse_device(std::string_view text, std::string_view flag) {
  if (text == "cpu") return {PLLM_DEVICE_CPU, 0};
  if (text == "cuda") return {PLLM_DEVICE_CUDA, 0};
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int32_t index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0) {
      return {PLLM_DEVICE_CUDA, index};
    }
  }
  throw UsageError(fmt::format("{}: '{}' is not a device (cpu, cuda or cuda:N)", flag, text));
}

std::string device_label(const pllm_device& device) {
  switch (device.type) {
    case PLLM_DEVICE_CPU: return "cpu";
    case PLLM_DEVICE_CUDA: return fmt::format("cuda:{}", device.index);
    case PLLM_DEVICE_FORCE_32BIT:
    case PLLM_DEVICE_INVALID: break;
  }
  return "invalid";
}

namespace {

class CpuSide : public DeviceSide {
 public:
  pllm_device device() const override { return {PLLM_DEVICE_CPU, 0}; }
  std::string description() const override { return "cpu"; }

  pllm_attention_layer_args stage(StepInputs& in, const CaseSpec& c, float scale) override {
    const int64_t tokens = in.batch.num_tokens();
    output_ = TypedBuffer(c.dtype, in.query.size());
    output_.fill(std::numeric_limits<float>::quiet_NaN());
    tensors_.query = in.query.tensor3(tokens, c.num_heads(), c.head_dim);
    tensors_.key = in.key.tensor3(tokens, c.num_kv_heads, c.head_dim);
    tensors_.value = in.value.tensor3(tokens, c.num_kv_heads, c.head_dim);
    tensors_.output = output_.tensor3(tokens, c.num_heads(), c.head_dim);
    tensors_.scale = scale;
    tensors_.stream = nullptr;
    return tensors_.args();
  }
  std::vector<float> output() override { return output_.to_f32(); }

  double time_run(const std::function<void()>& run) override {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void synchronize() override {}
  double copy_bandwidth_gbs() override { return 0; }

 private:
  TypedBuffer output_;
  tools::LayerTensors tensors_;
};

}  // namespace

std::unique_ptr<DeviceSide> make_cpu_side() { return std::make_unique<CpuSide>(); }

std::unique_ptr<DeviceSide> make_device_side(const pllm_device& device, const std::string& side) {
  switch (device.type) {
    case PLLM_DEVICE_CPU: return make_cpu_side();
    case PLLM_DEVICE_CUDA:
#ifdef PAGEDLLM_ATTN_BENCH_CUDA
      return make_cuda_side(device, side);
#else
      throw BenchError(fmt::format("--device-{} {}: this pagedllm-attn-bench was built without CUDA "
                                   "(configure with a CUDA toolkit, PAGEDLLM_ENABLE_CUDA=AUTO or ON)",
                                   side, device_label(device)));
#endif
    case PLLM_DEVICE_FORCE_32BIT:
    case PLLM_DEVICE_INVALID: break;
  }
  throw BenchError(fmt::format("--device-{}: invalid device", side));
}

}  // namespace pagedllm::attn_bench
