#include "llama_cuda/decoder_layer.h"

#include <string>

#include "pagedllm/sdk.hpp"
#include "llama_common/attention_call.h"
#include "llama_cuda/llama_kernels.h"

namespace pagedllm::llama_cuda {

void*& DecoderLayerWeights::matrix(llama::Matrix m) { return llama::decoder_layer_matrix(*this, m); }

DecoderActivations carve_decoder_activations(Carver& carver, const llama::LlamaConfig& c, pllm_dtype dtype,
                                             int64_t tokens) {
  const int64_t t = tokens, h = c.hidden_size, e = pllm_dtype_size(dtype), half = c.head_dim / 2;
  DecoderActivations a;
  a.tokens = tokens;
  a.x = carver.take(t * h, e);
  a.delta = carver.take(t * h, e);
  a.normed = carver.take(t * h, e);
  a.qkv = carver.take(t * (c.q_size() + 2 * c.kv_size()), e);
  a.attn = carver.take(t * c.q_size(), e);
  a.gate_up = carver.take(t * 2 * c.intermediate_size, e);
  a.act = carver.take(t * c.intermediate_size, e);
  a.cos = carver.take<float>(t * half);
  a.sin = carver.take<float>(t * half);
  return a;
}

void decoder_layer_forward(const CudaContext& context, const llama::LlamaConfig& c, pllm_dtype dtype,
                           const DecoderLayerWeights& layer, const DecoderActivations& a, bool delta_pending,
                           const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who,
                           const DeltaAllReduce* all_reduce) {
  const int64_t tokens = a.tokens, h = c.hidden_size, d = c.head_dim, q = c.q_size(), kv = c.kv_size();
  const int64_t qkv_width = q + 2 * kv, inter = c.intermediate_size;
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

  llama::run_attention_layer(attention, kv_layer, c, a.qkv, a.attn, tokens, dtype, context.device(), stream, who);
  context.linear(dtype, a.attn, tokens, q, layer.o, h, a.delta, dtype);
  if (all_reduce) (*all_reduce)(a.delta, tokens * h, "o_proj's output");
  add_rms_norm(dtype, a.x, a.delta, nullptr, layer.post_norm, eps, tokens, h, dtype, a.normed, stream);
  context.linear(dtype, a.normed, tokens, h, layer.gate_up, 2 * inter, a.gate_up, dtype);
  silu_mul(dtype, a.gate_up, tokens, inter, a.act, stream);
  context.linear(dtype, a.act, tokens, inter, layer.down, h, a.delta, dtype);
  if (all_reduce) (*all_reduce)(a.delta, tokens * h, "down_proj's output");
}

}  // namespace pagedllm::llama_cuda
