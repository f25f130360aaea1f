#include "core/kv/kv_cache_manager.h"

#include <algorithm>
#include <unordered_set>

#include "core/common/check.h"

namespace pagedllm {

KvCacheManager::KvCacheManager(const CacheConfig& config, int num_device_blocks,
                               int num_host_blocks)
    : block_size_(config.block_size),
      watermark_blocks_(static_cast<int>(config.watermark * num_device_blocks)),
      device_pool_(num_device_blocks, config.enable_prefix_caching),
      host_pool_(num_host_blocks, /*enable_caching=*/false) {
  PAGEDLLM_CHECK(block_size_ > 0, "block_size={}", block_size_);
  PAGEDLLM_CHECK(num_device_blocks > 0 && num_host_blocks >= 0,
                 "num_device_blocks={} num_host_blocks={}", num_device_blocks, num_host_blocks);
  PAGEDLLM_CHECK(config.watermark >= 0.0 && config.watermark < 1.0, "watermark={}",
                 config.watermark);
}

int KvCacheManager::blocks_for_tokens(int num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

KvCacheManager::SequenceBlocks& KvCacheManager::state(SequenceId sequence) {
  const auto found = sequences_.find(sequence);
  PAGEDLLM_CHECK(found != sequences_.end(), "unknown sequence {}", sequence);
  return found->second;
}

const KvCacheManager::SequenceBlocks& KvCacheManager::state(SequenceId sequence) const {
  const auto found = sequences_.find(sequence);
  PAGEDLLM_CHECK(found != sequences_.end(), "unknown sequence {}", sequence);
  return found->second;
}

// ---- Sequences ------------------------------------------------------------

void KvCacheManager::add_sequence(SequenceId sequence, std::string extra_key) {
  SequenceBlocks blocks;
  blocks.extra_key = std::move(extra_key);
  PAGEDLLM_CHECK(sequences_.emplace(sequence, std::move(blocks)).second,
                 "sequence {} already exists", sequence);
}

void KvCacheManager::fork(SequenceId parent, SequenceId child) {
  PAGEDLLM_CHECK(!has_sequence(child), "fork target {} already exists", child);
  SequenceBlocks copy = state(parent);
  PAGEDLLM_CHECK(!copy.swapped, "forking swapped-out sequence {}", parent);
  device_pool_.touch(copy.table);
  sequences_.emplace(child, std::move(copy));
}

void KvCacheManager::free(SequenceId sequence) {
  SequenceBlocks& blocks = state(sequence);
  std::vector<BlockId> reversed(blocks.table.rbegin(), blocks.table.rend());
  (blocks.swapped ? host_pool_ : device_pool_).free(reversed);
  blocks.table.clear();
  blocks.swapped = false;
  blocks.num_committed_blocks = 0;
}

void KvCacheManager::remove_sequence(SequenceId sequence) {
  free(sequence);
  sequences_.erase(sequence);
}

// ---- Capacity ---------------------------------------------------------------

AllocStatus KvCacheManager::can_allocate(int num_blocks, bool keep_watermark) const {
  if (num_blocks > num_device_blocks()) return AllocStatus::kNever;
  const int reserve = keep_watermark ? watermark_blocks_ : 0;
  if (num_blocks > num_free_device_blocks() - reserve) return AllocStatus::kLater;
  return AllocStatus::kOk;
}

int KvCacheManager::num_blocks_to_allocate(SequenceId sequence, int num_computed_tokens,
                                           int num_slots, const PrefixHit* hit) const {
  const SequenceBlocks& blocks = state(sequence);
  const BlockPool& pool = blocks.swapped ? host_pool_ : device_pool_;
  int num_blocks = 0;
  auto table_size = static_cast<int>(blocks.table.size());
  if (hit != nullptr) {
    for (const BlockId block : hit->blocks) {
      if (device_pool_.is_free(block)) ++num_blocks;
    }
    table_size = static_cast<int>(hit->blocks.size());
  }
  const int first_written = num_computed_tokens / block_size_;
  if (hit == nullptr && first_written < table_size &&
      pool.ref_count(blocks.table[static_cast<std::size_t>(first_written)]) > 1) {
    ++num_blocks;  // copy-on-write
  }
  num_blocks += std::max(0, blocks_for_tokens(num_computed_tokens + num_slots) - table_size);
  return num_blocks;
}

// ---- Prefix cache -----------------------------------------------------------

PrefixHit KvCacheManager::find_cached_prefix(SequenceId sequence,
                                             std::span<const std::int32_t> tokens) {
  SequenceBlocks& blocks = state(sequence);
  PrefixHit hit;
  hit.num_queried_tokens = static_cast<int>(tokens.size());
  // The last token is always computed, so a hit covers at most tokens - 1.
  hit.num_queried_blocks = std::max(0, static_cast<int>(tokens.size()) - 1) / block_size_;
  if (!prefix_caching_enabled()) return hit;
  extend_block_hashes(blocks.block_hashes, tokens, block_size_, blocks.extra_key);
  for (int index = 0; index < hit.num_queried_blocks; ++index) {
    const auto cached = device_pool_.lookup(blocks.block_hashes[static_cast<std::size_t>(index)]);
    // A later block may still be cached (an "orphan" whose parent was evicted),
    // but without its predecessors its KV is useless: stop at the first miss.
    if (!cached.has_value()) break;
    hit.blocks.push_back(*cached);
  }
  hit.num_tokens = static_cast<int>(hit.blocks.size()) * block_size_;
  return hit;
}

// ---- Slots ------------------------------------------------------------------

void KvCacheManager::allocate_slots(SequenceId sequence, int num_computed_tokens, int num_slots,
                                    const PrefixHit* hit, std::vector<BlockMapping>& copies) {
  SequenceBlocks& blocks = state(sequence);
  PAGEDLLM_CHECK(!blocks.swapped, "allocating slots for swapped-out sequence {}", sequence);
  PAGEDLLM_CHECK(num_computed_tokens >= 0 && num_slots >= 0, "num_computed={} num_slots={}",
                 num_computed_tokens, num_slots);
  const int needed = num_blocks_to_allocate(sequence, num_computed_tokens, num_slots, hit);
  PAGEDLLM_CHECK(needed <= num_free_device_blocks(), "sequence {} needs {} blocks, {} free",
                 sequence, needed, num_free_device_blocks());

  if (hit != nullptr) {
    PAGEDLLM_CHECK(blocks.table.empty(), "prefix hit for sequence {} that holds {} blocks",
                   sequence, blocks.table.size());
    PAGEDLLM_CHECK(num_computed_tokens == hit->num_tokens,
                   "sequence {}: num_computed {} != hit tokens {}", sequence,
                   num_computed_tokens, hit->num_tokens);
    device_pool_.touch(hit->blocks);
    blocks.table = hit->blocks;
    blocks.num_committed_blocks = static_cast<int>(hit->blocks.size());
    prefix_cache_queried_tokens_ += hit->num_queried_tokens;
    prefix_cache_queried_blocks_ += hit->num_queried_blocks;
    prefix_cache_hit_tokens_ += hit->num_tokens;
    prefix_cache_hit_blocks_ += static_cast<std::int64_t>(hit->blocks.size());
  }

  PAGEDLLM_CHECK(blocks_for_tokens(num_computed_tokens) <= static_cast<int>(blocks.table.size()),
                 "sequence {} has {} blocks for {} computed tokens", sequence,
                 blocks.table.size(), num_computed_tokens);
  const auto first_written = static_cast<std::size_t>(num_computed_tokens / block_size_);
  if (num_slots > 0 && first_written < blocks.table.size() &&
      device_pool_.ref_count(blocks.table[first_written]) > 1) {
    const BlockId shared = blocks.table[first_written];
    const BlockId copy = device_pool_.allocate(1).front();
    const BlockId released[] = {shared};
    device_pool_.free(released);
    blocks.table[first_written] = copy;
    copies.push_back({shared, copy});
    ++num_copied_blocks_;
  }

  const int missing = blocks_for_tokens(num_computed_tokens + num_slots) -
                      static_cast<int>(blocks.table.size());
  if (missing > 0) {
    const std::vector<BlockId> fresh = device_pool_.allocate(missing);
    blocks.table.insert(blocks.table.end(), fresh.begin(), fresh.end());
  }
}

void KvCacheManager::commit_computed_tokens(SequenceId sequence,
                                            std::span<const std::int32_t> tokens,
                                            int num_computed_tokens) {
  SequenceBlocks& blocks = state(sequence);
  PAGEDLLM_CHECK(!blocks.swapped, "committing tokens of swapped-out sequence {}", sequence);
  PAGEDLLM_CHECK(num_computed_tokens <= static_cast<int>(tokens.size()),
                 "sequence {}: {} computed tokens but only {} tokens", sequence,
                 num_computed_tokens, tokens.size());
  const auto keep = static_cast<std::size_t>(blocks_for_tokens(num_computed_tokens));
  PAGEDLLM_CHECK(keep <= blocks.table.size(), "sequence {}: {} computed tokens need {} blocks, has {}",
                 sequence, num_computed_tokens, keep, blocks.table.size());
  if (keep < blocks.table.size()) {
    // Rolled-back lookahead: these blocks never held accepted KV, so never a hash.
    std::vector<BlockId> rolled_back(blocks.table.rbegin(),
                                     blocks.table.rend() - static_cast<std::ptrdiff_t>(keep));
    for (const BlockId block : rolled_back) {
      PAGEDLLM_CHECK(!device_pool_.hash_of(block).has_value(), "rolled-back block {} of sequence {} carries a hash", block, sequence);
    }
    device_pool_.free(rolled_back);
    blocks.table.resize(keep);
  }

  if (!prefix_caching_enabled()) return;
  const int num_full_blocks = num_computed_tokens / block_size_;
  if (num_full_blocks <= blocks.num_committed_blocks) return;
  extend_block_hashes(blocks.block_hashes,
                      tokens.first(static_cast<std::size_t>(num_full_blocks * block_size_)),
                      block_size_, blocks.extra_key);
  for (int index = blocks.num_committed_blocks; index < num_full_blocks; ++index) {
    const BlockId block = blocks.table[static_cast<std::size_t>(index)];
    // A block shared with a fork may already be cached by the fork's commit.
    if (!device_pool_.hash_of(block).has_value()) {
      device_pool_.cache(block, blocks.block_hashes[static_cast<std::size_t>(index)]);
    }
  }
  blocks.num_committed_blocks = num_full_blocks;
}

std::span<const BlockId> KvCacheManager::block_table(SequenceId sequence) const {
  return state(sequence).table;
}

std::int64_t KvCacheManager::slot(SequenceId sequence, int position) const {
  const SequenceBlocks& blocks = state(sequence);
  PAGEDLLM_CHECK(!blocks.swapped, "slot of swapped-out sequence {}", sequence);
  const auto index = static_cast<std::size_t>(position / block_size_);
  PAGEDLLM_CHECK(position >= 0 && index < blocks.table.size(),
                 "sequence {}: position {} outside its {} blocks", sequence, position,
                 blocks.table.size());
  return static_cast<std::int64_t>(blocks.table[index]) * block_size_ + position % block_size_;
}

// ---- Swap -------------------------------------------------------------------

int KvCacheManager::num_distinct_blocks(std::span<const SequenceId> sequences) const {
  std::unordered_set<BlockId> distinct;
  for (const SequenceId sequence : sequences) {
    const SequenceBlocks& blocks = state(sequence);
    distinct.insert(blocks.table.begin(), blocks.table.end());
  }
  return static_cast<int>(distinct.size());
}

bool KvCacheManager::can_swap_out(std::span<const SequenceId> sequences) const {
  return num_distinct_blocks(sequences) <= num_free_host_blocks();
}

bool KvCacheManager::is_swapped(SequenceId sequence) const { return state(sequence).swapped; }

void KvCacheManager::move_blocks(std::span<const SequenceId> sequences, BlockPool& from,
                                 BlockPool& to, bool to_host,
                                 std::vector<BlockMapping>& mappings) {
  std::unordered_map<BlockId, BlockId> moved;
  for (const SequenceId sequence : sequences) {
    SequenceBlocks& blocks = state(sequence);
    PAGEDLLM_CHECK(blocks.swapped != to_host, "sequence {} is already {}", sequence,
                   to_host ? "swapped out" : "on the device");
    std::vector<BlockId> new_table;
    new_table.reserve(blocks.table.size());
    for (const BlockId block : blocks.table) {
      const auto found = moved.find(block);
      if (found != moved.end()) {
        const BlockId shared[] = {found->second};
        to.touch(shared);
        new_table.push_back(found->second);
        continue;
      }
      const BlockId target = to.allocate(1).front();
      moved.emplace(block, target);
      mappings.push_back({block, target});
      new_table.push_back(target);
    }
    std::vector<BlockId> reversed(blocks.table.rbegin(), blocks.table.rend());
    from.free(reversed);
    blocks.table = std::move(new_table);
    blocks.swapped = to_host;
    // Swapped-in blocks are new device blocks: offer them to the cache again.
    blocks.num_committed_blocks = 0;
  }
  (to_host ? num_swapped_out_blocks_ : num_swapped_in_blocks_) +=
      static_cast<std::int64_t>(moved.size());
}

void KvCacheManager::swap_out(std::span<const SequenceId> sequences,
                              std::vector<BlockMapping>& mappings) {
  PAGEDLLM_CHECK(can_swap_out(sequences), "swap out of {} blocks with {} free host blocks",
                 num_distinct_blocks(sequences), num_free_host_blocks());
  move_blocks(sequences, device_pool_, host_pool_, /*to_host=*/true, mappings);
}

void KvCacheManager::swap_in(std::span<const SequenceId> sequences,
                             std::vector<BlockMapping>& mappings) {
  PAGEDLLM_CHECK(num_distinct_blocks(sequences) <= num_free_device_blocks(),
                 "swap in of {} blocks with {} free device blocks",
                 num_distinct_blocks(sequences), num_free_device_blocks());
  move_blocks(sequences, host_pool_, device_pool_, /*to_host=*/false, mappings);
}

// ---- Introspection ----------------------------------------------------------

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats stats;
  stats.num_device_blocks = num_device_blocks();
  stats.num_free_device_blocks = num_free_device_blocks();
  stats.num_hashed_device_blocks = device_pool_.num_hashed_blocks();
  stats.num_host_blocks = num_host_blocks();
  stats.num_free_host_blocks = num_free_host_blocks();
  stats.prefix_cache_queried_tokens = prefix_cache_queried_tokens_;
  stats.prefix_cache_queried_blocks = prefix_cache_queried_blocks_;
  stats.prefix_cache_hit_tokens = prefix_cache_hit_tokens_;
  stats.prefix_cache_hit_blocks = prefix_cache_hit_blocks_;
  stats.num_evictions = device_pool_.num_evictions();
  stats.num_copied_blocks = num_copied_blocks_;
  stats.num_swapped_out_blocks = num_swapped_out_blocks_;
  stats.num_swapped_in_blocks = num_swapped_in_blocks_;
  return stats;
}

void KvCacheManager::check_invariants() const {
  device_pool_.check_invariants();
  host_pool_.check_invariants();
  std::vector<int> device_owners(static_cast<std::size_t>(num_device_blocks()), 0);
  std::vector<int> host_owners(static_cast<std::size_t>(num_host_blocks()), 0);
  for (const auto& [sequence, blocks] : sequences_) {
    std::unordered_set<BlockId> seen;
    for (const BlockId block : blocks.table) {
      PAGEDLLM_CHECK(seen.insert(block).second, "sequence {} holds block {} twice", sequence,
                     block);
      auto& owners = blocks.swapped ? host_owners : device_owners;
      PAGEDLLM_CHECK(block >= 0 && block < static_cast<int>(owners.size()),
                     "sequence {} holds out-of-range block {}", sequence, block);
      ++owners[static_cast<std::size_t>(block)];
    }
    PAGEDLLM_CHECK(blocks.num_committed_blocks <= static_cast<int>(blocks.table.size()),
                   "sequence {}: {} committed blocks > {} blocks", sequence,
                   blocks.num_committed_blocks, blocks.table.size());
  }
  for (BlockId block = 0; block < num_device_blocks(); ++block) {
    PAGEDLLM_CHECK(device_pool_.ref_count(block) == device_owners[static_cast<std::size_t>(block)],
                   "device block {}: ref_count {} but {} owners", block,
                   device_pool_.ref_count(block), device_owners[static_cast<std::size_t>(block)]);
  }
  for (BlockId block = 0; block < num_host_blocks(); ++block) {
    PAGEDLLM_CHECK(host_pool_.ref_count(block) == host_owners[static_cast<std::size_t>(block)],
                   "host block {}: ref_count {} but {} owners", block, host_pool_.ref_count(block),
                   host_owners[static_cast<std::size_t>(block)]);
  }
}

}  // namespace pagedllm
