#pragma once
// The LRU free queue of a block pool (vLLM V1's FreeKVCacheBlockQueue): an
// intrusive doubly linked list over block ids. Freed blocks go to the tail,
// allocation pops the head (the least recently freed block), and a prefix-cache
// hit takes a block out of the middle. Every operation is O(1) and allocates
// nothing after construction.

#include <cstdint>
#include <vector>

#include "core/kv/block_id.h"

namespace pagedllm {

class FreeBlockQueue {
 public:
  // All blocks start free, in id order (block 0 at the head).
  explicit FreeBlockQueue(int num_blocks);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(BlockId block) const;

  // Removes and returns the head (least recently freed). The queue must not be empty.
  BlockId pop_front();
  // Appends a block that is not in the queue at the tail (most recently freed).
  void push_back(BlockId block);
  // Takes a queued block out of the queue wherever it is.
  void remove(BlockId block);

  // Head to tail; O(n), for tests and debugging.
  std::vector<BlockId> to_vector() const;

 private:
  void check_block(BlockId block) const;

  // Node `sentinel_` (== number of blocks) closes the circular list, so the
  // links of a queued block are never "none".
  BlockId sentinel_;
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  std::vector<std::uint8_t> queued_;
  int size_ = 0;
};

}  // namespace pagedllm
