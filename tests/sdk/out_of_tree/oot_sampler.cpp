// A plugin built out of tree against the installed SDK: greedy sampling.

#include <pagedllm/sdk.hpp>

namespace {

class ArgmaxSampler : public pllm::SamplerPlugin {
 public:
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }
  };
  ArgmaxSampler(const Options&, const pllm_sampler_create_args&) {}
  void sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
    const auto* logits = static_cast<const float*>(batch.logits->data);
    for (int32_t row = 0; row < batch.num_rows; ++row) {
      const float* r = logits + pllm::sample_row(batch, row).logits_row * batch.logits->strides[0];
      int32_t best = 0;
      for (int32_t t = 1; t < batch.logits->shape[1]; ++t) {
        if (r[t] > r[best]) best = t;
      }
      out.token_ids[row] = best;
    }
  }
};

}  // namespace

PAGEDLLM_PLUGIN(ArgmaxSampler, "oot_sampler", "2.0.0", "Out-of-tree argmax sampler")
