#include "llama_common/weight_layout.h"

namespace pagedllm::llama {

namespace {

// The router and every expert's gate / up / down, under the family's names (Mixtral's block_sparse_moe with
// w1 = gate, w3 = up, w2 = down; Qwen3-MoE's mlp with gate_proj / up_proj / down_proj).
void add_expert_slots(std::vector<WeightSlot>& slots, const LlamaConfig& c, const std::string& prefix,
                      int32_t layer) {
  const int64_t h = c.hidden_size, inter = c.expert_intermediate_size;
  const bool mixtral = c.architecture == Architecture::kMixtral;
  const std::string block = prefix + (mixtral ? "block_sparse_moe." : "mlp.");
  slots.push_back({block + "gate.weight", {c.num_experts, h}, Matrix::kRouter, layer, 0});
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string expert = block + "experts." + std::to_string(e) + ".";
    slots.push_back({expert + (mixtral ? "w1.weight" : "gate_proj.weight"), {inter, h}, Matrix::kExpertsGateUp,
                     layer, e * 2 * inter});
    slots.push_back({expert + (mixtral ? "w3.weight" : "up_proj.weight"), {inter, h}, Matrix::kExpertsGateUp, layer,
                     e * 2 * inter + inter});
    slots.push_back({expert + (mixtral ? "w2.weight" : "down_proj.weight"), {h, inter}, Matrix::kExpertsDown, layer,
                     e * h});
  }
}

}  // namespace

std::vector<WeightSlot> decoder_layer_slots(const LlamaConfig& c, const std::string& prefix, int32_t layer,
                                            bool input_layernorm) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  std::vector<WeightSlot> slots;
  if (input_layernorm) slots.push_back({prefix + "input_layernorm.weight", {h}, Matrix::kInputNorm, layer, 0});
  if (c.fused_checkpoint_tensors) {
    const std::string qkv = prefix + "self_attn.qkv_proj.weight";
    slots.push_back({qkv, {q, h}, Matrix::kQkv, layer, 0, q + 2 * kv, 0});
    slots.push_back({qkv, {kv, h}, Matrix::kQkv, layer, q, q + 2 * kv, q});
    slots.push_back({qkv, {kv, h}, Matrix::kQkv, layer, q + kv, q + 2 * kv, q + kv});
  } else {
    slots.push_back({prefix + "self_attn.q_proj.weight", {q, h}, Matrix::kQkv, layer, 0});
    slots.push_back({prefix + "self_attn.k_proj.weight", {kv, h}, Matrix::kQkv, layer, q});
    slots.push_back({prefix + "self_attn.v_proj.weight", {kv, h}, Matrix::kQkv, layer, q + kv});
  }
  slots.push_back({prefix + "self_attn.o_proj.weight", {h, q}, Matrix::kO, layer, 0});
  if (c.sandwich_norms) {
    slots.push_back({prefix + "post_attention_layernorm.weight", {h}, Matrix::kAttnOutNorm, layer, 0});
    slots.push_back({prefix + "pre_feedforward_layernorm.weight", {h}, Matrix::kPostNorm, layer, 0});
    slots.push_back({prefix + "post_feedforward_layernorm.weight", {h}, Matrix::kMlpOutNorm, layer, 0});
  } else {
    slots.push_back({prefix + "post_attention_layernorm.weight", {h}, Matrix::kPostNorm, layer, 0});
  }
  if (c.is_moe_layer(layer)) {
    add_expert_slots(slots, c, prefix, layer);
  } else if (c.fused_checkpoint_tensors) {
    // Phi-3's gate_up_proj: gate rows, then up rows (transformers chunks it in that order).
    const std::string gate_up = prefix + "mlp.gate_up_proj.weight";
    slots.push_back({gate_up, {inter, h}, Matrix::kGateUp, layer, 0, 2 * inter, 0});
    slots.push_back({gate_up, {inter, h}, Matrix::kGateUp, layer, inter, 2 * inter, inter});
    slots.push_back({prefix + "mlp.down_proj.weight", {h, inter}, Matrix::kDown, layer, 0});
  } else {
    slots.push_back({prefix + "mlp.gate_proj.weight", {inter, h}, Matrix::kGateUp, layer, 0});
    slots.push_back({prefix + "mlp.up_proj.weight", {inter, h}, Matrix::kGateUp, layer, inter});
    slots.push_back({prefix + "mlp.down_proj.weight", {h, inter}, Matrix::kDown, layer, 0});
  }
  if (c.qkv_bias) {
    slots.push_back({prefix + "self_attn.q_proj.bias", {q}, Matrix::kQkvBias, layer, 0});
    slots.push_back({prefix + "self_attn.k_proj.bias", {kv}, Matrix::kQkvBias, layer, q});
    slots.push_back({prefix + "self_attn.v_proj.bias", {kv}, Matrix::kQkvBias, layer, q + kv});
  }
  if (c.o_bias) slots.push_back({prefix + "self_attn.o_proj.bias", {h}, Matrix::kOBias, layer, 0});
  if (c.mlp_bias) {
    slots.push_back({prefix + "mlp.gate_proj.bias", {inter}, Matrix::kGateUpBias, layer, 0});
    slots.push_back({prefix + "mlp.up_proj.bias", {inter}, Matrix::kGateUpBias, layer, inter});
    slots.push_back({prefix + "mlp.down_proj.bias", {h}, Matrix::kDownBias, layer, 0});
  }
  if (c.qk_norm) {
    slots.push_back({prefix + "self_attn.q_norm.weight", {c.head_dim}, Matrix::kQNorm, layer, 0});
    slots.push_back({prefix + "self_attn.k_norm.weight", {c.head_dim}, Matrix::kKNorm, layer, 0});
  }
  return slots;
}

std::vector<WeightSlot> model_slots(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  std::vector<WeightSlot> slots;
  slots.push_back({"model.embed_tokens.weight", {v, h}, Matrix::kEmbed, -1, 0});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    for (WeightSlot& s : decoder_layer_slots(c, "model.layers." + std::to_string(l) + ".", l, true)) {
      slots.push_back(std::move(s));
    }
  }
  slots.push_back({"model.norm.weight", {h}, Matrix::kNorm, -1, 0});
  if (!c.tie_word_embeddings) slots.push_back({"lm_head.weight", {v, h}, Matrix::kLmHead, -1, 0});
  return slots;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

}  // namespace pagedllm::llama
