#include "llama_cpu/decoder_layer.h"

#include <algorithm>
#include <cstring>

#include "pagedllm/sdk.hpp"
#include "llama_common/attention_call.h"
#include "llama_common/decoder_layer_definition.h"
#include "llama_common/rope_freq.h"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/rope.h"
#include "llama_cpu/tensor_parallel_shard.h"

namespace pagedllm::llama_cpu {

WeightStorage& DecoderLayerWeights::matrix(llama::Matrix m) { return llama::decoder_layer_matrix(*this, m); }

WeightPart whole_model_part(const llama::WeightSlot& slot, WeightStorage* storage) {
  WeightPart part{slot.name, slot.shape, storage, slot.first_row};
  if (slot.fused_block()) {
    part.source_shape = slot.checkpoint_shape();
    part.source_first_row = slot.source_first_row;
  }
  return part;
}

void add_decoder_layer_parts(std::vector<WeightPart>& parts, const LlamaConfig& c, const std::string& prefix,
                             DecoderLayerWeights& layer, bool input_layernorm, const TensorParallelShard* shard) {
  for (const llama::WeightSlot& slot : llama::decoder_layer_slots(c, prefix, 0, input_layernorm)) {
    WeightStorage* storage = &layer.matrix(slot.matrix);
    parts.push_back(shard ? shard->part(slot, storage) : whole_model_part(slot, storage));
  }
}

void DecoderScratch::prepare(plugins::ThreadPool& pool, const LlamaConfig& c, const std::vector<double>& inv_freq,
                             const int32_t* positions, int64_t tokens) {
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };
  const int64_t h = c.hidden_size, inter = c.intermediate_size, half = c.head_dim / 2;
  tokens_ = tokens;
  buffers_.normed = normed_buf_.reserve(n(tokens * h));
  buffers_.qkv = qkv_buf_.reserve(n(tokens * (c.q_size() + 2 * c.kv_size())));
  buffers_.attn = attn_buf_.reserve(n(tokens * c.q_size()));
  buffers_.gate_up = gate_up_buf_.reserve(n(tokens * 2 * inter));
  buffers_.act = act_buf_.reserve(n(tokens * inter));
  if (c.num_experts > 0) {
    const int64_t expert_inter = c.expert_intermediate_size;
    experts_.logits = logits_buf_.reserve(n(tokens * c.num_experts));
    experts_.in = expert_in_buf_.reserve(n(tokens * h));
    experts_.gate_up = expert_gate_up_buf_.reserve(n(tokens * 2 * expert_inter));
    experts_.act = expert_act_buf_.reserve(n(tokens * expert_inter));
    experts_.out = expert_out_buf_.reserve(n(tokens * h));
    experts_.sum = expert_sum_buf_.reserve(n(tokens * h));
  }
  cos_ = cos_buf_.reserve(n(tokens * half));
  sin_ = sin_buf_.reserve(n(tokens * half));
  parallel_rows(pool, tokens, half * 40, [&](int64_t begin, int64_t end) {
    rope_tables(inv_freq, positions + begin, end - begin, cos_ + begin * half, sin_ + begin * half);
  });
  if (c.local_rope_theta > 0.0) {
    if (local_inv_freq_.empty()) local_inv_freq_ = llama::local_rope_inv_freq(c);
    local_cos_ = local_cos_buf_.reserve(n(tokens * half));
    local_sin_ = local_sin_buf_.reserve(n(tokens * half));
    parallel_rows(pool, tokens, half * 40, [&](int64_t begin, int64_t end) {
      rope_tables(local_inv_freq_, positions + begin, end - begin, local_cos_ + begin * half,
                  local_sin_ + begin * half);
    });
  }
}

namespace {

// The definition's operations on host f32 rows (decoder_layer_definition.h).
class CpuOps {
 public:
  using Layer = DecoderLayerWeights;

  CpuOps(plugins::ThreadPool& pool, const LlamaConfig& c, float* x, DecoderScratch& scratch,
         const pllm_attention_ref& attention, int32_t kv_layer, std::string_view who,
         const TensorParallelRank* tensor_parallel)
      : pool_(pool), c_(c), x_(x), scratch_(scratch), attention_(attention), kv_layer_(kv_layer), who_(who),
        tensor_parallel_(tensor_parallel), tokens_(scratch.tokens()), eps_(static_cast<float>(c.rms_norm_eps)),
        norm_offset_(c.unit_offset_norms ? 1.0f : 0.0f) {}

  bool has(const WeightStorage& w) const { return !w.empty(); }
  const float* residual() const { return x_; }
  const DecoderScratch::Buffers& buffers() const { return scratch_.buffers(); }

  const float* residual_norm(const WeightStorage& weight, float* out) {
    const int64_t h = c_.hidden_size;
    rms_norm(pool_, x_, h, tokens_, h, weight.f32(), eps_, out, h, norm_offset_);
    return out;
  }

  void linear(const float* in, int64_t k, const WeightStorage& matrix, const WeightStorage& bias, int64_t n,
              float* out) {
    llama_cpu::linear(pool_, in, k, tokens_, matrix.ref(), n, k, out, n, false);
    if (has(bias)) add_bias(pool_, out, n, tokens_, n, bias.f32());
  }

  void head_norm(float* qkv, int64_t first_head, int64_t heads, const WeightStorage& weight) {
    head_rms_norm(pool_, qkv, tokens_, qkv_width(), first_head, heads, c_.head_dim, weight.f32(), eps_, norm_offset_);
  }

  void rope(float* qkv, int64_t heads) {
    const int64_t half = c_.head_dim / 2, width = qkv_width();
    const float* cos = scratch_.cos(c_, kv_layer_);
    const float* sin = scratch_.sin(c_, kv_layer_);
    parallel_rows(pool_, tokens_, heads * c_.head_dim, [&](int64_t begin, int64_t end) {
      apply_rope(qkv + begin * width, end - begin, width, heads, c_.head_dim, cos + begin * half, sin + begin * half);
    });
  }

  void attention(float* qkv, float* out) {
    llama::run_attention_layer(attention_, kv_layer_, c_, qkv, out, tokens_, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0},
                               nullptr, who_);
  }

  // Rank 0 adds its partial product (and the bias) to the residual, the others write theirs in its place, so
  // that the all-reduce leaves residual + bias + every rank's partial. With an output norm, the product is
  // summed over the ranks first, in the normed buffer (the layer's input to this product, read by now).
  void add_to_residual(const float* in, int64_t k, const WeightStorage& matrix, const WeightStorage& bias,
                       const WeightStorage& out_norm, const char* what) {
    const int64_t h = c_.hidden_size;
    if (has(out_norm)) {
      float* out = scratch_.buffers().normed;
      llama_cpu::linear(pool_, in, k, tokens_, matrix.ref(), h, k, out, h, false);
      if (tensor_parallel_) tensor_parallel_->all_reduce(out, tokens_ * h, what);
      if (has(bias)) add_bias(pool_, out, h, tokens_, h, bias.f32());
      rms_norm(pool_, out, h, tokens_, h, out_norm.f32(), eps_, out, h, norm_offset_);
      parallel_rows(pool_, tokens_, h, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin * h; i < end * h; ++i) x_[i] += out[i];
      });
      return;
    }
    const bool first_rank = !tensor_parallel_ || tensor_parallel_->rank == 0;
    llama_cpu::linear(pool_, in, k, tokens_, matrix.ref(), h, k, x_, h, first_rank);
    if (first_rank && has(bias)) add_bias(pool_, x_, h, tokens_, h, bias.f32());
    if (tensor_parallel_) tensor_parallel_->all_reduce(x_, tokens_ * h, what);
  }

  void gated_activation(const float* gate_up, int64_t inter, llama::Activation activation, float* out) {
    switch (activation) {
      case llama::Activation::kSilu: llama_cpu::swiglu(pool_, gate_up, tokens_, inter, out); return;
      case llama::Activation::kGeluTanh: llama_cpu::gelu_tanh_glu(pool_, gate_up, tokens_, inter, out); return;
    }
  }

  void route(const float* in, const WeightStorage& router, int64_t experts, int64_t top_k, bool normalize) {
    DecoderScratch::Experts& e = scratch_.experts();
    const int64_t h = c_.hidden_size;
    llama_cpu::linear(pool_, in, h, tokens_, router.ref(), experts, h, e.logits, experts, false);
    e.routing.route(e.logits, tokens_, experts, top_k, normalize);
  }

  // Expert by expert (in expert order, as transformers sums them), over only its rows: gather, gate_up,
  // SwiGLU, down, then each row's output times its weight into the sum, which joins the residual.
  void add_experts_to_residual(const float* in, const WeightStorage& gate_up, const WeightStorage& down,
                               int64_t inter) {
    DecoderScratch::Experts& e = scratch_.experts();
    const int64_t h = c_.hidden_size, experts = int64_t(e.routing.offsets.size()) - 1;
    std::fill(e.sum, e.sum + tokens_ * h, 0.0f);
    for (int64_t expert = 0; expert < experts; ++expert) {
      const int32_t first = e.routing.offsets[std::size_t(expert)];
      const int32_t n = e.routing.offsets[std::size_t(expert) + 1] - first;
      if (n == 0) continue;
      for (int32_t r = 0; r < n; ++r) {
        std::memcpy(e.in + int64_t(r) * h, in + int64_t(e.routing.rows[std::size_t(first + r)]) * h,
                    std::size_t(h) * sizeof(float));
      }
      llama_cpu::linear(pool_, e.in, h, n, gate_up.ref().rows_from(expert * 2 * inter, h), 2 * inter, h, e.gate_up,
                        2 * inter, false);
      llama_cpu::swiglu(pool_, e.gate_up, n, inter, e.act);
      llama_cpu::linear(pool_, e.act, inter, n, down.ref().rows_from(expert * h, inter), h, inter, e.out, h, false);
      for (int32_t r = 0; r < n; ++r) {
        const float weight = e.routing.weights[std::size_t(first + r)];
        float* sum = e.sum + int64_t(e.routing.rows[std::size_t(first + r)]) * h;
        const float* out = e.out + int64_t(r) * h;
        for (int64_t i = 0; i < h; ++i) sum[i] += out[i] * weight;
      }
    }
    for (int64_t i = 0; i < tokens_ * h; ++i) x_[i] += e.sum[i];
  }

 private:
  int64_t qkv_width() const { return c_.q_size() + 2 * int64_t(c_.kv_size()); }

  plugins::ThreadPool& pool_;
  const LlamaConfig& c_;
  float* x_;
  DecoderScratch& scratch_;
  const pllm_attention_ref& attention_;
  int32_t kv_layer_;
  std::string_view who_;
  const TensorParallelRank* tensor_parallel_;
  int64_t tokens_;
  float eps_;
  float norm_offset_;  // 1: Gemma's (1 + w) norms
};

}  // namespace

void decoder_layer_forward(plugins::ThreadPool& pool, const LlamaConfig& c, const DecoderLayerWeights& layer, float* x,
                           DecoderScratch& scratch, const pllm_attention_ref& attention, int32_t kv_layer,
                           std::string_view who, const TensorParallelRank* tensor_parallel) {
  if (scratch.tokens() <= 0) return;
  CpuOps ops(pool, c, x, scratch, attention, kv_layer, who, tensor_parallel);
  llama::decoder_layer_definition(ops, c, layer);
}

}  // namespace pagedllm::llama_cpu
