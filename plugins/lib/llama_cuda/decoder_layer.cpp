#include "llama_cuda/decoder_layer.h"

#include <string>

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
        stream_(context.stream()) {}

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
                 dtype_, out, stream_);
    delta_pending_ = false;
    return out;
  }

  void linear(const void* in, int64_t k, const void* matrix, const void* bias, int64_t n, void* out) {
    context_.linear(dtype_, in, a_.tokens, k, matrix, n, out, dtype_);
    if (bias) add_rows(dtype_, out, bias, 0, nullptr, a_.tokens, n, out, stream_);
  }

  void head_norm(void* qkv, int64_t first_head, int64_t heads, const void* weight) {
    head_rms_norm(dtype_, qkv, a_.tokens, qkv_width(), first_head, heads, c_.head_dim, weight, eps_, stream_);
  }

  void rope(void* qkv, int64_t heads) {
    apply_rope(dtype_, qkv, a_.tokens, qkv_width(), heads, c_.head_dim, a_.cos, a_.sin, stream_);
  }

  void attention(void* qkv, void* out) {
    llama::run_attention_layer(attention_, kv_layer_, c_, qkv, out, a_.tokens, dtype_, context_.device(), stream_,
                               who_);
  }

  void add_to_residual(const void* in, int64_t k, const void* matrix, const void* bias, const char* what) {
    const int64_t h = c_.hidden_size;
    context_.linear(dtype_, in, a_.tokens, k, matrix, h, a_.delta, dtype_);
    if (all_reduce_) (*all_reduce_)(a_.delta, a_.tokens * h, std::string(what) + "'s output");
    if (bias) add_rows(dtype_, a_.delta, bias, 0, nullptr, a_.tokens, h, a_.delta, stream_);
    delta_pending_ = true;
  }

  void swiglu(const void* gate_up, int64_t inter, void* out) {
    silu_mul(dtype_, gate_up, a_.tokens, inter, out, stream_);
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
  cudaStream_t stream_;
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
