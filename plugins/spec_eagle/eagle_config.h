#pragma once
// What both draft heads (eagle_head.h on the CPU, cuda_eagle_head.h on CUDA)
// check and bind at load: the draft's config.json against the target's sizes,
// and the target's embedding and lm_head, shared through get_tensor.

#include <filesystem>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::spec_eagle {

// Reads `draft_dir`/config.json: a LlamaConfig with num_hidden_layers 1, an
// optional "eagle" section whose version must be 1, and hidden_size,
// vocab_size, num_key_value_heads and head_dim equal to the target's. Throws
// pllm::Error naming the file and the key otherwise (and for no target).
// With a tensor-parallel group of N ranks (`tensor_parallel_size`), the target
// reports its rank's kv heads, which the draft's split must equal.
llama::LlamaConfig load_eagle_config(const std::filesystem::path& draft_dir, const pllm_speculator_target& target,
                                     int32_t tensor_parallel_size = 1);

// The target's model.embed_tokens.weight and lm_head.weight (the embedding
// when the target has none: tied), [vocab, hidden] views of its memory.
struct SharedWeights {
  pllm_tensor embed;
  pllm_tensor lm_head;
};

// Looks both up and requires each to be on `device` in `dtype` (INVALID: any
// of f32, f16, bf16), [vocab_rows, hidden] with contiguous rows (vocab_rows:
// the vocabulary, or a tensor-parallel rank's rows of it). Throws pllm::Error: PLLM_ERROR_UNSUPPORTED for
// a target without get_tensor and for a tensor on another device or in
// another dtype (naming both), the target's own error when its get_tensor fails.
SharedWeights shared_weights(const pllm_speculator_target& target, const llama::LlamaConfig& c, pllm_device device,
                             pllm_dtype dtype, int64_t vocab_rows);

// "cpu", "cuda:0".
std::string device_label(pllm_device device);

}  // namespace pagedllm::spec_eagle
