#include "core/kv/block_pool.h"

#include "core/common/check.h"

namespace pagedllm {

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : enable_caching_(enable_caching),
      blocks_(static_cast<std::size_t>(num_blocks)),
      free_queue_(num_blocks) {}

BlockPool::Block& BlockPool::block_at(BlockId block) {
  PAGEDLLM_CHECK(block >= 0 && block < num_blocks(), "block {} outside 0..{}", block,
                 num_blocks() - 1);
  return blocks_[static_cast<std::size_t>(block)];
}

const BlockPool::Block& BlockPool::block_at(BlockId block) const {
  PAGEDLLM_CHECK(block >= 0 && block < num_blocks(), "block {} outside 0..{}", block,
                 num_blocks() - 1);
  return blocks_[static_cast<std::size_t>(block)];
}

std::vector<BlockId> BlockPool::allocate(int count) {
  PAGEDLLM_CHECK(count >= 0 && count <= num_free_blocks(), "allocate {} blocks with {} free",
                 count, num_free_blocks());
  std::vector<BlockId> allocated;
  allocated.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const BlockId id = free_queue_.pop_front();
    Block& block = block_at(id);
    PAGEDLLM_CHECK(block.ref_count == 0, "free block {} has ref_count {}", id, block.ref_count);
    if (block.hash.has_value()) {
      cached_blocks_.erase(*block.hash);
      block.hash.reset();
      ++num_evictions_;
    }
    block.ref_count = 1;
    allocated.push_back(id);
  }
  return allocated;
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (const BlockId id : blocks) {
    Block& block = block_at(id);
    if (block.ref_count == 0) free_queue_.remove(id);
    ++block.ref_count;
  }
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (const BlockId id : blocks) {
    Block& block = block_at(id);
    PAGEDLLM_CHECK(block.ref_count > 0, "freeing block {} that has no owner", id);
    if (--block.ref_count == 0) free_queue_.push_back(id);
  }
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& hash) const {
  const auto found = cached_blocks_.find(hash);
  if (found == cached_blocks_.end()) return std::nullopt;
  return found->second;
}

bool BlockPool::cache(BlockId id, const BlockHash& hash) {
  PAGEDLLM_CHECK(enable_caching_, "caching block {} in a pool without prefix caching", id);
  Block& block = block_at(id);
  PAGEDLLM_CHECK(block.ref_count > 0, "caching block {} that has no owner", id);
  PAGEDLLM_CHECK(!block.hash.has_value(), "block {} is already cached", id);
  if (!cached_blocks_.emplace(hash, id).second) return false;
  block.hash = hash;
  return true;
}

int BlockPool::ref_count(BlockId block) const { return block_at(block).ref_count; }

const std::optional<BlockHash>& BlockPool::hash_of(BlockId block) const {
  return block_at(block).hash;
}

void BlockPool::check_invariants() const {
  int num_free = 0;
  int num_hashed = 0;
  for (BlockId id = 0; id < num_blocks(); ++id) {
    const Block& block = block_at(id);
    PAGEDLLM_CHECK(block.ref_count >= 0, "block {} has ref_count {}", id, block.ref_count);
    PAGEDLLM_CHECK((block.ref_count == 0) == free_queue_.contains(id),
                   "block {}: ref_count {} but in free queue = {}", id, block.ref_count,
                   free_queue_.contains(id));
    if (block.ref_count == 0) ++num_free;
    if (block.hash.has_value()) {
      ++num_hashed;
      const auto found = cached_blocks_.find(*block.hash);
      PAGEDLLM_CHECK(found != cached_blocks_.end() && found->second == id,
                     "block {} carries a hash the cache does not map to it", id);
    }
  }
  PAGEDLLM_CHECK(num_free == free_queue_.size(), "{} blocks with no owner, free queue holds {}",
                 num_free, free_queue_.size());
  PAGEDLLM_CHECK(num_hashed == num_hashed_blocks(), "{} hashed blocks, cache map holds {}",
                 num_hashed, num_hashed_blocks());
}

}  // namespace pagedllm
