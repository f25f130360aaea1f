#include "llama_common/attention_call.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "pagedllm/sdk.hpp"
#include "llama_common/tensor_view.h"

namespace pagedllm::llama {

void run_attention_layer(const pllm_attention_ref& attention, int32_t kv_layer, const LlamaConfig& c, void* qkv,
                         void* out, int64_t tokens, pllm_dtype dtype, pllm_device device, void* stream,
                         std::string_view who) {
  const int64_t d = c.head_dim, q = c.q_size(), kv = c.kv_size(), qkv_width = q + 2 * kv;
  const int64_t element = pllm_dtype_size(dtype);
  auto* rows = static_cast<std::byte*>(qkv);
  const pllm_tensor query = heads_view(rows, dtype, device, tokens, c.num_heads, d, qkv_width);
  const pllm_tensor key = heads_view(rows + q * element, dtype, device, tokens, c.num_kv_heads, d, qkv_width);
  const pllm_tensor value = heads_view(rows + (q + kv) * element, dtype, device, tokens, c.num_kv_heads, d, qkv_width);
  const pllm_tensor output = heads_view(out, dtype, device, tokens, c.num_heads, d, q);
  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  args.query = &query;
  args.key = &key;
  args.value = &value;
  args.output = &output;
  args.scale = static_cast<float>(c.attention_scale(kv_layer));
  args.stream = stream;
  args.sliding_window = c.sliding_window(kv_layer);
  if (args.sliding_window > 0) {
    const pllm_attention_api& api = *attention.api;
    if (!PLLM_HAS_FIELD(pllm_attention_api, &api, features) || !(api.features & PLLM_ATTENTION_SLIDING_WINDOW)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        std::string(who) + ": layer " + std::to_string(kv_layer) + " has a sliding window of " +
                            std::to_string(args.sliding_window) + " tokens, and the attention backend does not "
                            "declare PLLM_ATTENTION_SLIDING_WINDOW (SDK 2.4): it would attend the whole context");
    }
  }
  pllm_error error{};
  const pllm_status status = attention.api->run(attention.backend, kv_layer, &args, &error);
  if (status != PLLM_OK) {
    throw pllm::Error(status, std::string(who) + ": attention backend failed at layer " + std::to_string(kv_layer) +
                                  ": " + error.message);
  }
}

}  // namespace pagedllm::llama
