// sampler: greedy / temperature / top-k / top-p / min-p / penalties / seeded
// sampling / logprobs over f32 logits, on the CPU or (in a CUDA build) on the
// CUDA device the logits live on. Rows are independent (sampling_math.h), so
// the CPU spreads them over a small thread pool when asked, and CUDA gives
// each its own block.

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "common/thread_pool.h"
#include "row_sampler.h"
#include "sample_batch_check.h"
#include "token_mask.h"
#ifdef PAGEDLLM_HAVE_CUDA
#include "cuda_sampler.h"
#endif

namespace pagedllm::sampler {
namespace {

bool on_host(const pllm_device& d) { return d.type == PLLM_DEVICE_CPU; }

class CpuSampler {
 public:
  explicit CpuSampler(int num_threads) : pool_(num_threads), workers_(std::size_t(pool_.size())) {}

  void sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
    const int64_t vocab = check_batch(batch, on_host, "host memory");
    check_sample_output(batch, out);
    mask_rows(batch, vocab);
    const int64_t top = out.max_top_logprobs;
    // Non-finite rows first, so that an error leaves no row half-written.
    std::vector<uint8_t> finite(std::size_t(batch.num_rows));
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      finite[std::size_t(r)] = RowSampler::finite_row(logits_row(batch, r), vocab);
      if (!finite[std::size_t(r)]) non_finite_row(out.row_status, r);
    }
    pool_.parallel_for(batch.num_rows, [&](int64_t r, int worker) {
      int32_t* top_ids = top > 0 ? out.top_token_ids + r * top : nullptr;
      float* top_logprobs = top > 0 ? out.top_logprobs + r * top : nullptr;
      if (!finite[std::size_t(r)]) {
        out.token_ids[r] = -1;
        if (out.logprobs) out.logprobs[r] = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < top; ++j) {
          top_ids[j] = -1;
          top_logprobs[j] = -std::numeric_limits<float>::infinity();
        }
        return;
      }
      if (out.row_status) out.row_status[r] = PLLM_SAMPLE_OK;
      workers_[std::size_t(worker)].sample(row_of(batch, r), logits_row(batch, r), vocab, &out.token_ids[r],
                                           out.logprobs ? &out.logprobs[r] : nullptr, out.max_top_logprobs, top_ids,
                                           top_logprobs);
    });
  }

  void probabilities(const pllm_sample_batch& batch, const pllm_probabilities_output& out) {
    const int64_t vocab = check_batch(batch, on_host, "host memory");
    check_probabilities_output(batch, vocab, out, on_host, "host memory");
    mask_rows(batch, vocab);
    std::vector<uint8_t> finite(std::size_t(batch.num_rows));
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      finite[std::size_t(r)] = RowSampler::finite_row(logits_row(batch, r), vocab);
      if (!finite[std::size_t(r)]) non_finite_row(out.row_status, r);
    }
    auto* probs = static_cast<float*>(out.probs->data);
    pool_.parallel_for(batch.num_rows, [&](int64_t r, int worker) {
      float* row_probs = probs + r * out.probs->strides[0];
      if (!finite[std::size_t(r)]) {
        std::fill(row_probs, row_probs + vocab, 0.0f);
        return;
      }
      if (out.row_status) out.row_status[r] = PLLM_SAMPLE_OK;
      workers_[std::size_t(worker)].probabilities(row_of(batch, r), logits_row(batch, r), vocab, row_probs);
    });
  }

 private:
  // Row r's logits: the model's row, or for a constrained row its masked copy.
  const float* logits_row(const pllm_sample_batch& batch, int64_t r) const {
    const float* raw =
        static_cast<const float*>(batch.logits->data) + row_of(batch, r).logits_row * batch.logits->strides[0];
    const int64_t masked = masked_row_[std::size_t(r)];
    return masked < 0 ? raw : masked_.data() + masked * batch.logits->shape[1];
  }

  // Copies every constrained row's logits with its disallowed tokens at -infinity (token_mask.h).
  void mask_rows(const pllm_sample_batch& batch, int64_t vocab) {
    check_token_mask(batch, vocab);
    masked_row_.assign(std::size_t(batch.num_rows), -1);
    int64_t count = 0;
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      if (row_constrained(batch, r)) masked_row_[std::size_t(r)] = count++;
    }
    masked_.resize(std::size_t(count * vocab));
    for (int32_t r = 0; r < batch.num_rows; ++r) {
      const int64_t m = masked_row_[std::size_t(r)];
      if (m < 0) continue;
      const float* raw =
          static_cast<const float*>(batch.logits->data) + row_of(batch, r).logits_row * batch.logits->strides[0];
      apply_token_mask(raw, mask_of(batch, r), vocab, masked_.data() + m * vocab);
    }
  }

  std::vector<float> masked_;        // the constrained rows' masked logits
  std::vector<int64_t> masked_row_;  // per batch row: its row of masked_, or -1

  plugins::ThreadPool pool_;
  std::vector<RowSampler> workers_;  // one scratch set per pool thread
};

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

  Sampler(const Options& options, const pllm_sampler_create_args& args) {
    switch (args.device.type) {
      case PLLM_DEVICE_CPU:
        cpu_ = std::make_unique<CpuSampler>(plugins::resolve_num_threads(options.num_threads));
        return;
      case PLLM_DEVICE_CUDA:
#ifdef PAGEDLLM_HAVE_CUDA
        cuda_ = std::make_unique<CudaSampler>(args.device.index);
        return;
#else
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "sampler: cuda:" + std::to_string(args.device.index) +
                                                      " asked for, but this build has no CUDA (built without CUDA)");
#endif
      case PLLM_DEVICE_INVALID:
      case PLLM_DEVICE_FORCE_32BIT:
        break;
    }
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "sampler: runs on the CPU or CUDA, not device type " +
                                                  std::to_string(int(args.device.type)));
  }

  void sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
#ifdef PAGEDLLM_HAVE_CUDA
    if (cuda_) return cuda_->sample(batch, out);
#endif
    cpu_->sample(batch, out);
  }

  void probabilities(const pllm_sample_batch& batch, const pllm_probabilities_output& out) {
#ifdef PAGEDLLM_HAVE_CUDA
    if (cuda_) return cuda_->probabilities(batch, out);
#endif
    cpu_->probabilities(batch, out);
  }

 private:
  std::unique_ptr<CpuSampler> cpu_;
#ifdef PAGEDLLM_HAVE_CUDA
  std::unique_ptr<CudaSampler> cuda_;
#endif
};

}  // namespace
}  // namespace pagedllm::sampler

PAGEDLLM_PLUGIN(pagedllm::sampler::Sampler, "sampler", "0.2.0",
                "Greedy, temperature, top-k, top-p, min-p, penalties, seeded sampling and logprobs, on the CPU or CUDA")
