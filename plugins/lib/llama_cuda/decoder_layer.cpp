#include "llama_cuda/decoder_layer.h"

#include <cstddef>
#include <string>
#include <vector>

#include "cuda_common/cuda_check.h"
#include "llama_common/expert_routing.h"

#include "pagedllm/sdk.hpp"
#include "llama_common/attention_call.h"
#include "llama_common/decoder_layer_definition.h"
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
  if (c.local_rope_theta > 0.0) {
    a.local_cos = carver.take<float>(t * half);
    a.local_sin = carver.take<float>(t * half);
  }
  if (c.num_experts > 0) {
    const int64_t inter = c.expert_intermediate_size, routed = t * c.num_experts_per_tok;
    a.router_logits = carver.take<float>(t * c.num_experts);
    a.expert_in = carver.take(t * h, e);
    a.expert_gate_up = carver.take(t * 2 * inter, e);
    a.expert_act = carver.take(t * inter, e);
    a.expert_out = carver.take(t * h, e);
    a.expert_rows = carver.take<int32_t>(routed);
    a.expert_weights = carver.take<float>(routed);
  }
  return a;
}

namespace {

// The definition's operations (decoder_layer_definition.h) enqueued on the context's stream in the
// weights' dtype. The residual stream is a.x plus a pending a.delta that the next norm adds.
class CudaOps {
 public:
  using Layer = DecoderLayerWeights;

  CudaOps(const CudaContext& context, const llama::LlamaConfig& c, pllm_dtype dtype, const DecoderActivations& a,
          bool delta_pending, const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who,
          const DeltaAllReduce* all_reduce)
      : context_(context), c_(c), dtype_(dtype), a_(a), delta_pending_(delta_pending), attention_(attention),
        kv_layer_(kv_layer), who_(who), all_reduce_(all_reduce), eps_(static_cast<float>(c.rms_norm_eps)),
        norm_offset_(c.unit_offset_norms ? 1.0f : 0.0f), stream_(context.stream()) {}

  bool has(const void* w) const { return w != nullptr; }
  const DecoderActivations& buffers() const { return a_; }

  const void* residual() const {
    if (delta_pending_) {
      throw pllm::Error(PLLM_ERROR_INTERNAL, std::string(who_) + ": a layer without input norm after another layer");
    }
    return a_.x;
  }

  const void* residual_norm(const void* weight, void* out) {
    add_rms_norm(dtype_, a_.x, delta_pending_ ? a_.delta : nullptr, nullptr, weight, eps_, a_.tokens, c_.hidden_size,
                 dtype_, out, stream_, norm_offset_);
    delta_pending_ = false;
    return out;
  }

  void linear(const void* in, int64_t k, const void* matrix, const void* bias, int64_t n, void* out) {
    context_.linear(dtype_, in, a_.tokens, k, matrix, n, out, dtype_);
    if (bias) add_rows(dtype_, out, bias, 0, nullptr, a_.tokens, n, out, stream_);
  }

  void head_norm(void* qkv, int64_t first_head, int64_t heads, const void* weight) {
    head_rms_norm(dtype_, qkv, a_.tokens, qkv_width(), first_head, heads, c_.head_dim, weight, eps_, stream_,
                  norm_offset_);
  }

  void rope(void* qkv, int64_t heads) {
    const bool local = c_.local_rope(kv_layer_);
    apply_rope(dtype_, qkv, a_.tokens, qkv_width(), heads, c_.head_dim, local ? a_.local_cos : a_.cos,
               local ? a_.local_sin : a_.sin, stream_);
  }

  void attention(void* qkv, void* out) {
    llama::run_attention_layer(attention_, kv_layer_, c_, qkv, out, a_.tokens, dtype_, context_.device(), stream_,
                               who_);
  }

  // The product becomes the pending delta; an output norm (Gemma's) normalises it in place, after the sum
  // over the ranks.
  void add_to_residual(const void* in, int64_t k, const void* matrix, const void* bias, const void* out_norm,
                       const char* what) {
    const int64_t h = c_.hidden_size;
    context_.linear(dtype_, in, a_.tokens, k, matrix, h, a_.delta, dtype_);
    if (all_reduce_) (*all_reduce_)(a_.delta, a_.tokens * h, std::string(what) + "'s output");
    if (bias) add_rows(dtype_, a_.delta, bias, 0, nullptr, a_.tokens, h, a_.delta, stream_);
    if (out_norm) {
      add_rms_norm(dtype_, a_.delta, nullptr, nullptr, out_norm, eps_, a_.tokens, h, dtype_, a_.delta, stream_,
                   norm_offset_);
    }
    delta_pending_ = true;
  }

  void gated_activation(const void* gate_up, int64_t inter, llama::Activation activation, void* out) {
    llama_cuda::gated_activation(dtype_, activation, gate_up, a_.tokens, inter, out, stream_);
  }

  // The router's logits come to the host (one synchronisation per mixture-of-experts layer), are routed there
  // as on the CPU (llama_common/expert_routing.h), and the grouping goes back up.
  void route(const void* in, const void* router, int64_t experts, int64_t top_k, bool normalize) {
    const int64_t count = a_.tokens * experts;
    context_.linear(dtype_, in, a_.tokens, c_.hidden_size, router, experts, a_.router_logits, PLLM_DTYPE_F32);
    host_logits_.resize(std::size_t(count));
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), a_.router_logits, std::size_t(count) * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
    PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    routing_.route(host_logits_.data(), a_.tokens, experts, top_k, normalize);
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(a_.expert_rows, routing_.rows.data(), routing_.rows.size() * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, stream_));
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(a_.expert_weights, routing_.weights.data(),
                                        routing_.weights.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }

  // Expert by expert over only its rows (gathered), each output times its weight added into the delta.
  void add_experts_to_residual(const void* in, const void* gate_up, const void* down, int64_t inter) {
    const int64_t h = c_.hidden_size, element = pllm_dtype_size(dtype_);
    const int64_t experts = int64_t(routing_.offsets.size()) - 1;
    PAGEDLLM_CUDA_CHECK(cudaMemsetAsync(a_.delta, 0, std::size_t(a_.tokens * h * element), stream_));
    for (int64_t expert = 0; expert < experts; ++expert) {
      const int32_t first = routing_.offsets[std::size_t(expert)];
      const int32_t n = routing_.offsets[std::size_t(expert) + 1] - first;
      if (n == 0) continue;
      gather_rows(dtype_, in, h, a_.expert_rows + first, n, h, a_.expert_in, h, stream_);
      context_.linear(dtype_, a_.expert_in, n, h, static_cast<const std::byte*>(gate_up) + expert * 2 * inter * h * element,
                      2 * inter, a_.expert_gate_up, dtype_);
      llama_cuda::gated_activation(dtype_, c_.hidden_activation, a_.expert_gate_up, n, inter, a_.expert_act,
                                   stream_);
      context_.linear(dtype_, a_.expert_act, n, inter, static_cast<const std::byte*>(down) + expert * h * inter * element,
                      h, a_.expert_out, dtype_);
      add_weighted_rows(dtype_, a_.expert_out, n, h, a_.expert_rows + first, a_.expert_weights + first, a_.delta,
                        stream_);
    }
    delta_pending_ = true;
  }

 private:
  int64_t qkv_width() const { return c_.q_size() + 2 * int64_t(c_.kv_size()); }

  const CudaContext& context_;
  const llama::LlamaConfig& c_;
  pllm_dtype dtype_;
  const DecoderActivations& a_;
  bool delta_pending_;
  const pllm_attention_ref& attention_;
  int32_t kv_layer_;
  std::string_view who_;
  const DeltaAllReduce* all_reduce_;
  float eps_;
  float norm_offset_;  // 1: Gemma's (1 + w) norms
  cudaStream_t stream_;
  llama::ExpertRouting routing_;
  std::vector<float> host_logits_;
};

}  // namespace

void decoder_layer_forward(const CudaContext& context, const llama::LlamaConfig& c, pllm_dtype dtype,
                           const DecoderLayerWeights& layer, const DecoderActivations& a, bool delta_pending,
                           const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who,
                           const DeltaAllReduce* all_reduce) {
  if (a.tokens <= 0) return;
  CudaOps ops(context, c, dtype, a, delta_pending, attention, kv_layer, who, all_reduce);
  llama::decoder_layer_definition(ops, c, layer);
}

}  // namespace pagedllm::llama_cuda
