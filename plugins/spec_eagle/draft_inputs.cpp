#include "plugins/spec_eagle/draft_inputs.h"

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
                               const llama::LlamaConfig& c, int64_t kept_chain_rows) {
  if (!PLLM_HAS_FIELD(pllm_draft_args, &args, attention)) {
    invalid("draft args: struct_size " + str(args.struct_size) + " is too small");
  }
  if (!PLLM_HAS_FIELD(pllm_draft_output, &out, logits)) {
    invalid("draft output: struct_size " + str(out.struct_size) + " is too small");
  }
  if (!args.batch) invalid("draft args: null batch");
  const pllm_batch& b = *args.batch;
  pllm::check_batch("spec_eagle", b, pllm::require(args.attention, "spec_eagle: draft args: attention"),
                     c.vocab_size);
  const bool has_feature_rows = PLLM_HAS_FIELD(pllm_draft_args, &args, feature_rows);
  const int32_t* feature_rows = has_feature_rows ? args.feature_rows : nullptr;
  const pllm_tensor& f = args.features;
  const int64_t h = c.hidden_size;

  DraftInputs in;
  in.batch = &b;
  if (f.ndim == 0 && feature_rows != nullptr) {
    // The chain continues the previous call's logits rows feature_rows[t].
    if (kept_chain_rows < 0) {
      invalid("features of ndim 0 continue a chain, but no previous draft() kept predicted features");
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
  if (f.ndim == 0) {
    if (kept_chain_rows != b.num_tokens) {
      invalid("features of ndim 0 continue a chain, but " +
              (kept_chain_rows < 0 ? std::string("no previous draft() kept predicted features")
                                   : "the previous draft() returned " + str(kept_chain_rows) + " logits rows") +
              " for this batch's " + str(b.num_tokens) + " tokens");
    }
    return in;
  }
  const bool ok = f.data && f.dtype == PLLM_DTYPE_F32 && f.device.type == PLLM_DEVICE_CPU && f.ndim == 2 &&
                  f.shape[0] == b.num_tokens && f.shape[1] == h && f.strides[1] == 1 && f.strides[0] >= h;
  if (!ok) {
    invalid("features must be a CPU f32 [num_tokens = " + str(b.num_tokens) + ", hidden = " + str(h) +
            "] tensor with contiguous rows (or ndim 0), got ndim " + str(f.ndim) + " shape [" + str(f.shape[0]) +
            ", " + str(f.ndim > 1 ? f.shape[1] : 0) + "]");
  }
  in.host_features = static_cast<const float*>(f.data);
  in.host_stride = f.strides[0];
  return in;
}

}  // namespace pagedllm::spec_eagle
