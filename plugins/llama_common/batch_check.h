#pragma once
// The checks every Llama forward makes of the batch core hands it (the
// model's and the EAGLE draft's alike), before any row is read.

#include <cstdint>
#include <string_view>

#include "pagedllm/sdk.h"

namespace pagedllm::llama {

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT), prefixed with `who`, for a
// batch too small for the fields read, no attention backend, token ids outside
// [0, vocab_size), negative positions, or logits / hidden rows (the latter when
// the batch has the field) that are not token rows.
void check_batch(std::string_view who, const pllm_batch& batch, const pllm_attention_ref& attention,
                 int64_t vocab_size);

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT) for a forward output struct
// too small or without a logits descriptor, or hidden rows asked for by
// `batch` when `out` has no hidden descriptor. Returns whether it has one.
bool check_forward_output(std::string_view who, const pllm_batch& batch, const pllm_forward_output& out);

}  // namespace pagedllm::llama
