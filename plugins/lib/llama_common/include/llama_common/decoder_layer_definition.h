#pragma once
// The decoder layer of every family models_llama serves (llama_config.h's
// Architecture), written once over the operations a backend implements: the
// CPU's (llama_cpu/decoder_layer.cpp, host f32) and CUDA's
// (llama_cuda/decoder_layer.cpp, device, the compute dtype). A family is its
// config parser and the optional parts it turns on; the order of the
// operations is here and nowhere else:
//
//   n   = input_norm ? rms(x) * w_in : x                    (EAGLE's layer has none)
//   qkv = qkv_proj(n) [+ qkv_bias]
//   q, k heads: rms(head) * q_norm / k_norm                 (qk_norm: Qwen3, Gemma 3)
//   q, k = rope(q), rope(k)                                 (Gemma 3's local layers: their own base)
//   x  += [rms(] o_proj(attention(q, k, v)) [+ o_bias] [) * attn_out_norm]     (sandwich norms: Gemma)
//   m   = rms(x) * w_post
//   x  += [rms(] down_proj(act(gate(m)) * up(m)) [+ down_bias] [) * mlp_out_norm]
//         (gate | up [+ gate_up_bias]; act silu, or GELU-tanh for Gemma)
//         or, in a mixture-of-experts layer (Mixtral, Qwen3-MoE):
//   x  += sum over the token's top-k experts e of p_e * down_e(silu(gate_e(m)) * up_e(m)),
//         p = softmax(router(m)) restricted to the top k [and renormalised]
//
// A backend (`Ops`) provides, over its own activation buffers of the step's
// tokens (`Ops::Buffer`) and a layer's weights (`Ops::Layer`, with the members
// named in weight_layout.h; an absent optional part is one `has` says false):
//
//   has(weight)                           whether the layer holds that part
//   residual()                            the residual stream x, as a linear input
//   buffers()                             .normed .qkv .attn .gate_up .act
//   residual_norm(weight, out)            out = rms(x) * weight; returns out
//   linear(in, k, matrix, bias, n, out)   out = in [tokens, k] matrix^T [+ bias]
//   head_norm(qkv, first_head, heads, weight)   per-head RMSNorm in place
//   rope(qkv, heads)                      rotate the first `heads` heads of qkv rows
//   attention(qkv, out)                   through the attention backend, this layer's KV
//   add_to_residual(in, k, matrix, bias, out_norm, what)  x += [rms(] in matrix^T [+ bias] [) * out_norm]
//                                         (under tensor parallelism: the ranks' partial sums, `what` naming
//                                         the product in errors; the norm, where the layer has it, after the sum)
//   gated_activation(gate_up, inter, activation, out)    out = act(gate) * up
//
// Norm weights are used as (1 + w) where the model says so (LlamaConfig::unit_offset_norms: Gemma).
//   route(in, router, experts, k, normalize)     each row's top-k experts and weights, held for:
//   add_experts_to_residual(in, gate_up, down, inter)   x += the weighted sum of the chosen experts'
//                                         SwiGLU MLPs, each expert over only the rows routed to it
//
// Widths are the backend's view of the model (a tensor-parallel rank's heads
// and intermediate columns: `c` is that view).

#include <cstdint>

#include "llama_common/llama_config.h"

namespace pagedllm::llama {

template <class Ops>
void decoder_layer_definition(Ops& ops, const LlamaConfig& c, const typename Ops::Layer& w) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  const int64_t qkv_width = q + 2 * kv;
  const auto& b = ops.buffers();

  const auto attention_input = ops.has(w.input_norm) ? ops.residual_norm(w.input_norm, b.normed) : ops.residual();
  ops.linear(attention_input, h, w.qkv, w.qkv_bias, qkv_width, b.qkv);
  if (ops.has(w.q_norm)) {
    ops.head_norm(b.qkv, 0, c.num_heads, w.q_norm);
    ops.head_norm(b.qkv, c.num_heads, c.num_kv_heads, w.k_norm);
  }
  ops.rope(b.qkv, c.num_heads + c.num_kv_heads);
  ops.attention(b.qkv, b.attn);
  ops.add_to_residual(b.attn, q, w.o, w.o_bias, w.attn_out_norm, "o_proj");

  const auto mlp_input = ops.residual_norm(w.post_norm, b.normed);
  if (ops.has(w.router)) {
    ops.route(mlp_input, w.router, c.num_experts, c.num_experts_per_tok, c.normalize_top_k);
    ops.add_experts_to_residual(mlp_input, w.experts_gate_up, w.experts_down, c.expert_intermediate_size);
    return;
  }
  ops.linear(mlp_input, h, w.gate_up, w.gate_up_bias, 2 * inter, b.gate_up);
  ops.gated_activation(b.gate_up, inter, c.hidden_activation, b.act);
  ops.add_to_residual(b.act, inter, w.down, w.down_bias, w.mlp_out_norm, "down_proj");
}

}  // namespace pagedllm::llama
