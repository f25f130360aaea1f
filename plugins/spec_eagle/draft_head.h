#pragma once
// The EAGLE-1 draft model behind spec_eagle's SDK glue, on the CPU
// (eagle_head.h) or on CUDA (cuda_eagle_head.h): both compute
//
//   x   = fc(cat(embed(x_{t+1}), f_t)) (+ fc.bias)     cat order: embedding first
//   x   = one Llama decoder layer without input_layernorm, RoPE at p_t,
//         attending as KV layer (target num_layers + 0) in the shared paged pool
//   g   = x: the predicted feature f_{t+1} (no final norm), kept for the chain
//   out = lm_head(g) for the logits rows, f32 on the head's device (host memory
//         on the CPU)
//
// with the target's embedding and lm_head (get_tensor), and, given a reduced
// draft vocabulary, logits only for its ids (-inf elsewhere).

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"

namespace pagedllm::spec_eagle {

class DraftHead {
 public:
  virtual ~DraftHead() = default;

  virtual const llama::LlamaConfig& config() const = 0;

  // One draft forward (see pllm_draft_args): logits [batch.num_logits, vocab]
  // f32 (out = above), valid until the next call. Keeps the predicted
  // features of those rows for a following call without features.
  virtual void draft(const pllm_draft_args& args, pllm_draft_output& out) = 0;
};

}  // namespace pagedllm::spec_eagle
