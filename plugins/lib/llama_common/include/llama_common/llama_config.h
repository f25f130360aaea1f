#pragma once
// The hyper-parameters of an HF LlamaForCausalLM directory (config.json, plus
// eos ids from generation_config.json), parsed strictly: a missing required
// key, a value of the wrong type or range, or inconsistent sizes are errors
// naming the file and the key. config.json is read as transformers 4.x and 5.x
// write it (5's rope_parameters, flat or nested by layer type, and dtype; 4's
// rope_theta, rope_scaling and torch_dtype): two spellings of one setting that
// disagree are refused, and so is any key that no reader consumes and that is
// not on the list of harmless keys (config_keys.h). A GGUF file's metadata is
// held to the same rule.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagedllm::llama {

// config.json's rope_scaling: how inv_freq is rescaled (see rope.h). kFactors is
// a GGUF file's rope_freqs.weight (llama.cpp's convert script precomputes llama3
// scaling into it): inv_freq[i] is divided by freq_factors[i]. kLongRope (Phi-3)
// divides by short_factor[i] or long_factor[i] (rope_freq.h says which); kYarn
// (YaRN: Qwen2.5's and Qwen3's long-context setting, DeepSeek's) blends each
// frequency between itself and itself / factor by a ramp over the dimensions
// between beta_fast and beta_slow rotations of the original context. Both scale
// the attention by attention_factor (transformers multiplies cos and sin by it).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kFactors, kLongRope, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 0.0;
  double high_freq_factor = 0.0;
  // llama3, longrope and yarn.
  double original_max_position_embeddings = 0.0;
  std::vector<double> freq_factors;  // kFactors only: head_dim / 2 of them
  // kLongRope only: head_dim / 2 of each.
  std::vector<double> short_factor, long_factor;
  // kYarn only: the ramp's ends, in rotations over the original context, and whether its ends are rounded
  // outwards to whole dimensions (transformers' `truncate`, true unless the config says false).
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // kLongRope and kYarn: the factor on q and k (so on the scores, squared); 1 for the others.
  double attention_factor = 1.0;
  bool operator==(const RopeScaling&) const = default;
};

// config.json's quantization_config of a compressed-tensors int8 checkpoint (the
// format llm-compressor writes and vLLM serves: its W8A8 and W8A16 schemes).
// Every quantized Linear stores `<name>.weight` as I8 (format int-quantized or
// naive-quantized) or packed four to an I32 as `<name>.weight_packed` with its
// `<name>.weight_shape` (pack-quantized), next to `<name>.weight_scale`: one
// scale per output row (strategy channel) or one for the tensor (strategy
// tensor), symmetric (no zero point), so w = q * scale. Which modules are
// quantized is what the file stores: the config's targets and ignore list only
// decided that when it was written. Everything else compressed-tensors can
// describe (other bit widths, group or block scales, zero points, float
// formats, static activation scales, sparsity, transforms, a quantized KV
// cache) is refused naming the field.
struct Int8Checkpoint {
  // input_activations: int8, symmetric, dynamic, per token (W8A8). False: none (W8A16, weight-only).
  bool dynamic_int8_activations = false;
};

// The decoder-only families models_llama serves. All share one decoder layer
// (llama_common/decoder_layer_definition.h); a family differs in which of its
// optional parts it has (the fields of LlamaConfig below) and in how its
// config.json and GGUF metadata spell them.
enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen3Moe, kGemma3, kPhi3 };

// The gated MLP's activation: out = act(gate) * up.
enum class Activation {
  kSilu,      // SwiGLU (hidden_act silu)
  kGeluTanh,  // GeGLU with GELU's tanh approximation (Gemma's gelu_pytorch_tanh)
};

// "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gemma3_text", "phi3": the model_type
// config.json writes for `a`.
std::string_view architecture_name(Architecture a);
// "LlamaForCausalLM", ...: the class config.json's `architectures` names for `a`.
std::string_view architecture_class(Architecture a);

struct LlamaConfig {
  Architecture architecture = Architecture::kLlama;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // absent: num_heads (HF's default)
  int32_t head_dim = 0;      // absent: hidden_size / num_heads
  int32_t max_position_embeddings = 0;
  double rms_norm_eps = 0.0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // The optional parts of the decoder layer:
  bool qkv_bias = false;  // q/k/v projections add a bias (Qwen2 always; Llama's and Qwen3's attention_bias)
  bool o_bias = false;    // o_proj adds one (Llama's and Qwen3's attention_bias)
  bool mlp_bias = false;  // gate/up/down add one (Llama's mlp_bias)
  bool qk_norm = false;   // q and k heads RMS-normalised (weights [head_dim]) before RoPE (Qwen3, Gemma 3)
  // Phi-3's checkpoint stores q/k/v as one qkv_proj and gate/up as one gate_up_proj (weight_layout.h).
  bool fused_checkpoint_tensors = false;
  Activation hidden_activation = Activation::kSilu;
  // Gemma's: every RMSNorm multiplies by (1 + w), its checkpoint storing w (the final norm's and q/k's too).
  bool unit_offset_norms = false;
  // Gemma's: the attention and MLP outputs are RMS-normalised (post_attention_layernorm,
  // post_feedforward_layernorm) before they join the residual; the MLP's input norm is then
  // pre_feedforward_layernorm.
  bool sandwich_norms = false;
  // Gemma's: the embedding rows are multiplied by sqrt(hidden_size), rounded to the activation dtype.
  bool scale_embedding = false;
  // The attention's softmax scale is query_pre_attn_scalar^-1/2 (Gemma); 0: head_dim's.
  double query_pre_attn_scalar = 0.0;
  // > 0: logits = tanh(logits / cap) * cap (Gemma's final_logit_softcapping).
  double final_logit_softcapping = 0.0;
  // > 0: the sliding-window layers rotate by this base without rope_scaling (Gemma 3's
  // rope_local_base_freq); the others by rope_theta and rope_scaling.
  double local_rope_theta = 0.0;
  // A mixture of experts in place of the MLP (Mixtral, Qwen3-MoE), in the layers moe_layers marks: a
  // router [num_experts, hidden] picks, per token, the num_experts_per_tok experts of highest softmax
  // probability (renormalised to sum 1 when normalize_top_k), whose SwiGLU MLPs of
  // expert_intermediate_size columns are summed with those weights. num_experts 0: every layer dense.
  // Per layer: > 0, its attention's sliding window (the row at position p sees keys (p - w, p]); 0 or
  // absent, the whole context (Mistral's and Mixtral's sliding_window, Qwen's windowed layers).
  std::vector<int32_t> layer_windows;
  int32_t num_experts = 0;
  int32_t num_experts_per_tok = 0;
  int32_t expert_intermediate_size = 0;
  bool normalize_top_k = false;
  std::vector<bool> moe_layers;  // num_layers entries when num_experts > 0
  int32_t bos_token_id = -1;  // -1: none
  // config.json's eos_token_id (an id or a list), then generation_config.json's
  // ids not already listed (Llama 3 instruct models add <|eot_id|> there).
  std::vector<int32_t> eos_token_ids;
  // A pre-quantized checkpoint (config.json's quantization_config); none for a float one.
  std::optional<Int8Checkpoint> int8_checkpoint;

  int32_t q_size() const { return num_heads * head_dim; }
  int32_t sliding_window(int32_t layer) const {
    return layer >= 0 && std::size_t(layer) < layer_windows.size() ? layer_windows[std::size_t(layer)] : 0;
  }
  bool is_moe_layer(int32_t layer) const {
    return layer >= 0 && std::size_t(layer) < moe_layers.size() && moe_layers[std::size_t(layer)];
  }
  int32_t kv_size() const { return num_kv_heads * head_dim; }
  // Whether layer `layer` rotates by local_rope_theta (rope_freq.h's local_rope_inv_freq).
  bool local_rope(int32_t layer) const { return local_rope_theta > 0.0 && sliding_window(layer) > 0; }
  // Layer `layer`'s softmax scale, times its RoPE's attention factor squared (the factor transformers puts on
  // q and k: longrope's and yarn's; Gemma 3's local layers rotate by their own base, unscaled).
  double attention_scale(int32_t layer) const {
    const double factor = local_rope(layer) ? 1.0 : rope_scaling.attention_factor;
    return factor * factor / std::sqrt(query_pre_attn_scalar > 0.0 ? query_pre_attn_scalar : double(head_dim));
  }

  // Reads `model_dir`/config.json (and generation_config.json when present), or,
  // when `model_dir` is a file, its GGUF metadata (from_gguf).
  // Throws pllm::Error: PLLM_ERROR_NOT_FOUND without config.json,
  // PLLM_ERROR_UNSUPPORTED for another architecture or a feature this code
  // lacks (biases, an activation other than silu, other rope scalings, a
  // quantization_config other than compressed-tensors int8 as above, a key
  // it does not understand),
  // PLLM_ERROR_INVALID_CONFIG otherwise. `who` (the plugin) names the reader
  // in messages about what it does not support.
  // `caller_keys`: top-level config.json keys the caller reads itself (spec_eagle's "eagle").
  static LlamaConfig load(const std::filesystem::path& model_dir, std::string_view who,
                          std::span<const std::string_view> caller_keys = {});
  // A GGUF file's llama.* keys (general.architecture must be llama), its
  // tokenizer.ggml bos/eos/eot ids, whether output.weight is absent (tied) and
  // rope_freqs.weight; errors name the file and the key, with the statuses above.
  static LlamaConfig from_gguf(const std::filesystem::path& gguf_path, std::string_view who);
};

}  // namespace pagedllm::llama
