#pragma once
// The checks a model (or a speculator's draft forward) makes of the batch core
// hands it, before any row is read: shared by models_llama, llama_cuda,
// spec_eagle and any out-of-tree model. Installed with the SDK; not part of sdk.hpp:
//   #include <pagedllm/sdk/cpp/model_batch_check.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pagedllm/sdk.hpp"

namespace pllm {

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT), prefixed with `who`, for a
// batch too small for the fields read, no attention backend, token ids outside
// [0, vocab_size), negative positions, or logits / hidden rows (the latter when
// the batch has the field) that are not token rows.
inline void check_batch(std::string_view who, const pllm_batch& b, const pllm_attention_ref& attention,
                        int64_t vocab_size) {
  const auto invalid = [who](const std::string& message) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(who) + ": " + message);
  };
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (!PLLM_HAS_FIELD(pllm_batch, &b, logits_indices)) {
    invalid("batch: struct_size " + str(b.struct_size) + " is too small");
  }
  if (!attention.api || !attention.api->run || !attention.backend) invalid("no attention backend");
  if (b.num_tokens < 0) invalid("batch: negative num_tokens");
  if (b.num_tokens > 0 && (!b.token_ids || !b.positions)) invalid("batch: null token_ids or positions");
  for (int32_t t = 0; t < b.num_tokens; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= vocab_size) {
      invalid("batch: token_ids[" + str(t) + "] = " + str(b.token_ids[t]) + " is outside the vocabulary [0, " +
              str(vocab_size) + ")");
    }
    if (b.positions[t] < 0) invalid("batch: positions[" + str(t) + "] = " + str(b.positions[t]) + " is negative");
  }
  const auto check_rows = [&](const char* what, int32_t count, const int32_t* rows) {
    if (count < 0 || (count > 0 && !rows)) invalid(std::string("batch: bad ") + what);
    for (int32_t i = 0; i < count; ++i) {
      if (rows[i] < 0 || rows[i] >= b.num_tokens) {
        invalid(std::string("batch: ") + what + "[" + str(i) + "] = " + str(rows[i]) + " is not a token row [0, " +
                str(b.num_tokens) + ")");
      }
    }
  };
  check_rows("logits_indices", b.num_logits, b.logits_indices);
  if (PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices)) check_rows("hidden_indices", b.num_hidden, b.hidden_indices);
}

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT) for a forward output struct
// smaller than its 2.0 layout, a null logits descriptor, or hidden rows asked
// for by `batch` with a null `hidden` descriptor. Returns whether `out` has one.
inline bool check_forward_output(std::string_view who, const pllm_batch& b, const pllm_forward_output& out) {
  if (!PLLM_HAS_FIELD(pllm_forward_output, &out, hidden)) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(who) + ": forward output: struct_size " +
                                                       std::to_string(out.struct_size) + " is too small");
  }
  if (!out.logits) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(who) + ": forward output: null logits descriptor");
  }
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  if (!out.hidden && num_hidden > 0) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT,
                      std::string(who) + ": hidden states were asked for, but the forward output's 'hidden' "
                                         "descriptor is null");
  }
  return out.hidden != nullptr;
}

}  // namespace pllm
