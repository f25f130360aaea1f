#pragma once
// The checks of a draft() call both draft heads make before reading a row:
// the argument structs, the batch, and where each row's feature comes from
// (rows of the target's hidden states, on the head's device, picked by index;
// or the head's own chain of predicted features).

#include <cstdint>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::spec_eagle {

struct DraftInputs {
  const pllm_batch* batch = nullptr;
  // Features given: row t's feature is row feature_rows[t] of `features`
  // (f32 [rows, hidden] with contiguous rows, on an accepted device).
  const pllm_tensor* features = nullptr;
  const int32_t* feature_rows = nullptr;
  // Else the chain continues: row t's feature is the previous call's logits
  // row chain_rows[t], or row t itself when chain_rows is null.
  const int32_t* chain_rows = nullptr;

  bool continues_chain() const { return features == nullptr; }
  // Row t's feature given features: features->data + feature_rows[t] * strides[0].
  const float* feature(int64_t t) const {
    return static_cast<const float*>(features->data) + int64_t(feature_rows[t]) * features->strides[0];
  }
};

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT) naming what is wrong: a
// struct too small, a bad batch (pllm::check_batch), features that are not
// f32 [rows, hidden] with contiguous rows on `device` (or on the host when
// `host_too`), feature rows outside them, or a chain (no features) when the
// previous call kept `kept_chain_rows` rows (-1: none) that the batch's rows
// cannot continue.
DraftInputs check_draft_inputs(const pllm_draft_args& args, const pllm_draft_output& out,
                               const llama::LlamaConfig& c, int64_t kept_chain_rows, const pllm_device& device,
                               bool host_too);

}  // namespace pagedllm::spec_eagle
