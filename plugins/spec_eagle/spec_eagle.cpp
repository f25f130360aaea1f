// spec_eagle: EAGLE-1 speculative decoding on the CPU. This file is the SDK
// glue: options, create, info, draft and verify; the draft model is
// eagle_head.h, the rejection sampler plugins/common/rejection_sampler.h.

#include <memory>
#include <string>

#include "pagedllm/sdk.hpp"
#include "plugins/common/rejection_sampler.h"
#include "plugins/common/thread_pool.h"
#include "plugins/spec_eagle/draft_vocab.h"
#include "plugins/spec_eagle/eagle_head.h"

namespace pagedllm::spec_eagle {
namespace {

class EaglePlugin : public pllm::SpeculatorPlugin {
 public:
  struct Options {
    int32_t num_threads = 0;       // 0 = one per hardware thread
    int64_t draft_vocab_size = 0;  // 0 = the whole vocabulary (draft_vocab.h)
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.num_threads = reader.get_in_range<int32_t>("num_threads", 0, 0, 1024);
      o.draft_vocab_size = reader.get_in_range<int64_t>("draft_vocab_size", 0, 0, int64_t(1) << 31);
      return o;
    }
  };

  EaglePlugin(const Options& options, const pllm_speculator_create_args& args) {
    if (args.struct_size < offsetof(pllm_speculator_create_args, num_speculative_tokens) +
                               sizeof(args.num_speculative_tokens)) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: create args struct_size is too small");
    }
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle runs on the CPU only for now (device type " +
                                                    std::to_string(int(args.device.type)) + ")");
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
    if (!args.target.info) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: no target model");
    head_ = std::make_unique<EagleHead>(
        args.draft_path, args.target,
        load_draft_vocab(args.draft_path, options.draft_vocab_size, args.target.info->vocab_size), threads);
    const auto& c = head_->config();
    info_.struct_size = sizeof info_;
    info_.num_draft_layers = c.num_layers;
    info_.num_kv_heads = c.num_kv_heads;
    info_.head_dim = c.head_dim;
    info_.hidden_size = c.hidden_size;
  }

  pllm_speculator_info info() { return info_; }

  void draft(const pllm_draft_args& args, pllm_draft_output& out) { head_->draft(args, out); }

  void verify(const pllm_verify_args& args, pllm_verify_output& out) { plugins::verify_drafts(args, out); }

 private:
  std::unique_ptr<EagleHead> head_;
  pllm_speculator_info info_{};
};

}  // namespace
}  // namespace pagedllm::spec_eagle

PAGEDLLM_PLUGIN(pagedllm::spec_eagle::EaglePlugin, "spec_eagle", "0.1.0",
                "EAGLE-1 draft head (shares the target's embedding and lm_head) and lossless rejection sampling, CPU")
