#include "llama_cpu/tensor_parallel_shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama_cpu {
namespace {

[[noreturn]] void fail(const std::string& who, pllm_status status, std::string_view call, std::string_view what,
                       const pllm_error& error) {
  throw pllm::Error(status, who + ": tensor-parallel " + std::string(call) + " of " + std::string(what) + ": " +
                                error.message);
}

void all_reduce_sum(const pllm_collectives_ref& collectives, const std::string& who, float* data, int64_t count,
                    std::string_view what) {
  pllm_error error{};
  const pllm_status status =
      collectives.api->all_reduce(collectives.comm, data, count, PLLM_DTYPE_F32, PLLM_REDUCE_SUM, nullptr, &error);
  if (status != PLLM_OK) fail(who, status, "all_reduce", what, error);
}

}  // namespace

std::optional<TensorParallelShard> TensorParallelShard::join(const LlamaConfig& full,
                                                             const pllm_collectives_ref* collectives,
                                                             const std::string& who) {
  std::optional<llama::TensorParallelSplit> split = llama::TensorParallelSplit::join(full, collectives, who);
  if (!split) return std::nullopt;
  return TensorParallelShard(std::move(*split), *collectives, who);
}

TensorParallelShard::TensorParallelShard(llama::TensorParallelSplit split, const pllm_collectives_ref& collectives,
                                         const std::string& who)
    : split_(std::move(split)), collectives_(collectives), who_(who) {
  layer_rank_.rank = split_.rank();
  layer_rank_.size = split_.size();
  // By value: the shard is copied and moved about, the group it names is not.
  layer_rank_.all_reduce = [collectives, who](float* data, int64_t count, std::string_view what) {
    all_reduce_sum(collectives, who, data, count, what);
  };
}

WeightPart TensorParallelShard::part(const llama::WeightSlot& slot, WeightStorage* storage) const {
  const llama::ShardBlock block = split_.block(slot);
  WeightPart part{slot.name, block.shape, storage, block.first_row};
  if (!block.whole) {
    part.source_shape = slot.checkpoint_shape();
    part.source_first_row = block.source_first_row;
    part.source_first_col = block.source_first_col;
  }
  return part;
}

void TensorParallelShard::all_reduce(float* data, int64_t count, std::string_view what) const {
  all_reduce_sum(collectives_, who_, data, count, what);
}

void TensorParallelShard::gather_vocab_columns(const float* mine, int64_t rows, float* gathered, float* logits,
                                               std::string_view what) const {
  if (rows <= 0) return;
  const int64_t shard = split_.vocab_shard(), vocab = split_.full().vocab_size;
  pllm_error error{};
  const pllm_status status =
      collectives_.api->all_gather(collectives_.comm, mine, gathered, rows * shard, PLLM_DTYPE_F32, nullptr, &error);
  if (status != PLLM_OK) fail(who_, status, "all_gather", what, error);
  for (int64_t rank = 0; rank < layer_rank_.size; ++rank) {
    const int64_t first = rank * shard, columns = std::min(shard, vocab - first);
    for (int64_t i = 0; i < rows && columns > 0; ++i) {
      std::memcpy(logits + i * vocab + first, gathered + (rank * rows + i) * shard,
                  static_cast<std::size_t>(columns) * sizeof(float));
    }
  }
}

}  // namespace pagedllm::llama_cpu
