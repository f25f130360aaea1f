#pragma once
// The decoder layer (llama_common/decoder_layer_definition.h) on CUDA, shared
// by models_llama (its every layer) and spec_eagle (EAGLE's single layer,
// which has no input_layernorm), as llama_cpu/decoder_layer.h is on the CPU.
//
// The residual stream is kept as x plus a pending delta, so each residual add
// fuses into the next RMSNorm (llama_kernels.h add_rms_norm): on return the
// stream is x + delta, the delta being the MLP's output, which the next layer's
// input norm (or the caller) adds. Everything is enqueued on the context's
// stream in the weights' dtype; attention goes through the backend core
// passed in, as KV layer `kv_layer`, on that stream.

#include <cstdint>
#include <functional>
#include <string_view>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"
#include "llama_common/weight_layout.h"
#include "llama_cuda/cuda_context.h"
#include "llama_cuda/device_memory.h"

namespace pagedllm::llama_cuda {

// A layer's device matrices in the fused layout of
// llama_common/weight_layout.h; a null one (input_norm, a bias, q_norm /
// k_norm): the layer has none.
struct DecoderLayerWeights {
  void *input_norm = nullptr, *qkv = nullptr, *o = nullptr, *post_norm = nullptr, *gate_up = nullptr,
       *down = nullptr;
  void *qkv_bias = nullptr, *o_bias = nullptr, *gate_up_bias = nullptr, *down_bias = nullptr, *q_norm = nullptr,
       *k_norm = nullptr;
  void *attn_out_norm = nullptr, *mlp_out_norm = nullptr;  // sandwich norms (Gemma)
  void *router = nullptr, *experts_gate_up = nullptr, *experts_down = nullptr;  // a mixture-of-experts layer's
  // The storage pointer of one of the layer's matrices (Matrix::kInputNorm ... kKNorm).
  void*& matrix(llama::Matrix m);
};

// The device activations of a step of `tokens` rows, in the layer's dtype
// (cos / sin, f32: the step's RoPE tables, rope_tables() of its positions; local_cos / local_sin those of
// Gemma 3's local layers, LlamaConfig::local_rope, null for other models).
struct DecoderActivations {
  int64_t tokens = 0;
  void *x = nullptr, *delta = nullptr, *normed = nullptr, *qkv = nullptr, *attn = nullptr, *gate_up = nullptr,
       *act = nullptr;
  float *cos = nullptr, *sin = nullptr, *local_cos = nullptr, *local_sin = nullptr;
  // A mixture-of-experts model's (null otherwise): the router's f32 logits [tokens, experts], the rows routed
  // to one expert and its products (at most every token), and the step's routing on the device (rows
  // grouped by expert, their weights: tokens * k entries).
  float* router_logits = nullptr;
  void *expert_in = nullptr, *expert_gate_up = nullptr, *expert_act = nullptr, *expert_out = nullptr;
  int32_t* expert_rows = nullptr;
  float* expert_weights = nullptr;
};

// The activations of up to `tokens` rows in `dtype`, taken from `carver`
// (null pointers while it only sizes); a step sets its own `tokens`.
DecoderActivations carve_decoder_activations(Carver& carver, const llama::LlamaConfig& c, pllm_dtype dtype,
                                             int64_t tokens);

// Under tensor parallelism (docs/tensor-parallel.md): sums `count` elements of the layer's dtype at
// `delta` over the ranks, in place, ordered on the context's stream; throws naming `what` on failure.
using DeltaAllReduce = std::function<void(void* delta, int64_t count, std::string_view what)>;

// Runs the layer over a.x. `delta_pending`: the stream is a.x + a.delta on
// entry (every layer after the first); a layer without input norm needs it
// false. `who` prefixes errors (the attention backend's failure, with the layer).
// With `all_reduce` (a rank's shard of the layer: c is the rank's config), o_proj
// and down_proj each write the rank's partial product into a.delta, which is summed
// over the ranks (then given its bias) before the residual add that follows, so that
// every rank's stream is the whole layer's.
void decoder_layer_forward(const CudaContext& context, const llama::LlamaConfig& c, pllm_dtype dtype,
                           const DecoderLayerWeights& layer, const DecoderActivations& a, bool delta_pending,
                           const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who,
                           const DeltaAllReduce* all_reduce = nullptr);

}  // namespace pagedllm::llama_cuda
