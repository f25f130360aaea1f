#pragma once
// The Llama architecture on the CPU: loads an HF LlamaForCausalLM directory
// into a compute-friendly f32 layout and runs one batched, varlen forward per
// engine step (mixed prefill chunks and decodes), attending through the
// attention backend core passes in.
//
// Weight layout (converted to f32 once at load; the checkpoint is unmapped
// afterwards):
//   embed      [vocab, hidden]                       model.embed_tokens.weight
//   per layer  the fused layout of plugins/llama_cpu/decoder_layer.h
//              (qkv, o, gate_up, down, input_norm, post_norm)
//   norm       [hidden]
//   lm_head    [vocab, hidden]  (the embedding itself when tied)
// Fusing q/k/v and gate/up makes one GEMM of each group; every HF tensor is
// still a contiguous row range of a fused one, so get_tensor() serves any name.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.h"
#include "plugins/common/thread_pool.h"
#include "plugins/llama_cpu/buffer.h"
#include "plugins/llama_cpu/decoder_layer.h"
#include "plugins/llama_cpu/llama_config.h"

namespace pagedllm::models_llama {

using llama_cpu::Buffer;
using llama_cpu::LlamaConfig;

class LlamaModel {
 public:
  // Loads and validates config and weights; reports progress through the host.
  LlamaModel(const std::filesystem::path& model_dir, int num_threads);

  const LlamaConfig& config() const { return config_; }
  int num_threads() const { return pool_.size(); }
  // Bytes of f32 weights held (the tied lm_head counted once).
  std::size_t weight_bytes() const;

  // Runs `batch` (already planned into `attention` by core): logits of
  // batch.logits_indices rows and post-norm hidden states of
  // batch.hidden_indices rows, in memory valid until the next forward.
  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out);

  // A weight by its HF name, as an f32 view of this model's memory (not to be
  // written). PLLM_ERROR_NOT_FOUND for other names.
  pllm_tensor tensor(std::string_view name) const;

 private:
  // Where a checkpoint tensor lives in the f32 layout.
  struct Slot {
    float* data;
    std::vector<int64_t> shape;
  };

  void load_weights(const std::filesystem::path& model_dir);
  const float* lm_head() const { return config_.tie_word_embeddings ? embed_.data() : lm_head_.data(); }

  LlamaConfig config_;
  plugins::ThreadPool pool_;
  std::vector<double> inv_freq_;
  std::vector<float> embed_, norm_, lm_head_;
  std::vector<llama_cpu::DecoderLayerWeights> layers_;
  std::map<std::string, Slot, std::less<>> slots_;

  // Forward scratch, sized for the largest step seen so far.
  llama_cpu::DecoderScratch scratch_;
  Buffer x_, rows_, logits_, hidden_;
};

}  // namespace pagedllm::models_llama
