#include "draft_inputs.h"

#include <cstddef>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/model_batch_check.hpp"

namespace pagedllm::spec_eagle {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: " + message);
}

}  // namespace

DraftInputs check_draft_inputs(const pllm_draft_args& args, const pllm_draft_output& out,
                               const llama::LlamaConfig& c, int64_t kept_chain_rows, const pllm_device& device,
                               bool host_too) {
  if (!PLLM_HAS_FIELD(pllm_draft_args, &args, feature_rows)) {
    invalid("draft args: struct_size " + str(args.struct_size) + " is too small");
  }
  if (!PLLM_HAS_FIELD(pllm_draft_output, &out, logits)) {
    invalid("draft output: struct_size " + str(out.struct_size) + " is too small");
  }
  if (!out.logits) invalid("draft output: null logits descriptor");
  if (!args.batch) invalid("draft args: null batch");
  const pllm_batch& b = *args.batch;
  pllm::check_batch("spec_eagle", b, pllm::require(args.attention, "spec_eagle: draft args: attention"),
                     c.vocab_size);
  const int32_t* feature_rows = args.feature_rows;
  const int64_t h = c.hidden_size;

  DraftInputs in;
  in.batch = &b;
  if (!args.features && feature_rows != nullptr) {
    // The chain continues the previous call's logits rows feature_rows[t].
    if (kept_chain_rows < 0) {
      invalid("no features: a chain continues, but no previous draft() kept predicted features");
    }
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      if (feature_rows[t] < 0 || feature_rows[t] >= kept_chain_rows) {
        invalid("feature_rows[" + str(t) + "] = " + str(feature_rows[t]) + " is not a logits row of the previous "
                "draft() [0, " + str(kept_chain_rows) + ")");
      }
    }
    in.chain_rows = feature_rows;
    return in;
  }
  if (!args.features) {
    if (kept_chain_rows != b.num_tokens) {
      invalid("no features: a chain continues, but " +
              (kept_chain_rows < 0 ? std::string("no previous draft() kept predicted features")
                                   : "the previous draft() returned " + str(kept_chain_rows) + " logits rows") +
              " for this batch's " + str(b.num_tokens) + " tokens");
    }
    return in;
  }
  const pllm_tensor& f = pllm::require(args.features, "spec_eagle: draft args: features");
  const bool on_device = f.device.type == device.type && f.device.index == device.index;
  const bool on_host = host_too && f.device.type == PLLM_DEVICE_CPU;
  const bool ok = f.data && f.dtype == PLLM_DTYPE_F32 && (on_device || on_host) && f.ndim == 2 && f.shape[0] >= 0 &&
                  f.shape[1] == h && f.strides[1] == 1 && f.strides[0] >= h;
  if (!ok) {
    invalid("features must be an f32 [rows, hidden = " + str(h) + "] tensor with contiguous rows on the draft's "
            "device" + (host_too ? std::string(" or the host") : std::string()) + ", got ndim " + str(f.ndim) +
            " shape [" + str(f.ndim > 0 ? f.shape[0] : 0) + ", " + str(f.ndim > 1 ? f.shape[1] : 0) + "]");
  }
  if (b.num_tokens > 0 && !feature_rows) invalid("features given without feature_rows");
  for (int32_t t = 0; t < b.num_tokens; ++t) {
    if (feature_rows[t] < 0 || feature_rows[t] >= f.shape[0]) {
      invalid("feature_rows[" + str(t) + "] = " + str(feature_rows[t]) + " is outside the features' rows [0, " +
              str(f.shape[0]) + ")");
    }
  }
  in.features = &f;
  in.feature_rows = feature_rows;
  return in;
}

}  // namespace pagedllm::spec_eagle
