#pragma once
// The Llama architecture on the CPU: loads an HF LlamaForCausalLM directory
// into a compute-friendly f32 layout and runs one batched, varlen forward per
// engine step (mixed prefill chunks and decodes), attending through the
// attention backend core passes in.
//
// Weights are converted to f32 once at load (the checkpoint is unmapped
// afterwards) into the fused layout of plugins/llama_common/weight_layout.h;
// every HF tensor is a contiguous row range of a fused matrix, so
// get_tensor() serves any name (a tied lm_head is the embedding itself).

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
#include "plugins/llama_common/llama_forward.h"

namespace pagedllm::models_llama {

using llama_cpu::Buffer;
using llama::LlamaConfig;

class LlamaModel final : public llama::LlamaForward {
 public:
  // Loads and validates config and weights; reports progress through the host.
  LlamaModel(const std::filesystem::path& model_dir, int num_threads);

  const LlamaConfig& config() const override { return config_; }
  pllm_dtype dtype() const override { return PLLM_DTYPE_F32; }
  std::string describe() const override;
  // Bytes of f32 weights held (the tied lm_head counted once).
  std::size_t weight_bytes() const;

  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) override;
  // An f32 host view.
  pllm_tensor tensor(std::string_view name) const override;

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
