#pragma once
// The device side of a step, written once for every caller (docs/architecture.md "The model
// runner"): the scheduler's block operations, the attention backend's plan() and the model's
// forward() (or the draft head's draft()), and the checks of what they return. The engine's step,
// a tensor-parallel worker's copy of it, the KV sizing profile and the speculative decoder's
// drafts all run through it, and a ModelStep is the one shape of a step that crosses from the
// engine to the workers (tensor_parallel.h encodes it).

#include <cstdint>
#include <span>

#include "core/plugin/plugin_instance.h"
#include "pagedllm/sdk/attention.h"
#include "pagedllm/sdk/batch.h"
#include "pagedllm/sdk/model.h"
#include "pagedllm/sdk/speculator.h"

namespace pagedllm {

// One step as the device runs it: the batch (its arrays owned by the caller) and the block
// operations to do before its forward, in SchedulerOutput's order.
struct ModelStep {
  pllm_batch batch{};
  std::span<const pllm_block_copy> swap_out;
  std::span<const pllm_block_copy> swap_in;
  std::span<const pllm_block_copy> copies;
};

// What forward() returned, in the model's workspace on its device until its next forward:
// logits [num_logits, vocab_size] and hidden states [num_hidden, hidden_size], f32 (empty
// tensors where the batch asked for none).
struct ForwardOutputs {
  pllm_tensor logits{};
  pllm_tensor hidden{};
};

class ModelRunner {
 public:
  // `info` gives the shapes forward() must return. The instances outlive the runner.
  ModelRunner(const AttentionInstance& attention, const ModelInstance& model, const pllm_model_info& info)
      : attention_(attention), model_(model), vocab_size_(info.vocab_size), hidden_size_(info.hidden_size) {}

  // The step's block operations, then forward(step.batch).
  ForwardOutputs execute(const ModelStep& step) const;
  // plan() and forward() of a batch. Throws PluginCallError for a failed call, and (as an internal
  // error of the model plugin) for logits or hidden states of another shape or dtype.
  ForwardOutputs forward(const pllm_batch& batch) const;
  // plan() of the draft batch, then the speculator's draft(): logits [num_logits, vocab_size] f32 in
  // its workspace. `features`: the target's hidden states the rows read (null: the draft's own).
  pllm_tensor draft(const SpeculatorInstance& speculator, const pllm_batch& batch, const pllm_tensor* features,
                    const std::int32_t* feature_rows) const;

 private:
  void run_block_operations(const ModelStep& step) const;
  void plan(const pllm_batch& batch, const char* what) const;

  const AttentionInstance& attention_;
  const ModelInstance& model_;
  std::int64_t vocab_size_;
  std::int64_t hidden_size_;
};

}  // namespace pagedllm
