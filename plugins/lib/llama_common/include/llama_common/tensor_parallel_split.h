#pragma once
// How a Llama model splits over the ranks of a tensor-parallel group (docs/tensor-parallel.md, "What
// each rank holds"), whatever the device: the rank's view of the config and the checkpoint block of
// each weight. One arithmetic for the CPU forward (llama_cpu TensorParallelShard, also spec_eagle's
// head) and the CUDA forward (llama_cuda), so that every device splits alike.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagedllm/sdk.h"
#include "llama_common/llama_config.h"
#include "llama_common/weight_layout.h"

namespace pagedllm::llama {

// The part of one checkpoint tensor a rank holds: a block of rows, or of columns of every row.
struct ShardBlock {
  std::vector<int64_t> shape;      // the rank's [rows, columns] (or [n] for a norm)
  int64_t first_row = 0;           // where it starts in the rank's fused matrix (q | k | v, gate | up)
  int64_t source_first_row = 0;    // where it starts in the checkpoint tensor
  int64_t source_first_col = 0;
  bool whole = false;              // the tensor as it is (norms)
};

class TensorParallelSplit {
 public:
  // The group `collectives` (may be null) joins: nullopt when there is none or it has one rank.
  // Throws pllm::Error prefixed with `who` ("models_llama") when its get_info fails, or naming the
  // numbers when the heads, kv heads or intermediate size do not divide among the ranks.
  static std::optional<TensorParallelSplit> join(const LlamaConfig& full, const pllm_collectives_ref* collectives,
                                                 const std::string& who);
  TensorParallelSplit(const LlamaConfig& full, int32_t rank, int32_t size, const std::string& who);

  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  const LlamaConfig& full() const { return full_; }
  // The rank's view of the model: its heads, kv heads and intermediate columns (the whole vocabulary).
  const LlamaConfig& config() const { return config_; }
  // ceil(vocab / N): rank r holds vocabulary rows [vocab_first(), vocab_first() + vocab_rows()) of the
  // embedding and lm_head, r * vocab_shard() onwards (the last rank's fewer when N does not divide).
  int64_t vocab_shard() const { return vocab_shard_; }
  int64_t vocab_first() const { return vocab_first_; }
  int64_t vocab_rows() const { return vocab_rows_; }
  // The first of the rank's kv heads (the same on N / kv_heads ranks when they are replicated).
  int32_t kv_head_first() const { return kv_head_first_; }

  // The checkpoint block of `slot` (a slot of model_slots(full())) this rank holds.
  ShardBlock block(const WeightSlot& slot) const;
  // "rank 1 of 2: heads 4..7, kv heads ..., vocabulary ...": for the load's log line.
  std::string describe() const;

 private:
  // block() of a slot as if it were a whole checkpoint tensor.
  ShardBlock split_block(const WeightSlot& slot) const;

  LlamaConfig full_;
  LlamaConfig config_;
  int32_t rank_ = 0, size_ = 1;
  int32_t kv_head_first_ = 0;
  int64_t vocab_shard_ = 0, vocab_first_ = 0, vocab_rows_ = 0;
};

}  // namespace pagedllm::llama
