#include "llama_cpu/tensor_parallel_shard.h"

#include <algorithm>
#include <cstring>

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
  if (!collectives) return std::nullopt;
  const pllm_collectives_ref& ref = pllm::require(collectives, (who + ": create args: collectives").c_str());
  if (!ref.api || !ref.comm) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, who + ": empty collectives ref");
  pllm_communicator_info group{};
  group.struct_size = sizeof group;
  pllm_error error{};
  const pllm_status status = ref.api->get_info(ref.comm, &group, &error);
  if (status != PLLM_OK) throw pllm::Error(status, who + ": collectives get_info: " + error.message);
  if (group.world_size <= 1) return std::nullopt;
  return TensorParallelShard(full, ref, group, who);
}

TensorParallelShard::TensorParallelShard(const LlamaConfig& full, const pllm_collectives_ref& collectives,
                                         const pllm_communicator_info& group, const std::string& who)
    : full_(full), config_(full), collectives_(collectives), who_(who) {
  const int32_t n = group.world_size, r = group.rank;
  const std::string prefix = who + ": tensor_parallel_size " + std::to_string(n) + ": ";
  if (full.num_heads % n != 0) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, prefix + "the model's " + std::to_string(full.num_heads) +
                                                  " attention heads do not divide among " + std::to_string(n) +
                                                  " ranks");
  }
  if (full.num_kv_heads % n != 0 && n % full.num_kv_heads != 0) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                      prefix + "the model's " + std::to_string(full.num_kv_heads) +
                          " kv heads neither divide among the ranks nor replicate evenly over them");
  }
  if (full.intermediate_size % n != 0) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, prefix + "intermediate_size " + std::to_string(full.intermediate_size) +
                                                  " does not divide among the ranks");
  }
  config_.num_heads = full.num_heads / n;
  config_.intermediate_size = full.intermediate_size / n;
  if (full.num_kv_heads >= n) {
    config_.num_kv_heads = full.num_kv_heads / n;
    kv_head_first_ = r * config_.num_kv_heads;
  } else {
    // More ranks than kv heads: each rank holds the one kv head its query heads read (vLLM's replication).
    config_.num_kv_heads = 1;
    kv_head_first_ = r / (n / full.num_kv_heads);
  }
  vocab_shard_ = (full.vocab_size + n - 1) / n;
  vocab_first_ = std::min<int64_t>(int64_t(r) * vocab_shard_, full.vocab_size);
  vocab_rows_ = std::min<int64_t>(vocab_shard_, full.vocab_size - vocab_first_);
  layer_rank_.rank = r;
  layer_rank_.size = n;
  // By value: the shard is copied and moved about, the group it names is not.
  layer_rank_.all_reduce = [collectives, who](float* data, int64_t count, std::string_view what) {
    all_reduce_sum(collectives, who, data, count, what);
  };
}

WeightPart TensorParallelShard::part(const llama::WeightSlot& slot, WeightStorage* storage) const {
  WeightPart part{slot.name, slot.shape, storage, slot.first_row};
  const int64_t d = full_.head_dim, rank = layer_rank_.rank;
  const int64_t q_local = int64_t(config_.num_heads) * d, kv_local = int64_t(config_.num_kv_heads) * d;
  const int64_t inter_local = config_.intermediate_size;
  part.source_shape = slot.shape;
  switch (slot.matrix) {
    case llama::Matrix::kEmbed:
    case llama::Matrix::kLmHead:
      part.shape = {vocab_rows_, slot.width()};
      part.source_first_row = vocab_first_;
      break;
    case llama::Matrix::kQkv:
      // The fused matrix holds q | k | v rows; slot.first_row says which one this is.
      if (slot.first_row == 0) {
        part.shape = {q_local, slot.width()};
        part.source_first_row = rank * q_local;
      } else {
        part.shape = {kv_local, slot.width()};
        part.source_first_row = int64_t(kv_head_first_) * d;
        part.first_row = slot.first_row == full_.q_size() ? q_local : q_local + kv_local;
      }
      break;
    case llama::Matrix::kO:
      part.shape = {slot.shape[0], q_local};
      part.source_first_col = rank * q_local;
      break;
    case llama::Matrix::kGateUp:
      // gate | up rows: each rank's intermediate columns of both.
      part.shape = {inter_local, slot.width()};
      part.source_first_row = rank * inter_local;
      part.first_row = slot.first_row == 0 ? 0 : inter_local;
      break;
    case llama::Matrix::kDown:
      part.shape = {slot.shape[0], inter_local};
      part.source_first_col = rank * inter_local;
      break;
    case llama::Matrix::kNorm:
    case llama::Matrix::kInputNorm:
    case llama::Matrix::kPostNorm:
      part.source_shape.clear();
      break;
  }
  return part;
}

void TensorParallelShard::all_reduce(float* data, int64_t count, std::string_view what) const {
  all_reduce_sum(collectives_, who_, data, count, what);
}

void TensorParallelShard::gather_vocab_columns(const float* mine, int64_t rows, float* gathered, float* logits,
                                               std::string_view what) const {
  if (rows <= 0) return;
  const int64_t shard = vocab_shard_, vocab = full_.vocab_size;
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
