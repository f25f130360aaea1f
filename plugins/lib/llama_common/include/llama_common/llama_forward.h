#pragma once
// A loaded Llama that runs engine steps: what models_llama's SDK glue needs of
// its CPU model (plugins/models_llama/llama_model.h) and its CUDA model
// (plugins/lib/llama_cuda) alike.

#include <string>
#include <string_view>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::llama {

class LlamaForward {
 public:
  virtual ~LlamaForward() = default;

  virtual const LlamaConfig& config() const = 0;
  // The dtype of activations, and of the KV cache unless the host's cache.dtype picks another.
  virtual pllm_dtype dtype() const = 0;
  // Where it runs and how, for the plugin's log line ("4 threads", "cuda:0, bf16").
  virtual std::string describe() const = 0;

  // Runs `batch` (already planned into `attention` by core): f32 logits of
  // batch.logits_indices rows and post-norm hidden states of
  // batch.hidden_indices rows, in the model's device memory (host memory on
  // the CPU) valid until the next forward, complete when it returns.
  virtual void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) = 0;

  // A weight by its HF name, as a view of this model's memory on its device
  // (not to be written). PLLM_ERROR_NOT_FOUND for other names.
  virtual pllm_tensor tensor(std::string_view name) const = 0;
};

}  // namespace pagedllm::llama
