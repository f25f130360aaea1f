// models_llama: the Llama-family architecture (HF LlamaForCausalLM: Llama 2/3,
// TinyLlama, GQA models; an HF directory or a GGUF file) on the CPU or on a CUDA
// device. This file is the SDK glue: options, create, info, forward and get_tensor; the CPU model is
// llama_model.h, the CUDA one plugins/lib/llama_cuda (built with CUDA only).

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "pagedllm/sdk.hpp"
#include "common/thread_pool.h"
#include "common/dtype_name.h"
#include "llama_cpu/cpu_isa.h"
#include "llama_model.h"
#ifdef PAGEDLLM_HAVE_CUDA
#include "llama_cuda/cuda_llama_model.h"
#endif

namespace pagedllm::models_llama {
namespace {

using pagedllm::plugins::dtype_name;

class LlamaPlugin : public pllm::ModelPlugin {
 public:
  struct Options {
    int32_t num_threads = 0;  // 0 = one per hardware thread
    std::string quantization = "none";
    // How bf16 weights are multiplied on the CPU (llama_cpu/weights.h): vdpbf16ps (activations rounded to bf16;
    // the exact path on CPUs without AVX512-BF16) or exact (f32 activations). No effect on CUDA.
    llama_cpu::Bf16Compute bf16_compute = llama_cpu::Bf16Compute::kVdpbf16ps;
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.num_threads = reader.get_in_range<int32_t>("num_threads", 0, 0, 1024);
      o.quantization =
          reader.get_choice("quantization", "none", {"none", "int8", "int8_w8a8", "int8_weight_only"});
      o.bf16_compute = reader.get_choice("cpu_bf16_compute", "vdpbf16ps", {"vdpbf16ps", "exact"}) == "exact"
                           ? llama_cpu::Bf16Compute::kExact
                           : llama_cpu::Bf16Compute::kVdpbf16ps;
      return o;
    }
    // int8: W8A8 where the CPU has VNNI (2.1-3.8x bf16 at decode, 3.7-4.5x
    // at 64+ rows), else weight-only (W8A8's portable integer loop is no
    // faster than it past one row; docs/benchmarks.md).
    std::optional<llama_cpu::Int8Compute> int8_compute() const {
      if (quantization == "none") return std::nullopt;
      if (quantization == "int8_weight_only") return llama_cpu::Int8Compute::kWeightOnly;
      if (quantization == "int8_w8a8") return llama_cpu::Int8Compute::kW8A8;
      return llama_cpu::active_isa() >= llama_cpu::Isa::kAvx512Vnni ? llama_cpu::Int8Compute::kW8A8
                                                                     : llama_cpu::Int8Compute::kWeightOnly;
    }
  };

  LlamaPlugin(const Options& options, const pllm_model_create_args& args) {
    check_path_and_device(options, args);
    model_ = load(options, args);  // reads the configuration as check_model does
    const LlamaConfig& c = model_->config();
    info_.struct_size = sizeof info_;
    info_.architecture = llama::architecture_class(c.architecture).data();
    info_.vocab_size = c.vocab_size;
    info_.hidden_size = c.hidden_size;
    info_.num_layers = c.num_layers;
    info_.num_heads = c.num_heads;
    info_.num_kv_heads = c.num_kv_heads;
    info_.head_dim = c.head_dim;
    info_.max_position_embeddings = c.max_position_embeddings;
    info_.dtype = model_->dtype();
    info_.bos_token_id = c.bos_token_id;
    info_.num_eos_token_ids = static_cast<int32_t>(c.eos_token_ids.size());
    info_.eos_token_ids = c.eos_token_ids.data();
    pllm::log_info("models_llama: ", info_.architecture, ", ", c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_heads, " heads / ",
                   c.num_kv_heads, " kv heads x ", c.head_dim, ", vocab ", c.vocab_size, ", on ", model_->describe());
  }

  // What create refuses before it reads a weight: the path, the device and dtype, and the
  // checkpoint's configuration (config.json or the GGUF metadata: LlamaConfig's strict reading).
  static void check_model(const Options& options, const pllm_model_create_args& args) {
    check_path_and_device(options, args);
    (void)LlamaConfig::load(args.model_path, "models_llama");
  }

  pllm_model_info info() { return info_; }

 private:
  static void check_path_and_device(const Options& options, const pllm_model_create_args& args) {
    if (!args.model_path || !*args.model_path) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "models_llama: no model path");
    }
    std::error_code ec;
    if (!std::filesystem::exists(args.model_path, ec)) {
      throw pllm::Error(PLLM_ERROR_NOT_FOUND, std::string(args.model_path) + ": no such file or directory (an HF "
                                                                            "model directory or a GGUF file)");
    }
    check_device(options, args);
  }

 public:

  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) {
    model_->forward(batch, attention, out);
  }

  pllm_tensor get_tensor(const char* name) {
    if (!name) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "models_llama: get_tensor: null name");
    return model_->tensor(name);
  }

 private:
  // The device, dtype and quantization create can honour.
  static void check_device(const Options& options, const pllm_model_create_args& args) {
    if (options.int8_compute() && args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama: quantization " + options.quantization +
                                                    " runs on the CPU only (device type " +
                                                    std::to_string(int(args.device.type)) + ")");
    }
    if (args.device.type == PLLM_DEVICE_CUDA) {
#ifdef PAGEDLLM_HAVE_CUDA
      llama_cuda::check_cuda_dtype(args.dtype);
      return;
#else
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama: cuda:" + std::to_string(args.device.index) +
                                                    " asked for, but this build has no CUDA (built without CUDA)");
#endif
    }
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama runs on the CPU or CUDA (device type " +
                                                    std::to_string(int(args.device.type)) + ")");
    }
    const bool weight_dtype_ok = args.dtype == PLLM_DTYPE_INVALID || args.dtype == PLLM_DTYPE_F32 ||
                                 args.dtype == PLLM_DTYPE_BF16 || args.dtype == PLLM_DTYPE_F16;
    if (!weight_dtype_ok) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("models_llama on the CPU holds weights in f32, bf16 or "
                                                            "f16 (activations in f32); model dtype ") +
                                                    dtype_name(args.dtype) + " is not supported");
    }
  }

  static std::unique_ptr<llama::LlamaForward> load(const Options& options, const pllm_model_create_args& args) {
    const int num_threads = plugins::resolve_num_threads(options.num_threads);
    const pllm_collectives_ref* collectives =
        PLLM_HAS_FIELD(pllm_model_create_args, &args, collectives) ? args.collectives : nullptr;
#ifdef PAGEDLLM_HAVE_CUDA
    if (args.device.type == PLLM_DEVICE_CUDA) {
      return llama_cuda::load_cuda_llama(args.model_path, args.device.index, args.dtype, num_threads, collectives);
    }
#endif
    return std::make_unique<LlamaModel>(args.model_path, num_threads, args.dtype, options.int8_compute(), collectives,
                                        options.bf16_compute);
  }

  std::unique_ptr<llama::LlamaForward> model_;
  pllm_model_info info_{};
};

}  // namespace
}  // namespace pagedllm::models_llama

PAGEDLLM_PLUGIN(pagedllm::models_llama::LlamaPlugin, "models_llama", "0.5.0",
                "Llama-family models (HF LlamaForCausalLM directories or GGUF files): CPU (f32/bf16/f16 or int8 "
                "weights, f32 activations) or CUDA (f32/f16/bf16, cuBLAS), paged attention via the backend")
