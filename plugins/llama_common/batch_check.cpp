#include "plugins/llama_common/batch_check.h"

#include <cstddef>
#include <string>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama {

void check_batch(std::string_view who, const pllm_batch& b, const pllm_attention_ref& attention,
                 int64_t vocab_size) {
  const auto invalid = [who](const std::string& message) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(who) + ": " + message);
  };
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (b.struct_size < offsetof(pllm_batch, logits_indices) + sizeof(b.logits_indices)) {
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

bool check_forward_output(std::string_view who, const pllm_batch& b, const pllm_forward_output& out) {
  if (out.struct_size < offsetof(pllm_forward_output, hidden) + sizeof(out.hidden)) {
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

}  // namespace pagedllm::llama
