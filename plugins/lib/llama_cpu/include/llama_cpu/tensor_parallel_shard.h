#pragma once
// One rank's part of a Llama model under tensor parallelism (docs/tensor-parallel.md, "What each
// rank holds"), shared by models_llama (the target) and spec_eagle (the EAGLE head, split the same
// way so that its KV layer holds the same kv heads as the target's): the split (llama_common's
// TensorParallelSplit, which the CUDA forward shares), the checkpoint block each weight loads from as
// the CPU loader's WeightPart, and the collectives calls that join the ranks.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"
#include "llama_common/tensor_parallel_split.h"
#include "llama_common/weight_layout.h"
#include "llama_cpu/decoder_layer.h"
#include "llama_cpu/weight_loader.h"

namespace pagedllm::llama_cpu {

class TensorParallelShard {
 public:
  // The shard of `full` this process holds in the group `collectives` (may be null); nullopt when
  // there is none or it has one rank. Throws pllm::Error prefixed with `who` ("models_llama") naming
  // the numbers when the heads, kv heads or intermediate size do not divide among the ranks.
  static std::optional<TensorParallelShard> join(const LlamaConfig& full, const pllm_collectives_ref* collectives,
                                                 const std::string& who);

  int32_t rank() const { return split_.rank(); }
  int32_t size() const { return split_.size(); }
  // The rank's view of the model, its vocabulary rows and kv heads: llama::TensorParallelSplit's.
  const llama::TensorParallelSplit& split() const { return split_; }
  const LlamaConfig& config() const { return split_.config(); }
  int64_t vocab_shard() const { return split_.vocab_shard(); }
  int64_t vocab_first() const { return split_.vocab_first(); }
  int64_t vocab_rows() const { return split_.vocab_rows(); }
  int32_t kv_head_first() const { return split_.kv_head_first(); }
  // For decoder_layer_forward: the all-reduces after o_proj and down_proj.
  const TensorParallelRank& layer_rank() const { return layer_rank_; }

  // The checkpoint block of `slot` this rank loads into `storage`.
  WeightPart part(const llama::WeightSlot& slot, WeightStorage* storage) const;

  // In-place sum over the ranks; throws pllm::Error naming `what` when the collective fails.
  void all_reduce(float* data, int64_t count, std::string_view what) const;
  // Every rank's [rows, vocab_shard()] logits (`mine`, the columns of its vocabulary) gathered and
  // laid side by side into `logits` [rows, vocab]; `gathered` is scratch of size() * rows * vocab_shard().
  void gather_vocab_columns(const float* mine, int64_t rows, float* gathered, float* logits,
                            std::string_view what) const;

 private:
  TensorParallelShard(llama::TensorParallelSplit split, const pllm_collectives_ref& collectives,
                      const std::string& who);

  llama::TensorParallelSplit split_;
  pllm_collectives_ref collectives_{};
  std::string who_;
  TensorParallelRank layer_rank_;
};

}  // namespace pagedllm::llama_cpu
