#include "llama_common/tensor_parallel_split.h"

#include <algorithm>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama {

std::optional<TensorParallelSplit> TensorParallelSplit::join(const LlamaConfig& full,
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
  return TensorParallelSplit(full, group.rank, group.world_size, who);
}

TensorParallelSplit::TensorParallelSplit(const LlamaConfig& full, int32_t rank, int32_t size, const std::string& who)
    : full_(full), config_(full), rank_(rank), size_(size) {
  const int32_t n = size, r = rank;
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
  if (full.num_experts > 0) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, prefix + "the model's mixture-of-experts layers (num_experts " +
                                                  std::to_string(full.num_experts) + ") are not split over "
                                                  "tensor-parallel ranks yet");
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
}

namespace {

// `rows` rows of the slot's width: [rows, width] for a matrix, [rows] for a vector (a bias).
std::vector<int64_t> rows_of(const WeightSlot& slot, int64_t rows) {
  if (slot.shape.size() == 1) return {rows};
  return {rows, slot.width()};
}

}  // namespace

ShardBlock TensorParallelSplit::block(const WeightSlot& slot) const {
  ShardBlock block = split_block(slot);
  // A block of a fused checkpoint tensor (Phi-3's): its part starts further down that tensor.
  block.source_first_row += slot.source_first_row;
  return block;
}

ShardBlock TensorParallelSplit::split_block(const WeightSlot& slot) const {
  ShardBlock block{slot.shape, slot.first_row};
  const int64_t d = full_.head_dim;
  const int64_t q_local = int64_t(config_.num_heads) * d, kv_local = int64_t(config_.num_kv_heads) * d;
  const int64_t inter_local = config_.intermediate_size;
  switch (slot.matrix) {
    case Matrix::kEmbed:
    case Matrix::kLmHead:
      block.shape = {vocab_rows_, slot.width()};
      block.source_first_row = vocab_first_;
      break;
    case Matrix::kQkv:
    case Matrix::kQkvBias:
      // The fused matrix (vector) holds q | k | v rows; slot.first_row says which one this is.
      if (slot.first_row == 0) {
        block.shape = rows_of(slot, q_local);
        block.source_first_row = rank_ * q_local;
      } else {
        block.shape = rows_of(slot, kv_local);
        block.source_first_row = int64_t(kv_head_first_) * d;
        block.first_row = slot.first_row == full_.q_size() ? q_local : q_local + kv_local;
      }
      break;
    case Matrix::kO:
      block.shape = {slot.shape[0], q_local};
      block.source_first_col = rank_ * q_local;
      break;
    case Matrix::kGateUp:
    case Matrix::kGateUpBias:
      // gate | up rows: each rank's intermediate columns of both.
      block.shape = rows_of(slot, inter_local);
      block.source_first_row = rank_ * inter_local;
      block.first_row = slot.first_row == 0 ? 0 : inter_local;
      break;
    case Matrix::kDown:
      block.shape = {slot.shape[0], inter_local};
      block.source_first_col = rank_ * inter_local;
      break;
    case Matrix::kNorm:
    case Matrix::kInputNorm:
    case Matrix::kPostNorm:
    case Matrix::kQNorm:
    case Matrix::kKNorm:
    case Matrix::kAttnOutNorm:
    case Matrix::kMlpOutNorm:
    // The row-parallel products' biases are added once, to the sum of the ranks' partials.
    case Matrix::kOBias:
    case Matrix::kDownBias:
    // Never reached: the constructor refuses mixture-of-experts models.
    case Matrix::kRouter:
    case Matrix::kExpertsGateUp:
    case Matrix::kExpertsDown:
      block.whole = true;
      break;
  }
  return block;
}

std::string TensorParallelSplit::describe() const {
  const auto range = [](int64_t first, int64_t count) {
    return std::to_string(first) + ".." + std::to_string(first + count - 1);
  };
  return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": heads " +
         range(int64_t(rank_) * config_.num_heads, config_.num_heads) + ", kv heads " +
         range(kv_head_first_, config_.num_kv_heads) + ", intermediate " +
         range(int64_t(rank_) * config_.intermediate_size, config_.intermediate_size) + ", vocabulary " +
         range(vocab_first_, vocab_rows_);
}

}  // namespace pagedllm::llama
