#pragma once
// A pool of KV blocks: reference counts, the LRU free queue and, when prefix
// caching is on, the map from block hash to the block that holds it.
//
// A block is in exactly one of three states:
//   owned     ref_count > 0, not in the free queue (may carry a hash)
//   cached    ref_count == 0, in the free queue, carries a hash: reusable by a
//             prefix-cache hit until allocation pops it (eviction)
//   empty     ref_count == 0, in the free queue, no hash
// The device pool and the host (swap) pool are both BlockPools; the host pool
// never caches.

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv/block_hash.h"
#include "core/kv/block_id.h"
#include "core/kv/free_block_queue.h"

namespace pagedllm {

class BlockPool {
 public:
  BlockPool(int num_blocks, bool enable_caching);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Free blocks, cached ones included: all of them can be handed out.
  int num_free_blocks() const { return free_queue_.size(); }
  // Blocks that carry a hash (owned or cached).
  int num_hashed_blocks() const { return static_cast<int>(cached_blocks_.size()); }
  bool caching_enabled() const { return enable_caching_; }

  // Pops `count` blocks from the head of the free queue, evicting the hash of
  // any cached block popped, and gives each a reference count of 1.
  std::vector<BlockId> allocate(int count);
  // Adds one owner to each block; a free (cached) block leaves the free queue.
  void touch(std::span<const BlockId> blocks);
  // Drops one owner from each block, in the given order; blocks that reach zero
  // owners go to the tail of the free queue, keeping their hash.
  void free(std::span<const BlockId> blocks);

  // The block holding `hash`, if any.
  std::optional<BlockId> lookup(const BlockHash& hash) const;
  // Registers `block` (owned, full, not hashed) as holding `hash`. Returns false
  // and leaves the block unhashed when another block already holds the hash.
  bool cache(BlockId block, const BlockHash& hash);

  int ref_count(BlockId block) const;
  bool is_free(BlockId block) const { return free_queue_.contains(block); }
  const std::optional<BlockHash>& hash_of(BlockId block) const;
  // Head (next to be allocated) to tail.
  std::vector<BlockId> free_queue_order() const { return free_queue_.to_vector(); }
  // Cached blocks whose hash was dropped because allocation popped them.
  std::int64_t num_evictions() const { return num_evictions_; }

  // Throws InternalError when the pool's own bookkeeping is inconsistent.
  void check_invariants() const;

 private:
  struct Block {
    int ref_count = 0;
    std::optional<BlockHash> hash;
  };

  Block& block_at(BlockId block);
  const Block& block_at(BlockId block) const;

  bool enable_caching_;
  std::vector<Block> blocks_;
  FreeBlockQueue free_queue_;
  std::unordered_map<BlockHash, BlockId, BlockHashBuckets> cached_blocks_;
  std::int64_t num_evictions_ = 0;
};

}  // namespace pagedllm
