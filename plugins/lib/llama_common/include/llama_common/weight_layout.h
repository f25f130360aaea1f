#pragma once
// Where the checkpoint tensors of an HF checkpoint of any family models_llama
// serves (llama_config.h's Architecture) go in the fused layout both forwards
// keep (the CPU one in host memory, the CUDA one in the compute dtype on the
// device), and the check of a checkpoint against a list of wanted tensors made
// before anything is allocated:
//
//   embed      [vocab, hidden]                                 model.embed_tokens.weight
//   per layer  qkv      [(heads + 2 kv_heads) * head_dim, hidden]  q_proj | k_proj | v_proj rows
//              o        [hidden, heads * head_dim]
//              gate_up  [2 * intermediate, hidden]                  gate_proj | up_proj rows
//              down     [hidden, intermediate]
//              input_norm, post_norm [hidden]
//              where the family has them (LlamaConfig's optional parts):
//              qkv_bias [(heads + 2 kv_heads) * head_dim], o_bias [hidden],
//              gate_up_bias [2 * intermediate], down_bias [hidden],
//              q_norm, k_norm [head_dim]
//              attn_out_norm, mlp_out_norm [hidden] (sandwich norms: Gemma's post_attention_layernorm and
//              post_feedforward_layernorm; its pre_feedforward_layernorm is then post_norm, the MLP's input norm)
//              a mixture-of-experts layer has, instead of gate_up and down:
//              router           [experts, hidden]
//              experts_gate_up  [experts * 2 * expert_inter, hidden]  expert e's gate | up rows from e * 2 * expert_inter
//              experts_down     [experts * hidden, expert_inter]      expert e's down rows from e * hidden
//   norm       [hidden]
//   lm_head    [vocab, hidden]  (absent when tied to the embedding)
//
// Fusing q/k/v and gate/up makes one GEMM of each group; every HF tensor is a
// contiguous row range of a fused matrix (a bias: of a fused vector). Phi-3 stores
// them fused already (self_attn.qkv_proj, mlp.gate_up_proj): each is then read as
// its q, k, v (gate, up) row blocks, one slot each, so that a tensor-parallel rank
// takes its heads (columns) of each part as it does from separate tensors.

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "llama_common/llama_config.h"
#include "llama_common/weight_source.h"

namespace pagedllm::llama {

enum class Matrix {
  kEmbed, kNorm, kLmHead,
  kInputNorm, kQkv, kO, kPostNorm, kGateUp, kDown,
  kQkvBias, kOBias, kGateUpBias, kDownBias, kQNorm, kKNorm,
  kRouter, kExpertsGateUp, kExpertsDown,
  kAttnOutNorm, kMlpOutNorm,
};

// One checkpoint tensor: rows [first_row, first_row + shape[0]) of `matrix`
// (of decoder layer `layer`; -1 for embed, norm and lm_head), whose rows are
// shape[1] wide (1 for a vector).
struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;
  Matrix matrix;
  int32_t layer;
  int64_t first_row;
  // A block of a fused checkpoint tensor of checkpoint_rows rows, from its row source_first_row; 0 rows:
  // the slot is the whole tensor.
  int64_t checkpoint_rows = 0;
  int64_t source_first_row = 0;

  int64_t width() const { return shape.size() > 1 ? shape[1] : 1; }
  bool fused_block() const { return checkpoint_rows > 0; }
  // The checkpoint tensor's shape (check_checkpoint requires it).
  std::vector<int64_t> checkpoint_shape() const {
    if (!fused_block()) return shape;
    std::vector<int64_t> whole = shape;
    whole[0] = checkpoint_rows;
    return whole;
  }
};

// The member of a decoder layer's weights (any struct with a member of each
// per-layer name above: the CPU's weight storage, the CUDA device pointers)
// that holds matrix `m`; PLLM_ERROR_INTERNAL for embed, norm, lm_head.
template <class Layer>
auto& decoder_layer_matrix(Layer& layer, Matrix m) {
  switch (m) {
    case Matrix::kInputNorm: return layer.input_norm;
    case Matrix::kQkv: return layer.qkv;
    case Matrix::kO: return layer.o;
    case Matrix::kPostNorm: return layer.post_norm;
    case Matrix::kGateUp: return layer.gate_up;
    case Matrix::kDown: return layer.down;
    case Matrix::kQkvBias: return layer.qkv_bias;
    case Matrix::kOBias: return layer.o_bias;
    case Matrix::kGateUpBias: return layer.gate_up_bias;
    case Matrix::kDownBias: return layer.down_bias;
    case Matrix::kQNorm: return layer.q_norm;
    case Matrix::kKNorm: return layer.k_norm;
    case Matrix::kRouter: return layer.router;
    case Matrix::kExpertsGateUp: return layer.experts_gate_up;
    case Matrix::kExpertsDown: return layer.experts_down;
    case Matrix::kAttnOutNorm: return layer.attn_out_norm;
    case Matrix::kMlpOutNorm: return layer.mlp_out_norm;
    case Matrix::kEmbed:
    case Matrix::kNorm:
    case Matrix::kLmHead:
      break;
  }
  throw pllm::Error(PLLM_ERROR_INTERNAL, "llama: not a decoder layer matrix");
}

// The tensors of the decoder layer named `prefix` ("model.layers.3.",
// "layers.0."); EAGLE's layer has no input_layernorm.
std::vector<WeightSlot> decoder_layer_slots(const LlamaConfig& c, const std::string& prefix, int32_t layer,
                                            bool input_layernorm);

// Every tensor of the model: embed, the layers, norm, and lm_head unless tied.
std::vector<WeightSlot> model_slots(const LlamaConfig& c);

struct CheckedTensors {
  std::vector<const SourceTensor*> views;  // in the order of the parts
  uint64_t stored_bytes = 0;                                 // bytes the parts take in the checkpoint
  std::vector<std::string> unused;                           // checkpoint tensors no part named
};

// Requires every part (anything with .name and .shape, or a block of a tensor:
// .checkpoint_shape()) in `checkpoint` with exactly its shape: a pllm::Error
// naming the file and tensor otherwise. stored_bytes counts what the parts read.
template <class Parts>
CheckedTensors check_checkpoint(const WeightSource& checkpoint, const Parts& parts) {
  CheckedTensors checked;
  std::set<std::string_view> used;
  for (const auto& part : parts) {
    if constexpr (requires { part.checkpoint_shape(); }) {
      checked.views.push_back(&checkpoint.require(part.name, part.checkpoint_shape()));
      const SourceTensor& view = *checked.views.back();
      if (!view.unreadable.empty()) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, view.unreadable);
      int64_t block = 1;
      for (int64_t d : part.shape) block *= d;
      checked.stored_bytes += block == view.numel() ? view.nbytes
                                                    : uint64_t(double(view.nbytes) * double(block) / double(view.numel()));
    } else {
      checked.views.push_back(&checkpoint.require(part.name, part.shape));
      if (!checked.views.back()->unreadable.empty()) {
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED, checked.views.back()->unreadable);
      }
      checked.stored_bytes += checked.views.back()->nbytes;
    }
    used.insert(part.name);
  }
  for (const std::string& name : checkpoint.names()) {
    if (!used.count(name)) checked.unused.push_back(name);
  }
  return checked;
}

// "a, b, c": the unused names for a log line.
std::string join_names(const std::vector<std::string>& names);

}  // namespace pagedllm::llama
