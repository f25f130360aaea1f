#include "plugins/llama_cuda/decoder_layer.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "pagedllm/sdk.hpp"
#include "plugins/llama_common/tensor_view.h"
#include "plugins/llama_cuda/llama_kernels.h"

namespace pagedllm::llama_cuda {

void*& DecoderLayerWeights::matrix(llama::Matrix m) {
  switch (m) {
    case llama::Matrix::kInputNorm: return input_norm;
    case llama::Matrix::kQkv: return qkv;
    case llama::Matrix::kO: return o;
    case llama::Matrix::kPostNorm: return post_norm;
    case llama::Matrix::kGateUp: return gate_up;
    case llama::Matrix::kDown: return down;
    case llama::Matrix::kEmbed:
    case llama::Matrix::kNorm:
    case llama::Matrix::kLmHead:
      break;
  }
  throw pllm::Error(PLLM_ERROR_INTERNAL, "llama_cuda: not a decoder layer matrix");
}

void decoder_layer_forward(const CudaContext& context, const llama::LlamaConfig& c, pllm_dtype dtype,
                           const DecoderLayerWeights& layer, const DecoderActivations& a, bool delta_pending,
                           const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who) {
  const int64_t tokens = a.tokens, h = c.hidden_size, d = c.head_dim, q = c.q_size(), kv = c.kv_size();
  const int64_t qkv_width = q + 2 * kv, inter = c.intermediate_size, element = pllm_dtype_size(dtype);
  if (tokens <= 0) return;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  cudaStream_t stream = context.stream();

  const void* attn_in = a.x;
  if (layer.input_norm) {
    add_rms_norm(dtype, a.x, delta_pending ? a.delta : nullptr, nullptr, layer.input_norm, eps, tokens, h, dtype,
                 a.normed, stream);
    attn_in = a.normed;
  } else if (delta_pending) {
    throw pllm::Error(PLLM_ERROR_INTERNAL, std::string(who) + ": a layer without input norm after another layer");
  }
  context.linear(dtype, attn_in, tokens, h, layer.qkv, qkv_width, a.qkv, dtype);
  apply_rope(dtype, a.qkv, tokens, qkv_width, c.num_heads + c.num_kv_heads, d, a.cos, a.sin, stream);

  auto* qkv_bytes = static_cast<std::byte*>(a.qkv);
  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  args.query = llama::heads_view(qkv_bytes, dtype, context.device(), tokens, c.num_heads, d, qkv_width);
  args.key = llama::heads_view(qkv_bytes + q * element, dtype, context.device(), tokens, c.num_kv_heads, d, qkv_width);
  args.value =
      llama::heads_view(qkv_bytes + (q + kv) * element, dtype, context.device(), tokens, c.num_kv_heads, d, qkv_width);
  args.output = llama::heads_view(a.attn, dtype, context.device(), tokens, c.num_heads, d, q);
  args.scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  args.stream = stream;
  pllm_error error{};
  const pllm_status status = attention.api->run(attention.backend, kv_layer, &args, &error);
  if (status != PLLM_OK) {
    throw pllm::Error(status, std::string(who) + ": attention backend failed at layer " + std::to_string(kv_layer) +
                                  ": " + error.message);
  }
  context.linear(dtype, a.attn, tokens, q, layer.o, h, a.delta, dtype);
  add_rms_norm(dtype, a.x, a.delta, nullptr, layer.post_norm, eps, tokens, h, dtype, a.normed, stream);
  context.linear(dtype, a.normed, tokens, h, layer.gate_up, 2 * inter, a.gate_up, dtype);
  silu_mul(dtype, a.gate_up, tokens, inter, a.act, stream);
  context.linear(dtype, a.act, tokens, inter, layer.down, h, a.delta, dtype);
}

}  // namespace pagedllm::llama_cuda
