// spec_eagle: EAGLE-1 speculative decoding on the CPU or on CUDA. This file
// is the SDK glue: options, create, info, draft and verify; the draft model is
// eagle_head.h on the CPU and cuda_eagle_head.h on CUDA (built with CUDA
// only), the rejection sampler pagedllm/sdk/cpp/rejection_sampler.hpp (and
// cuda_verifier.h for p and q on the CUDA device).

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/rejection_sampler.hpp"
#include "common/thread_pool.h"
#include "eagle_config.h"
#include "draft_vocab.h"
#include "eagle_head.h"
#ifdef PAGEDLLM_HAVE_CUDA
#include "cuda_eagle_head.h"
#include "cuda_verifier.h"
#include "llama_cuda/device_memory.h"
#endif

namespace pagedllm::spec_eagle {
namespace {

class EaglePlugin : public pllm::SpeculatorPlugin {
 public:
  struct Options {
    int32_t num_threads = 0;       // 0 = one per hardware thread
    int64_t draft_vocab_size = 0;  // 0 = the whole vocabulary (draft_vocab.h)
    // As models_llama's option: how the CPU head multiplies bf16 matrices (the target's lm_head).
    llama_cpu::Bf16Compute bf16_compute = llama_cpu::Bf16Compute::kVdpbf16ps;
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.num_threads = reader.get_in_range<int32_t>("num_threads", 0, 0, 1024);
      o.draft_vocab_size = reader.get_in_range<int64_t>("draft_vocab_size", 0, 0, int64_t(1) << 31);
      o.bf16_compute = reader.get_choice("cpu_bf16_compute", "vdpbf16ps", {"vdpbf16ps", "exact"}) == "exact"
                           ? llama_cpu::Bf16Compute::kExact
                           : llama_cpu::Bf16Compute::kVdpbf16ps;
      return o;
    }
  };

  EaglePlugin(const Options& options, const pllm_speculator_create_args& args) {
    if (!PLLM_HAS_FIELD(pllm_speculator_create_args, &args, num_speculative_tokens)) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: create args struct_size is too small");
    }
    if (!args.draft_path || !*args.draft_path) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: no draft checkpoint path");
    }
    if (args.num_speculative_tokens < 1) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: num_speculative_tokens = " +
                                                         std::to_string(args.num_speculative_tokens) +
                                                         " must be at least 1");
    }
    const int threads = plugins::resolve_num_threads(options.num_threads);
    const pllm_speculator_target& target = pllm::require(args.target, "spec_eagle: create args: target");
    if (!target.info) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: no target model");
    head_ = load_head(args, target, threads,
                      load_draft_vocab(args.draft_path, options.draft_vocab_size, target.info->vocab_size),
                      options.bf16_compute);
#ifdef PAGEDLLM_HAVE_CUDA
    if (args.device.type == PLLM_DEVICE_CUDA) {
      verifier_ = std::make_unique<CudaVerifier>(args.device.index);
      device_index_ = args.device.index;
    }
#endif
    device_ = args.device;
    const auto& c = head_->config();
    info_.struct_size = sizeof info_;
    info_.num_draft_layers = c.num_layers;
    info_.num_kv_heads = c.num_kv_heads;
    info_.head_dim = c.head_dim;
    info_.hidden_size = c.hidden_size;
  }

  pllm_speculator_info info() { return info_; }

  // The head for args.device: the CPU's, or (in a CUDA build) the CUDA one.
  static std::unique_ptr<DraftHead> load_head(const pllm_speculator_create_args& args,
                                              const pllm_speculator_target& target, int threads,
                                              std::vector<int32_t> draft_vocab, llama_cpu::Bf16Compute bf16_compute) {
    const pllm_collectives_ref* collectives =
        PLLM_HAS_FIELD(pllm_speculator_create_args, &args, collectives) ? args.collectives : nullptr;
    switch (args.device.type) {
      case PLLM_DEVICE_CPU:
        return std::make_unique<EagleHead>(args.draft_path, target, std::move(draft_vocab), threads, collectives,
                                           bf16_compute);
      case PLLM_DEVICE_CUDA:
        if (collectives) {
          // models_llama splits over CUDA ranks, but this head does not yet (docs/tensor-parallel.md, step 7).
          throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle: a tensor-parallel group on " +
                                                        device_label(args.device) +
                                                        ": the CUDA head is not split over ranks yet");
        }
#ifdef PAGEDLLM_HAVE_CUDA
        return load_cuda_eagle_head(args.draft_path, target, args.device.index, std::move(draft_vocab), threads);
#else
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle: " + device_label(args.device) +
                                                      " asked for, but this build has no CUDA (built without CUDA)");
#endif
      case PLLM_DEVICE_FORCE_32BIT:
      case PLLM_DEVICE_INVALID:
        break;
    }
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle runs on the CPU or CUDA (" + device_label(args.device) + ")");
  }

  void draft(const pllm_draft_args& args, pllm_draft_output& out) { head_->draft(args, out); }

  // p and q in host memory: the host's rejection sampler. On CUDA they may
  // also be on the head's device, where the sampler wrote them: the same
  // algorithm runs there (cuda_verifier.h) and only the tokens come back.
  void verify(const pllm_verify_args& args, pllm_verify_output& out) {
#ifdef PAGEDLLM_HAVE_CUDA
    if (verifier_) {
      const std::string where = "CPU or cuda:" + std::to_string(device_index_);
      const pllm::VerifyShape shape = pllm::check_verify_args(
          args, out,
          [&](const pllm_device& d) {
            return d.type == PLLM_DEVICE_CPU || (d.type == PLLM_DEVICE_CUDA && d.index == device_index_);
          },
          where.c_str());
      if (shape.p.device.type == PLLM_DEVICE_CUDA) {
        verifier_->verify(args, shape, out);
      } else {
        pllm::verify_on_host(args, shape, out);
      }
      return;
    }
#endif
    pllm::verify_drafts(args, out);
  }

  // Memory for core's p and q where verify() reads them best: on the head's
  // CUDA device (the sampler writes them there), or host memory on the CPU.
  pllm_speculator_buffer allocate_buffer(uint64_t bytes) {
    std::shared_ptr<void> memory;
#ifdef PAGEDLLM_HAVE_CUDA
    if (verifier_) {
      auto device = std::make_shared<llama_cuda::CudaMemory>(llama_cuda::CudaMemory::Kind::kDevice);
      device->allocate(std::size_t(bytes), device_index_, "spec_eagle", "a buffer for verify's probabilities");
      memory = std::shared_ptr<void>(device, device->data());
    }
#endif
    if (!memory) {
      memory = std::shared_ptr<void>(::operator new(std::size_t(bytes), kHostAlignment),
                                     [](void* data) { ::operator delete(data, kHostAlignment); });
    }
    pllm_speculator_buffer buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.data = memory.get();
    buffer.bytes = bytes;
    buffer.device = device_;
    lent_.emplace(buffer.data, std::move(memory));
    return buffer;
  }

  void free_buffer(void* data) {
    if (lent_.erase(data) == 0) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: free_buffer: not a buffer this instance lent");
    }
  }

 private:
  static constexpr std::align_val_t kHostAlignment{256};  // speculator.h's promise, as cudaMalloc's

  // allocate_buffer()'s buffers by data pointer; destroying the instance frees those left.
  std::unordered_map<void*, std::shared_ptr<void>> lent_;
  pllm_device device_{};
  std::unique_ptr<DraftHead> head_;
#ifdef PAGEDLLM_HAVE_CUDA
  std::unique_ptr<CudaVerifier> verifier_;
  int32_t device_index_ = 0;
#endif
  pllm_speculator_info info_{};
};

}  // namespace
}  // namespace pagedllm::spec_eagle

PAGEDLLM_PLUGIN(pagedllm::spec_eagle::EaglePlugin, "spec_eagle", "0.1.0",
                "EAGLE-1 draft head (shares the target's embedding and lm_head) and lossless rejection sampling, CPU or "
                "CUDA")
