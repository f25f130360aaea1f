#pragma once
// The EAGLE-1 draft model on the CPU (tools/train/model.py, class EagleHead;
// what it computes: draft_head.h). Row t of a draft batch is the pair
// (feature f_t at position p_t, token x_{t+1} that follows it). The embedding
// and lm_head are the target's CPU tensors (f32, bf16 or f16: the target's
// weight dtype), read through its get_tensor(); the head holds only fc and
// layers.0 (widened to f32 at load). With a draft vocabulary (draft_vocab.h)
// it also holds a copy of those lm_head rows, in the target's dtype.
//
// Under tensor parallelism (a target that is one rank's shard) the head is
// split as the target is (llama_cpu::TensorParallelShard): layers.0 by heads
// and intermediate columns, its KV layer holding the rank's kv heads; fc is
// whole on every rank. The embedding is the rank's vocabulary rows, summed
// over the ranks; the logits are each rank's vocabulary columns, gathered.
// Every rank computes the same predicted features, so the chain needs no
// message of its own.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "pagedllm/sdk.h"
#include "common/thread_pool.h"
#include "llama_cpu/buffer.h"
#include "llama_cpu/decoder_layer.h"
#include "llama_cpu/tensor_parallel_shard.h"
#include "llama_cpu/weights.h"
#include "llama_common/llama_config.h"
#include "draft_head.h"
#include "draft_vocab.h"

namespace pagedllm::spec_eagle {

class EagleHead final : public DraftHead {
 public:
  // Loads `draft_dir` (config.json with num_hidden_layers 1, model.safetensors
  // with fc.weight [hidden, 2 hidden], optional fc.bias, layers.0.*) and binds
  // the target's embedding and lm_head. Throws pllm::Error naming the file or
  // tensor for a missing or malformed checkpoint and for a draft whose sizes
  // do not match the target's. `draft_vocab` (ascending token ids, from
  // load_draft_vocab; empty: the whole vocabulary) are the tokens it may draft.
  // `collectives` (may be null): the target's tensor-parallel group.
  // `bf16_compute`: how bf16 matrices (the target's lm_head) are multiplied (llama_cpu/weights.h).
  EagleHead(const std::filesystem::path& draft_dir, const pllm_speculator_target& target,
            std::vector<int32_t> draft_vocab, int num_threads, const pllm_collectives_ref* collectives,
            llama_cpu::Bf16Compute bf16_compute = llama_cpu::Bf16Compute::kVdpbf16ps);

  const llama_cpu::LlamaConfig& config() const override { return config_; }
  int num_threads() const { return pool_.size(); }

  void draft(const pllm_draft_args& args, pllm_draft_output& out) override;

 private:
  void bind_target(const pllm_speculator_target& target);
  void load_weights(const std::filesystem::path& draft_dir);

  // Lays the draft's lm_head input `features` [rows, hidden] out as logits [rows, vocab].
  float* lm_head_logits(const float* features, int64_t rows);

  llama_cpu::LlamaConfig full_config_;  // the checkpoint's
  // This rank's part of the head; none: the whole head.
  std::optional<llama_cpu::TensorParallelShard> shard_;
  llama_cpu::LlamaConfig config_;  // the layer this process runs: the rank's heads under tensor parallelism
  int32_t target_layers_ = 0;
  plugins::ThreadPool pool_;
  std::vector<double> inv_freq_;
  llama_cpu::Bf16Compute bf16_compute_;

  // Target-owned [vocab, hidden] (valid as long as the target model); rows
  // embed_stride_ elements apart.
  llama_cpu::WeightsRef embed_;
  int64_t embed_stride_ = 0;
  // The lm_head the draft multiplies by: the target's [vocab, hidden] (the
  // rank's vocabulary rows under tensor parallelism), or draft_lm_head_, its
  // rows of the draft vocabulary.
  llama_cpu::WeightsRef lm_head_;
  std::vector<int32_t> draft_vocab_;
  // Under tensor parallelism: draft_lm_head_'s rows as this rank's vocabulary
  // columns (id - vocab_first), ascending.
  std::vector<int32_t> shard_draft_vocab_;
  llama_cpu::WeightStorage draft_lm_head_;

  llama_cpu::WeightStorage fc_, fc_bias_;  // [hidden, 2 hidden], [hidden] f32 (empty: no bias)
  llama_cpu::DecoderLayerWeights layer_;

  llama_cpu::DecoderScratch scratch_;
  llama_cpu::Buffer input_, embed_rows_, x_, draft_logits_, logits_, shard_logits_, gathered_logits_;
  DraftVocabLogits vocab_logits_;  // with a draft vocabulary: the full rows
  // Predicted features of the previous call's logits rows; -1 rows: none kept.
  std::vector<float> chain_;
  int64_t chain_rows_ = -1;
};

}  // namespace pagedllm::spec_eagle
