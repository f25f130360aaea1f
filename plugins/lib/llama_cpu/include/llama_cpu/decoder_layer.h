#pragma once
// The decoder layer (llama_common/decoder_layer_definition.h) on the CPU,
// shared by models_llama (its every layer) and spec_eagle (EAGLE's single
// layer, which has no input_layernorm): the definition's operations on host
// f32 activations, in place on x [tokens, hidden], with attention (GQA, paged
// KV) done by the backend core passed in, as KV layer `kv_layer`.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.h"
#include "common/thread_pool.h"
#include "llama_cpu/buffer.h"
#include "llama_common/expert_routing.h"
#include "llama_common/llama_config.h"
#include "llama_common/weight_layout.h"
#include "llama_cpu/weight_loader.h"
#include "llama_cpu/weights.h"

namespace pagedllm::llama_cpu {

using llama::LlamaConfig;

// A layer's weights in the fused layout of llama_common/weight_layout.h:
// the matrices in the model's weight dtype, the norms and biases in f32; an
// empty one (input_norm, a bias, q_norm / k_norm): the layer has none.
struct DecoderLayerWeights {
  WeightStorage input_norm, qkv, o, post_norm, gate_up, down;
  WeightStorage qkv_bias, o_bias, gate_up_bias, down_bias, q_norm, k_norm;
  WeightStorage attn_out_norm, mlp_out_norm;  // sandwich norms (Gemma)
  // A mixture-of-experts layer's, in place of gate_up and down (the router in the weight dtype, never int8:
  // a rounded router would change which experts a token reaches).
  WeightStorage router, experts_gate_up, experts_down;
  // Gives the matrices `dtype` (before loading; the norms stay f32).
  void set_matrix_dtype(pllm_dtype dtype) {
    for (WeightStorage* m : {&qkv, &o, &gate_up, &down, &router, &experts_gate_up, &experts_down}) m->set_dtype(dtype);
  }
  // How the matrices are multiplied when they are bf16 (weights.h).
  void set_matrix_bf16_compute(Bf16Compute compute) {
    for (WeightStorage* m : {&qkv, &o, &gate_up, &down, &router, &experts_gate_up, &experts_down}) {
      m->set_bf16_compute(compute);
    }
  }
  // Quantizes the matrices to int8 at load instead (quantization: int8_*).
  void set_matrix_int8(Int8Compute compute) {
    for (WeightStorage* m : {&qkv, &o, &gate_up, &down, &experts_gate_up, &experts_down}) m->set_int8(compute);
  }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const WeightStorage* w : {&input_norm, &qkv, &o, &post_norm, &gate_up, &down, &qkv_bias, &o_bias,
                                   &gate_up_bias, &down_bias, &q_norm, &k_norm, &attn_out_norm, &mlp_out_norm,
                                   &router, &experts_gate_up, &experts_down}) {
      total += w->bytes();
    }
    return total;
  }
  // The storage of one of the layer's matrices (Matrix::kInputNorm ... kKNorm).
  WeightStorage& matrix(llama::Matrix m);
};

class TensorParallelShard;  // tensor_parallel_shard.h

// The part that loads `slot` of the whole model (no tensor parallelism) into `storage`: a block of the
// checkpoint tensor where the slot is one of a fused tensor (weight_layout.h).
WeightPart whole_model_part(const llama::WeightSlot& slot, WeightStorage* storage);

// Appends the checkpoint tensors of the layer named `prefix` ("model.layers.3.",
// "layers.0.") of the model `c` to `parts`, placed into `layer`: the whole
// tensors, or `shard`'s blocks of them.
void add_decoder_layer_parts(std::vector<WeightPart>& parts, const LlamaConfig& c, const std::string& prefix,
                             DecoderLayerWeights& layer, bool input_layernorm,
                             const TensorParallelShard* shard = nullptr);

// A rank of a tensor-parallel group (docs/tensor-parallel.md): its layer holds
// its heads and its columns of gate/up (rows of o/down), and the partial
// products of the row-parallel o_proj and down_proj meet in `all_reduce`
// (an in-place sum over the ranks of `count` floats). Rank 0 adds its partial
// to the residual, the others write theirs in its place, so that the sum is
// residual + every rank's partial.
struct TensorParallelRank {
  int32_t rank = 0;
  int32_t size = 1;
  std::function<void(float* data, int64_t count, std::string_view what)> all_reduce;
};

// The per-step state of the layers: scratch sized for the step's rows and
// their RoPE tables, computed once by prepare() and shared by every layer.
class DecoderScratch {
 public:
  // The activation buffers of the definition's operations.
  struct Buffers {
    float *normed = nullptr, *qkv = nullptr, *attn = nullptr, *gate_up = nullptr, *act = nullptr;
  };
  // A mixture-of-experts layer's: the router's logits [tokens, experts], the rows routed to one expert
  // (at most every token), its products, the weighted sum [tokens, hidden], and the routing.
  struct Experts {
    float *logits = nullptr, *in = nullptr, *gate_up = nullptr, *act = nullptr, *out = nullptr, *sum = nullptr;
    llama::ExpertRouting routing;
  };

  void prepare(plugins::ThreadPool& pool, const LlamaConfig& c, const std::vector<double>& inv_freq,
               const int32_t* positions, int64_t tokens);
  int64_t tokens() const { return tokens_; }
  const Buffers& buffers() const { return buffers_; }
  Experts& experts() { return experts_; }
  // The RoPE tables of layer `layer` (Gemma 3's local layers have their own: LlamaConfig::local_rope).
  const float* cos(const LlamaConfig& c, int32_t layer) const { return c.local_rope(layer) ? local_cos_ : cos_; }
  const float* sin(const LlamaConfig& c, int32_t layer) const { return c.local_rope(layer) ? local_sin_ : sin_; }

 private:
  int64_t tokens_ = 0;
  Buffers buffers_;
  Experts experts_;
  float *cos_ = nullptr, *sin_ = nullptr, *local_cos_ = nullptr, *local_sin_ = nullptr;
  std::vector<double> local_inv_freq_;
  Buffer normed_buf_, qkv_buf_, attn_buf_, gate_up_buf_, act_buf_, cos_buf_, sin_buf_, local_cos_buf_, local_sin_buf_;
  Buffer logits_buf_, expert_in_buf_, expert_gate_up_buf_, expert_act_buf_, expert_out_buf_, expert_sum_buf_;
};

// Runs the layer over x [scratch.tokens(), hidden]; `c` is the rank's view of
// the model (its heads and intermediate columns) when `tensor_parallel` is set. `who` prefixes errors (the
// attention backend's failure, with the layer).
void decoder_layer_forward(plugins::ThreadPool& pool, const LlamaConfig& c, const DecoderLayerWeights& layer, float* x,
                           DecoderScratch& scratch, const pllm_attention_ref& attention, int32_t kv_layer,
                           std::string_view who, const TensorParallelRank* tensor_parallel = nullptr);

}  // namespace pagedllm::llama_cpu
