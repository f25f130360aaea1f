#include "llama_cpu/decoder_layer.h"

#include "pagedllm/sdk.hpp"
#include "llama_common/attention_call.h"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/rope.h"
#include "llama_cpu/tensor_parallel_shard.h"

namespace pagedllm::llama_cpu {

WeightStorage& DecoderLayerWeights::matrix(llama::Matrix m) { return llama::decoder_layer_matrix(*this, m); }

void add_decoder_layer_parts(std::vector<WeightPart>& parts, const LlamaConfig& c, const std::string& prefix,
                             DecoderLayerWeights& layer, bool input_layernorm, const TensorParallelShard* shard) {
  for (const llama::WeightSlot& slot : llama::decoder_layer_slots(c, prefix, 0, input_layernorm)) {
    WeightStorage* storage = &layer.matrix(slot.matrix);
    parts.push_back(shard ? shard->part(slot, storage) : WeightPart{slot.name, slot.shape, storage, slot.first_row});
  }
}

void DecoderScratch::prepare(plugins::ThreadPool& pool, const LlamaConfig& c, const std::vector<double>& inv_freq,
                             const int32_t* positions, int64_t tokens) {
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };
  const int64_t h = c.hidden_size, inter = c.intermediate_size, half = c.head_dim / 2;
  tokens_ = tokens;
  normed_ = normed_buf_.reserve(n(tokens * h));
  qkv_ = qkv_buf_.reserve(n(tokens * (c.q_size() + 2 * c.kv_size())));
  attn_ = attn_buf_.reserve(n(tokens * c.q_size()));
  gate_up_ = gate_up_buf_.reserve(n(tokens * 2 * inter));
  act_ = act_buf_.reserve(n(tokens * inter));
  cos_ = cos_buf_.reserve(n(tokens * half));
  sin_ = sin_buf_.reserve(n(tokens * half));
  parallel_rows(pool, tokens, half * 40, [&](int64_t begin, int64_t end) {
    rope_tables(inv_freq, positions + begin, end - begin, cos_ + begin * half, sin_ + begin * half);
  });
}

void decoder_layer_forward(plugins::ThreadPool& pool, const LlamaConfig& c, const DecoderLayerWeights& layer, float* x,
                           DecoderScratch& s, const pllm_attention_ref& attention, int32_t kv_layer,
                           std::string_view who, const TensorParallelRank* tensor_parallel) {
  const int64_t tokens = s.tokens_, h = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  const int64_t q = c.q_size(), kv = c.kv_size(), qkv_width = q + 2 * kv, half = d / 2;
  if (tokens <= 0) return;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  const float* attn_in = x;
  if (!layer.input_norm.empty()) {
    rms_norm(pool, x, h, tokens, h, layer.input_norm.f32(), eps, s.normed_, h);
    attn_in = s.normed_;
  }
  linear(pool, attn_in, h, tokens, layer.qkv.ref(), qkv_width, h, s.qkv_, qkv_width, false);
  parallel_rows(pool, tokens, q + kv, [&](int64_t begin, int64_t end) {
    apply_rope(s.qkv_ + begin * qkv_width, end - begin, qkv_width, c.num_heads + c.num_kv_heads, d,
               s.cos_ + begin * half, s.sin_ + begin * half);
  });

  llama::run_attention_layer(attention, kv_layer, c, s.qkv_, s.attn_, tokens, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0},
                             nullptr, who);
  const bool add_to_residual = !tensor_parallel || tensor_parallel->rank == 0;
  linear(pool, s.attn_, q, tokens, layer.o.ref(), h, q, x, h, add_to_residual);
  if (tensor_parallel) tensor_parallel->all_reduce(x, tokens * h, "o_proj");
  rms_norm(pool, x, h, tokens, h, layer.post_norm.f32(), eps, s.normed_, h);
  linear(pool, s.normed_, h, tokens, layer.gate_up.ref(), 2 * inter, h, s.gate_up_, 2 * inter, false);
  swiglu(pool, s.gate_up_, tokens, inter, s.act_);
  linear(pool, s.act_, inter, tokens, layer.down.ref(), h, inter, x, h, add_to_residual);
  if (tensor_parallel) tensor_parallel->all_reduce(x, tokens * h, "down_proj");
}

}  // namespace pagedllm::llama_cpu
