// sampler: greedy / temperature / top-k / top-p / min-p / penalties / seeded
// sampling / logprobs over f32 logits on the CPU. Rows are independent (see
// counter_rng.h), so they are spread over a small thread pool when asked.

#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "plugins/common/thread_pool.h"
#include "plugins/sampler/row_sampler.h"

namespace pagedllm::sampler {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "sampler: " + message);
}

class Sampler : public pllm::SamplerPlugin {
 public:
  struct Options {
    int32_t num_threads = 1;  // 0 = one per hardware thread
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.num_threads = reader.get_in_range<int32_t>("num_threads", 1, 0, 1024);
      return o;
    }
  };

  Sampler(const Options& options, const pllm_sampler_create_args& args)
      : pool_(plugins::resolve_num_threads(options.num_threads)), workers_(std::size_t(pool_.size())) {
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "sampler works on host logits: create it with the CPU device");
    }
  }

  void sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
    const int64_t vocab = check_batch(batch);
    if (!PLLM_HAS_FIELD(pllm_sample_output, &out, top_logprobs)) invalid("output struct_size too small");
    if (batch.num_rows > 0 && !out.token_ids) invalid("null output token_ids");
    if (out.max_top_logprobs < 0) invalid("max_top_logprobs must be >= 0");
    if (out.max_top_logprobs > 0 && (!out.top_token_ids || !out.top_logprobs)) {
      invalid("max_top_logprobs > 0 but null top_token_ids or top_logprobs");
    }
    pool_.parallel_for(batch.num_rows, [&](int64_t r, int worker) {
      const int64_t top = out.max_top_logprobs;
      workers_[std::size_t(worker)].sample(row(batch, r), logits_row(batch, r), vocab, &out.token_ids[r],
                                           out.logprobs ? &out.logprobs[r] : nullptr, out.max_top_logprobs,
                                           top > 0 ? out.top_token_ids + r * top : nullptr,
                                           top > 0 ? out.top_logprobs + r * top : nullptr);
    });
  }

  void probabilities(const pllm_sample_batch& batch, pllm_tensor& out_probs) {
    const int64_t vocab = check_batch(batch);
    if (out_probs.dtype != PLLM_DTYPE_F32 || out_probs.ndim != 2 || out_probs.shape[0] != batch.num_rows ||
        out_probs.shape[1] != vocab || out_probs.strides[1] != 1 || out_probs.device.type != PLLM_DEVICE_CPU) {
      invalid("out_probs must be a host f32 [num_rows, vocab] tensor with contiguous rows");
    }
    if (batch.num_rows > 0 && !out_probs.data) invalid("null out_probs data");
    auto* probs = static_cast<float*>(out_probs.data);
    pool_.parallel_for(batch.num_rows, [&](int64_t r, int worker) {
      workers_[std::size_t(worker)].probabilities(row(batch, r), logits_row(batch, r), vocab,
                                                  probs + r * out_probs.strides[0]);
    });
  }

 private:
  // Validates the batch and every row; returns the vocabulary size.
  int64_t check_batch(const pllm_sample_batch& batch) const {
    if (!PLLM_HAS_FIELD(pllm_sample_batch, &batch, logits)) invalid("batch struct_size too small");
    if (batch.num_rows < 0) invalid("negative num_rows");
    const pllm_tensor& l = batch.logits;
    if (l.dtype != PLLM_DTYPE_F32) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "sampler: logits must be f32");
    if (l.device.type != PLLM_DEVICE_CPU) invalid("logits must be in host memory");
    if (l.ndim != 2 || l.shape[0] != batch.num_rows || l.shape[1] <= 0 || l.strides[1] != 1) {
      invalid("logits must be [num_rows, vocab] with contiguous rows");
    }
    if (batch.num_rows == 0) return l.shape[1];
    if (!l.data || !batch.rows) invalid("null logits or rows");
    if (batch.row_stride < sizeof(pllm_sample_row)) {
      invalid("row_stride " + std::to_string(batch.row_stride) + " is smaller than a row");
    }
    for (int32_t r = 0; r < batch.num_rows; ++r) RowSampler::validate(row(batch, r), l.shape[1], r);
    return l.shape[1];
  }

  static const pllm_sample_row& row(const pllm_sample_batch& batch, int64_t r) {
    return *reinterpret_cast<const pllm_sample_row*>(reinterpret_cast<const char*>(batch.rows) +
                                                     r * int64_t(batch.row_stride));
  }
  static const float* logits_row(const pllm_sample_batch& batch, int64_t r) {
    return static_cast<const float*>(batch.logits.data) + r * batch.logits.strides[0];
  }

  plugins::ThreadPool pool_;
  std::vector<RowSampler> workers_;  // one scratch set per pool thread
};

}  // namespace
}  // namespace pagedllm::sampler

PAGEDLLM_PLUGIN(pagedllm::sampler::Sampler, "sampler", "0.1.0",
                "Greedy, temperature, top-k, top-p, min-p, penalties, seeded sampling and logprobs")
