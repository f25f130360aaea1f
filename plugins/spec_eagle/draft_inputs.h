#pragma once
// The checks of a draft() call both draft heads make before reading a row:
// the argument structs, the batch, and where each row's feature comes from
// (the caller's host rows, or the head's own chain of predicted features).

#include <cstdint>

#include "pagedllm/sdk.h"
#include "plugins/llama_common/llama_config.h"

namespace pagedllm::spec_eagle {

struct DraftInputs {
  const pllm_batch* batch = nullptr;
  // Features given: row t's feature is host_features + t * host_stride (f32).
  const float* host_features = nullptr;
  int64_t host_stride = 0;
  // Else the chain continues: row t's feature is the previous call's logits
  // row chain_rows[t], or row t itself when chain_rows is null.
  const int32_t* chain_rows = nullptr;

  bool continues_chain() const { return host_features == nullptr; }
};

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT) naming what is wrong: a
// struct too small, a bad batch (pllm::check_batch), features that are not
// host f32 [num_tokens, hidden] rows, or a chain (features of ndim 0) when the
// previous call kept `kept_chain_rows` rows (-1: none) that the batch's rows
// cannot continue.
DraftInputs check_draft_inputs(const pllm_draft_args& args, const pllm_draft_output& out,
                               const llama::LlamaConfig& c, int64_t kept_chain_rows);

}  // namespace pagedllm::spec_eagle
