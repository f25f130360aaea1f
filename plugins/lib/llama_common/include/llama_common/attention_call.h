#pragma once
// The attention step of a Llama decoder layer, the same on every device: the
// backend core passed in reads q, k and v from the layer's fused qkv rows,
// stores k and v in the paged cache as KV layer `kv_layer` and writes the
// attention output. Shared by plugins/lib/llama_cpu and plugins/lib/llama_cuda.

#include <cstdint>
#include <string_view>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::llama {

// qkv: [tokens, (heads + 2 kv_heads) * head_dim] (q | k | v per row), out:
// [tokens, heads * head_dim], both `dtype` on `device`; scale 1/sqrt(head_dim);
// the layer's sliding window (c.sliding_window(kv_layer)), refused with
// PLLM_ERROR_UNSUPPORTED by name when the backend does not declare it reads
// one; `stream` is the caller's (null on the CPU). Throws pllm::Error with the
// backend's status, prefixed with `who`, naming the layer.
void run_attention_layer(const pllm_attention_ref& attention, int32_t kv_layer, const LlamaConfig& c, void* qkv,
                         void* out, int64_t tokens, pllm_dtype dtype, pllm_device device, void* stream,
                         std::string_view who);

}  // namespace pagedllm::llama
