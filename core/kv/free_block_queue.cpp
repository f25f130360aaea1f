#include "core/kv/free_block_queue.h"

#include "core/common/check.h"

namespace pagedllm {

FreeBlockQueue::FreeBlockQueue(int num_blocks)
    : sentinel_(num_blocks),
      prev_(static_cast<std::size_t>(num_blocks) + 1),
      next_(static_cast<std::size_t>(num_blocks) + 1),
      queued_(static_cast<std::size_t>(num_blocks), 0) {
  PAGEDLLM_CHECK(num_blocks >= 0, "num_blocks={}", num_blocks);
  prev_[static_cast<std::size_t>(sentinel_)] = sentinel_;
  next_[static_cast<std::size_t>(sentinel_)] = sentinel_;
  for (BlockId block = 0; block < num_blocks; ++block) push_back(block);
}

void FreeBlockQueue::check_block(BlockId block) const {
  PAGEDLLM_CHECK(block >= 0 && block < sentinel_, "block {} outside 0..{}", block, sentinel_ - 1);
}

bool FreeBlockQueue::contains(BlockId block) const {
  check_block(block);
  return queued_[static_cast<std::size_t>(block)] != 0;
}

BlockId FreeBlockQueue::pop_front() {
  PAGEDLLM_CHECK(size_ > 0, "pop_front on an empty free queue");
  const BlockId head = next_[static_cast<std::size_t>(sentinel_)];
  remove(head);
  return head;
}

void FreeBlockQueue::push_back(BlockId block) {
  PAGEDLLM_CHECK(!contains(block), "block {} is already free", block);
  const auto index = static_cast<std::size_t>(block);
  const BlockId tail = prev_[static_cast<std::size_t>(sentinel_)];
  prev_[index] = tail;
  next_[index] = sentinel_;
  next_[static_cast<std::size_t>(tail)] = block;
  prev_[static_cast<std::size_t>(sentinel_)] = block;
  queued_[index] = 1;
  ++size_;
}

void FreeBlockQueue::remove(BlockId block) {
  PAGEDLLM_CHECK(contains(block), "block {} is not in the free queue", block);
  const auto index = static_cast<std::size_t>(block);
  next_[static_cast<std::size_t>(prev_[index])] = next_[index];
  prev_[static_cast<std::size_t>(next_[index])] = prev_[index];
  queued_[index] = 0;
  --size_;
}

std::vector<BlockId> FreeBlockQueue::to_vector() const {
  std::vector<BlockId> order;
  order.reserve(static_cast<std::size_t>(size_));
  for (BlockId block = next_[static_cast<std::size_t>(sentinel_)]; block != sentinel_;
       block = next_[static_cast<std::size_t>(block)]) {
    order.push_back(block);
  }
  return order;
}

}  // namespace pagedllm
